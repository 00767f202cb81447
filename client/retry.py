"""Retrying calls that failed with UNAVAILABLE: exponential backoff with jitter.

Only calls that are safe to repeat are retried (the client decides per call, see
``QueueClient``); this module only says how long to wait before the next attempt.

Example::

    client = QueueClient(retry=RetryPolicy(max_attempts=8, max_backoff=2.0))
    client = QueueClient(retry=None)          # never retry
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .errors import LeaseqError, Unavailable

__all__ = ["RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a safe call after UNAVAILABLE.

    Attempt n (n >= 1 failed attempts so far) waits ``initial_backoff * multiplier**(n-1)``
    seconds, capped at ``max_backoff``, then spread by +-``jitter`` (a fraction) so that many
    clients cut off by the same outage do not come back in lockstep. When the server sent a
    ``RetryInfo`` delay, that delay (capped at ``max_backoff``) is used instead, since the
    server knows when it expects to be back.

    ``max_attempts`` counts the first attempt: 1 disables retries.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial_backoff < 0 or self.max_backoff < 0:
            raise ValueError("backoffs must not be negative")
        if self.multiplier < 1:
            raise ValueError("multiplier must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def delay(self, attempts: int, error: LeaseqError) -> float | None:
        """Seconds to wait before the next attempt after ``attempts`` failed ones, or None to
        give up (the error is not UNAVAILABLE, or the attempts are used up)."""
        if not isinstance(error, Unavailable) or attempts >= self.max_attempts:
            return None
        if error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.max_backoff)
        base = min(self.initial_backoff * self.multiplier ** (attempts - 1), self.max_backoff)
        return base * random.uniform(1.0 - self.jitter, 1.0 + self.jitter)


NO_RETRY = RetryPolicy(max_attempts=1)
"""The policy used when a client is given ``retry=None``."""
