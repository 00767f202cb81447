"""Clocks. Stores read time only through a Clock, so tests advance time instead of sleeping.

Times are float seconds since the Unix epoch (UTC).

A clock may also run timers (`call_at`): the long-poll hub wakes its waiters at store-time
instants (a lease or a delay ending) through it when it can. A FakeClock fires them as it is
advanced, so a test moves time and sees exactly the wake-ups that instant causes; clocks without
call_at (the wall clock) get event-loop timers, converted from the clock's "now".
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        return time.time()


class FakeTimer:
    """A pending FakeClock.call_at; cancel() makes it never fire."""

    __slots__ = ("when", "_callback", "_loop", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None], loop: asyncio.AbstractEventLoop):
        self.when = when
        self._callback = callback
        self._loop = loop
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def _fire(self) -> None:
        if self.cancelled:
            return
        try:
            # On the loop that armed it: the callback touches that loop's objects only.
            self._loop.call_soon_threadsafe(self._run)
        except RuntimeError:
            pass  # that loop is closed: nobody is left to wake

    def _run(self) -> None:
        if not self.cancelled:
            self._callback()


class FakeClock:
    """A clock that moves only when told to: for tests and property tests.

    advance() and set() may be called from any thread; timers fire on the event loop that armed
    them, once the clock reaches their instant."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self._timers: list[tuple[float, int, FakeTimer]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._now += seconds
        self._fire_due()

    def set(self, when: float) -> None:
        with self._lock:
            self._now = float(when)
        self._fire_due()

    def call_at(self, when: float, callback: Callable[[], None]) -> FakeTimer:
        """Call callback (on the running event loop) once now() >= when."""
        timer = FakeTimer(when, callback, asyncio.get_running_loop())
        with self._lock:
            heapq.heappush(self._timers, (when, next(self._order), timer))
        self._fire_due()
        return timer

    def _fire_due(self) -> None:
        due = []
        with self._lock:
            while self._timers and self._timers[0][0] <= self._now:
                due.append(heapq.heappop(self._timers)[2])
            # Cancelled timers are dropped as they come up; drop them here too when they pile
            # up (a long run re-arms often), so the heap stays the size of the live ones.
            if len(self._timers) > 1024 and sum(t.cancelled for *_, t in self._timers) > 512:
                self._timers = [entry for entry in self._timers if not entry[2].cancelled]
                heapq.heapify(self._timers)
        for timer in due:
            timer._fire()
