"""Console sessions: who a browser is signed in as, and the CSRF token of its requests.

A session exists only from a sign-in on: a random id in an HttpOnly, SameSite=Strict cookie,
mapped in this process's memory to the bearer token the user signed in with (re-checked against
the policy on every request, so a token revoked in the policy file signs the session out at once)
and to a CSRF token. Nothing of either is ever logged.

Visitors who have not signed in (everyone, without --auth-policy) hold no server state at all:
their CSRF token is derived from a random nonce in a cookie of their own (signed double-submit:
the token is a MAC of the nonce under this process's secret). So no number of anonymous requests
can fill the session table and sign anyone out.

CSRF: every request that changes data, the sign-in included (no login CSRF), must carry the
X-CSRF-Token header: the session's token when signed in, else the MAC of the visitor's nonce. The
script reads it from GET /api/session (same origin only: the API sends no CORS headers, so another
site's page can neither read the token nor send the header). SameSite=Strict keeps the cookies off
cross-site requests as a second line. Signing in makes a new session (no fixation of an id planted
before sign-in).

Bounded: at most MAX_SESSIONS sessions, each ending after IDLE_SECONDS without a request, and at
most MAX_PER_TOKEN per token. Only a sign-in with a valid token adds one; when a token reaches its
cap, that token's least recently used session goes (a user's many sign-ins push out only their
own); when the table is full, the expired sessions go first, then the least recently used.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

COOKIE = "leaseq_console"  # the session id (signed-in visitors only)
NONCE_COOKIE = "leaseq_console_nonce"  # the anonymous visitor's CSRF nonce
CSRF_HEADER = "X-CSRF-Token"
MAX_SESSIONS = 10_000
MAX_PER_TOKEN = 32  # a user signed in from this many browsers at once
IDLE_SECONDS = 8 * 3600.0
_NONCE = re.compile(r"[A-Za-z0-9_-]{32,64}")  # what new_nonce makes, with room


@dataclass
class Session:
    id: str
    csrf: str
    token: str | None  # the bearer token signed in with; None once the policy revoked it
    last_used: float = field(default=0.0)


class Sessions:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._secret = secrets.token_bytes(32)  # anonymous CSRF tokens die with the process
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._of_token: dict[str, OrderedDict[str, None]] = {}  # token -> its session ids

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if now - session.last_used > IDLE_SECONDS:
            self.end(session)
            return None
        session.last_used = now
        self._sessions.move_to_end(session_id)
        if session.token is not None:
            self._of_token[session.token].move_to_end(session_id)
        return session

    def new(self, token: str) -> Session:
        """A session signed in with token (the caller has checked it against the policy)."""
        own = self._of_token.setdefault(token, OrderedDict())
        while len(own) >= MAX_PER_TOKEN:
            self.end(self._sessions[next(iter(own))])
        self._drop_expired()
        while len(self._sessions) >= MAX_SESSIONS:
            self.end(next(iter(self._sessions.values())))
        session = Session(
            secrets.token_urlsafe(32), secrets.token_urlsafe(32), token, self._clock()
        )
        self._sessions[session.id] = session
        self._of_token.setdefault(token, OrderedDict())[session.id] = None
        return session

    def end(self, session: Session | None) -> None:
        if session is None or self._sessions.pop(session.id, None) is None:
            return
        self.forget_token(session)

    def forget_token(self, session: Session) -> None:
        """The session is no longer signed in (its token was revoked, or it ended)."""
        if session.token is None:
            return
        own = self._of_token.get(session.token)
        if own is not None:
            own.pop(session.id, None)
            if not own:
                del self._of_token[session.token]
        session.token = None

    def _drop_expired(self) -> None:
        now = self._clock()
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if now - oldest.last_used <= IDLE_SECONDS:
                return
            self.end(oldest)

    # --- CSRF -------------------------------------------------------------------------------

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_urlsafe(32)

    @staticmethod
    def nonce_ok(nonce: str | None) -> bool:
        return nonce is not None and _NONCE.fullmatch(nonce) is not None

    def anonymous_csrf(self, nonce: str) -> str:
        """The CSRF token of a visitor who holds this nonce cookie and no session."""
        mac = hmac.new(self._secret, b"console csrf\0" + nonce.encode("ascii"), hashlib.sha256)
        return mac.hexdigest()

    def csrf_ok(self, session: Session | None, nonce: str | None, sent: str | None) -> bool:
        if sent is None:
            return False
        if session is not None:
            expected = session.csrf
        elif self.nonce_ok(nonce):
            assert nonce is not None
            expected = self.anonymous_csrf(nonce)
        else:
            return False
        return hmac.compare_digest(expected.encode(), sent.encode("utf-8", "replace"))
