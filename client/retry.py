"""Retrying calls that failed with UNAVAILABLE or DEADLINE_EXCEEDED: exponential backoff with
jitter.

Only calls that are safe to repeat are retried (the client decides per call, see
``QueueClient``); this module only says how long to wait before the next attempt. Both codes
leave the outcome of the failed attempt unknown (the server may have acted before the answer was
lost), which is why the client retries only calls whose repetition is harmless. The same
arithmetic paces the reconnects of a ``Consumer``'s follow stream (``RetryPolicy.backoff``),
which are never given up while the consumer runs.

Example::

    client = QueueClient(retry=RetryPolicy(max_attempts=8, max_backoff=2.0))
    client = QueueClient(retry=RetryPolicy(retry_deadline_exceeded=False))  # UNAVAILABLE only
    client = QueueClient(retry=None)          # never retry
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .errors import DeadlineExceeded, LeaseqError, Unavailable

__all__ = ["RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a safe call after UNAVAILABLE (and, unless
    ``retry_deadline_exceeded`` is False, after DEADLINE_EXCEEDED).

    Attempt n (n >= 1 failed attempts so far) waits ``initial_backoff * multiplier**(n-1)``
    seconds, capped at ``max_backoff``, then spread by +-``jitter`` (a fraction) so that many
    clients cut off by the same outage do not come back in lockstep. When the server sent a
    ``RetryInfo`` delay, that delay (capped at ``max_backoff``) is used instead, since the
    server knows when it expects to be back.

    ``max_attempts`` counts the first attempt: 1 disables retries. A DEADLINE_EXCEEDED attempt
    already waited its whole deadline, so ``max_attempts`` also bounds how long a call can take
    (about ``max_attempts`` times the client's ``timeout``).

    Example::

        RetryPolicy(max_attempts=8, initial_backoff=0.05, max_backoff=2.0, jitter=0.5)
    """

    max_attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2
    retry_deadline_exceeded: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial_backoff < 0 or self.max_backoff < 0:
            raise ValueError("backoffs must not be negative")
        if self.multiplier < 1:
            raise ValueError("multiplier must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def retryable(self, error: LeaseqError) -> bool:
        """Whether ``error`` is one this policy retries (for a call that is safe to repeat)."""
        if isinstance(error, Unavailable):
            return True
        return self.retry_deadline_exceeded and isinstance(error, DeadlineExceeded)

    def delay(self, attempts: int, error: LeaseqError) -> float | None:
        """Seconds to wait before the next attempt after ``attempts`` failed ones, or None to
        give up (the error is not retryable, or the attempts are used up)."""
        if not self.retryable(error) or attempts >= self.max_attempts:
            return None
        return self.backoff(attempts, error)

    def backoff(self, attempts: int, error: LeaseqError | None = None) -> float:
        """The wait after ``attempts`` (>= 1) consecutive failures, whatever ``max_attempts``
        says: the server's ``RetryInfo`` delay when ``error`` carries one, else the jittered
        exponential backoff. Used for loops that never give up (stream reconnects).

        Example::

            RetryPolicy(initial_backoff=0.1, jitter=0).backoff(3)   # 0.4
        """
        retry_after = error.retry_after if isinstance(error, Unavailable) else None
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff)
        exponent = max(attempts, 1) - 1
        # min() before the power would overflow for a loop that failed for days.
        base = self.max_backoff
        if exponent < 64:
            base = min(self.initial_backoff * self.multiplier**exponent, self.max_backoff)
        return float(base * random.uniform(1.0 - self.jitter, 1.0 + self.jitter))


NO_RETRY = RetryPolicy(max_attempts=1)
"""The policy used when a client is given ``retry=None``."""
