"""Clocks. Stores read time only through a Clock, so tests advance time instead of sleeping.

Times are float seconds since the Unix epoch (UTC).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to: for tests and property tests."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds

    def set(self, when: float) -> None:
        self._now = float(when)
