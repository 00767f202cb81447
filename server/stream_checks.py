"""Whether the call a stream serves is still allowed, for code that acts for it later.

The auth interceptor checks a GetMessages call when it starts, and a follow stream again when
the policy changes. `LongPoll.follow` asks before every store read (`check_still_allowed`), so a
stream whose grant was revoked leases nothing more: the check aborts the call
with PERMISSION_DENIED / UNAUTHENTICATED. The check lives in a context variable because each gRPC
call runs in a task of its own, and the handler knows nothing of auth: without an auth policy
there is no check and nothing to do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

StillAllowed = Callable[[], Awaitable[None]]

_still_allowed: ContextVar[StillAllowed | None] = ContextVar("leaseq_still_allowed", default=None)


def set_still_allowed(check: StillAllowed) -> None:
    """Install the running call's check (the auth interceptor, in the call's own task)."""
    _still_allowed.set(check)


async def check_still_allowed() -> None:
    """Return when the running call is still allowed; else the check aborts the call."""
    check = _still_allowed.get()
    if check is not None:
        await check()
