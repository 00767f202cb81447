"""Console sessions: who a browser is signed in as, and its CSRF token.

A session is a random id in an HttpOnly, SameSite=Strict cookie, mapped in this process's memory
to the bearer token the user signed in with (re-checked against the policy on every request, so
a token revoked in the policy file signs the session out at once) and to a CSRF token. Nothing of
either is ever logged.

CSRF (synchronizer token): every request that changes data, the sign-in included, must carry the
session's CSRF token in the X-CSRF-Token header; the script reads it from GET /api/session (same
origin only: the API sends no CORS headers, so another site's page can neither read the token nor
send the header). SameSite=Strict keeps the cookie off cross-site requests as a second line.
Signing in makes a new session (no fixation of an id planted before sign-in).

Bounded: at most MAX_SESSIONS sessions (the least recently used goes first), each ending after
IDLE_SECONDS without a request.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

COOKIE = "leaseq_console"
CSRF_HEADER = "X-CSRF-Token"
MAX_SESSIONS = 10_000
IDLE_SECONDS = 8 * 3600.0


@dataclass
class Session:
    id: str
    csrf: str
    token: str | None = None  # the bearer token signed in with; None: not signed in
    last_used: float = field(default=0.0)


class Sessions:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if now - session.last_used > IDLE_SECONDS:
            del self._sessions[session_id]
            return None
        session.last_used = now
        self._sessions.move_to_end(session_id)
        return session

    def new(self, token: str | None = None) -> Session:
        while len(self._sessions) >= MAX_SESSIONS:
            self._sessions.popitem(last=False)
        session = Session(
            secrets.token_urlsafe(32), secrets.token_urlsafe(32), token, self._clock()
        )
        self._sessions[session.id] = session
        return session

    def end(self, session: Session) -> None:
        self._sessions.pop(session.id, None)

    @staticmethod
    def csrf_ok(session: Session | None, sent: str | None) -> bool:
        return (
            session is not None
            and sent is not None
            and hmac.compare_digest(session.csrf.encode(), sent.encode("utf-8", "replace"))
        )
