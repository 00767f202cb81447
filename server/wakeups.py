"""Wakers and the per-queue signals that ring them: which parked receivers an event wakes, and
the shared timers of a queue (longpoll.py's docstring tells the rules: wake-ups are counted, not
broadcast). Only longpoll.py uses this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import (
    Callable,
    Iterator,
    Mapping,
)
from contextlib import contextmanager
from typing import Protocol

from .clock import Clock
from .domain.rules import channel_matches

# Event-loop timers for store-time instants fire this much late, so that the store, reading its
# own clock when woken, usually sees the lease or delay already ended (loop timers may fire a
# hair early, and the loop's monotonic clock and the store's wall clock tick apart). A timer
# that still fires too early costs one more empty look and a new timer, never a missed
# wake-up, so the slack is kept small: it is part of every expiry-to-redelivery latency
# (`leaseq bench wake`).
TIMER_SLACK = 0.0005


class Cancellable(Protocol):
    def cancel(self) -> None: ...


def schedule(clock: Clock, when: float, callback: Callable[[], None]) -> Cancellable:
    """Call callback (on the running loop) at the store-time instant when."""
    call_at = getattr(clock, "call_at", None)
    if call_at is not None:
        return call_at(when, callback)  # type: ignore[no-any-return]  # a FakeClock's handle
    delay = max(0.0, when - clock.now()) + TIMER_SLACK
    return asyncio.get_running_loop().call_later(delay, callback)


class Waker:
    """One waiting stream's doorbell, and what its queue's signal needs to know of it."""

    __slots__ = (
        "_event",
        "channel_filter",
        "want",
        "owed",
        "chain",
        "freed_seen",
        "sleeping",
        "parks",
    )

    def __init__(self, channel_filter: str = "") -> None:
        self._event = asyncio.Event()
        self.channel_filter = channel_filter
        self.want = 1  # messages its next look may take (set when it parks)
        self.owed = False  # a queue wake-up came since its current look began: look again
        self.chain = False  # that wake-up was uncounted (timer, change feed): hand on (rule 3)
        self.freed_seen = 0  # its queue's `_Signal.freed` when its look began
        self.sleeping = False  # parked in wait(): what LongPoll.sleeping counts
        self.parks = 0  # times parked: shows that a wake-up ran its course and parked again

    def ring(self) -> None:
        """A nudge for this stream alone (its own lease settled or ended): no look is owed."""
        self._event.set()

    def wake(self, chain: bool = False) -> None:
        """A queue wake-up: this waiter owes the queue a look."""
        self.owed = True
        self.chain = self.chain or chain
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def begin_look(self) -> bool:
        """A look begins: it pays what is owed. Returns whether it was an uncounted wake-up."""
        chain = self.chain
        self.owed = self.chain = False
        self._event.clear()
        return chain

    async def wait(self, timeout: float | None) -> None:
        """Until rung or timeout seconds (None: no timeout) passed. Cancellation goes through."""
        if timeout is not None and timeout <= 0:
            return
        self.sleeping = True
        self.parks += 1
        # Not asyncio.wait_for: before Python 3.12 it swallows a cancellation that arrives while
        # the event is being set (bpo-42130), and the stream of a call the client had cancelled
        # went on leasing messages. The timeout rings the bell itself; every caller clears it
        # before it looks again.
        timer = (
            None if timeout is None else asyncio.get_running_loop().call_later(timeout, self.ring)
        )
        try:
            await self._event.wait()
        finally:
            if timer is not None:
                timer.cancel()
            self.sleeping = False


class _Signal:
    """One queue's waiters, by state, and its timer."""

    __slots__ = ("wakers", "parked", "limited", "looking", "timer", "timer_at", "freed")

    def __init__(self) -> None:
        self.wakers: set[Waker] = set()
        # Parked after an empty look, by channel filter; dicts as ordered sets: oldest first.
        self.parked: dict[str, dict[Waker, None]] = {}
        self.limited: dict[Waker, None] = {}  # parked on the in-flight limit (OverLimit)
        self.looking: dict[Waker, None] = {}  # in a look (or about to begin one)
        self.timer: Cancellable | None = None
        self.timer_at: float | None = None
        # Bumped whenever in-flight room is freed: a look that got OverLimit parks only if
        # no room was freed since it began (rule 1 for the limit; see QueueSignals.look).
        self.freed = 0

    def unpark(self, waker: Waker) -> None:
        group = self.parked.get(waker.channel_filter)
        if group is not None and waker in group:
            del group[waker]
            if not group:
                del self.parked[waker.channel_filter]
        self.limited.pop(waker, None)


def _takes(channel: str) -> Callable[[Waker], bool]:
    return lambda waker: channel_matches(channel, waker.channel_filter)


def _filters(channel_filter: str) -> Callable[[Waker], bool]:
    return lambda waker: waker.channel_filter == channel_filter


class QueueSignals:
    """Per queue: its waiters (parked, parked on the in-flight limit, looking) and one timer.
    An entry lives while a waker is subscribed. See the module docstring for the rules."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._signals: dict[str, _Signal] = {}
        self.woken = 0  # queue wake-ups handed out so far (`leaseq bench`, tests)
        self.broadcasts = 0  # wake-ups of every waiter of a queue (rare events; tests)

    # --- the waiter's side ------------------------------------------------------------------

    @contextmanager
    def subscribe(self, queue: str, waker: Waker) -> Iterator[None]:
        signal = self._signals.get(queue)
        if signal is None:
            signal = self._signals[queue] = _Signal()
        signal.wakers.add(waker)
        signal.looking[waker] = None  # a new waiter looks first
        try:
            yield
        finally:
            signal.wakers.discard(waker)
            signal.unpark(waker)
            signal.looking.pop(waker, None)
            if waker.owed:  # rule 4: the wake-up goes to someone who will use it
                self.hand_on(queue, waker.chain, capacity=True)
            if not signal.wakers and self._signals.get(queue) is signal:
                if signal.timer is not None:
                    signal.timer.cancel()
                del self._signals[queue]

    def look(self, queue: str, waker: Waker) -> bool:
        """The waiter begins a look; whether it pays an uncounted wake-up (see Waker)."""
        signal = self._signals[queue]
        signal.unpark(waker)
        signal.looking[waker] = None
        waker.freed_seen = signal.freed
        return waker.begin_look()

    def room_freed(self, queue: str, waker: Waker) -> bool:
        """Whether in-flight room was freed since the waiter's look began (it got OverLimit:
        then it looks again rather than park on the limit)."""
        return self._signals[queue].freed != waker.freed_seen

    @contextmanager
    def parked(
        self, queue: str, waker: Waker, want: int, until: float | None, limited: bool = False
    ) -> Iterator[None]:
        """Park the waiter (after an empty look, or OverLimit: limited) for its next wake-up;
        until: the store's earliest future visible_at (or retry_at) it reported."""
        signal = self._signals[queue]
        signal.looking.pop(waker, None)
        waker.want = max(1, want)
        if limited:
            signal.limited[waker] = None
        else:
            signal.parked.setdefault(waker.channel_filter, {})[waker] = None
        if until is not None:
            self.arm(queue, until)
        try:
            yield
        finally:
            signal.unpark(waker)
            signal.looking[waker] = None

    def pause(self, queue: str, waker: Waker) -> None:
        """A follow stream stops taking messages for now (max_outstanding): it is not looking,
        and a wake-up owed to it goes on to another waiter (rule 4)."""
        signal = self._signals[queue]
        signal.looking.pop(waker, None)
        if waker.owed:
            chain = waker.chain
            waker.owed = waker.chain = False
            self.hand_on(queue, chain, capacity=True)

    def delivered(
        self, queue: str, got: int, want: int, chain: bool, lease_end: float | None
    ) -> None:
        """A look found got messages (it asked for want); lease_end: the earliest lease it
        granted ends then (rule 5)."""
        if lease_end is not None:
            self.arm(queue, lease_end)
        if got >= want or chain:
            self.hand_on(queue, chain)  # rule 3

    # --- events -----------------------------------------------------------------------------

    def wake(
        self,
        queue: str,
        count: int,
        channels: Mapping[str, int] | None = None,
        chain: bool = False,
        capacity: bool = True,
    ) -> None:
        """Messages became visible: channels maps channel -> count; None: count messages of
        unknown channels. capacity: in-flight room was freed too (count of it)."""
        signal = self._signals.get(queue)
        if signal is None or count <= 0:
            return  # nobody waits on this queue
        if channels is not None:
            for channel, n in channels.items():
                groups = [g for f, g in signal.parked.items() if channel_matches(channel, f)]
                self._wake(signal, groups, n, chain, _takes(channel))
        else:
            for channel_filter, group in list(signal.parked.items()):
                self._wake(signal, [group], count, chain, _filters(channel_filter))
        if capacity:
            signal.freed += 1
            self._wake(signal, [signal.limited], count, chain, None)

    def freed(self, queue: str, count: int) -> None:
        """count leases ended early (deleted): room under the in-flight limit, no message."""
        signal = self._signals.get(queue)
        if signal is not None and count > 0:
            signal.freed += 1
            self._wake(signal, [signal.limited], count, False, None)

    def hand_on(self, queue: str, chain: bool, capacity: bool = False) -> None:
        """Wake one more waiter of each filter group (rules 3 and 4); capacity: and one parked
        on the in-flight limit (a wake-up given up may have been for freed room)."""
        self.wake(queue, 1, chain=chain, capacity=capacity)

    def wake_queue(self, queue: str) -> None:
        """Every waiter of queue looks again; paused follow streams check their room."""
        signal = self._signals.get(queue)
        if signal is not None:
            self.broadcasts += 1
            for waker in list(signal.wakers):
                signal.unpark(waker)
                waker.wake()
            self.woken += len(signal.wakers)

    def wake_everyone(self) -> None:
        for queue in list(self._signals):
            self.wake_queue(queue)

    def arm(self, queue: str, when: float) -> None:
        """The queue's timer fires at when at the latest (rule 5)."""
        signal = self._signals.get(queue)
        if signal is None or (signal.timer_at is not None and signal.timer_at <= when):
            return
        if signal.timer is not None:
            signal.timer.cancel()
        signal.timer_at = when
        signal.timer = schedule(self._clock, when, lambda: self._fire(queue, signal))

    def _fire(self, queue: str, signal: _Signal) -> None:
        signal.timer = signal.timer_at = None
        if self._signals.get(queue) is signal:
            self.wake(queue, 1, chain=True)

    def _wake(
        self,
        signal: _Signal,
        groups: list[dict[Waker, None]],
        count: int,
        chain: bool,
        matches: Callable[[Waker], bool] | None,
    ) -> None:
        """Wake waiters wanting count: the longest parked of groups first, then waiters in
        the middle of a look that are not owed one already and that matches (None: none;
        a look that ends in OverLimit sees freed room by `room_freed` instead)."""
        for group in groups:
            while count > 0 and group:
                waker = next(iter(group))
                signal.unpark(waker)
                signal.looking[waker] = None
                waker.wake(chain)
                self.woken += 1
                count -= waker.want
        if count <= 0 or matches is None:
            return
        for waker in signal.looking:
            if not waker.owed and matches(waker):
                waker.wake(chain)
                self.woken += 1
                count -= waker.want
                if count <= 0:
                    return

    # --- gauges -----------------------------------------------------------------------------

    def sleeping(self, queue: str) -> int:
        signal = self._signals.get(queue)
        return sum(w.sleeping for w in signal.wakers) if signal else 0

    def parks(self, queue: str) -> int:
        signal = self._signals.get(queue)
        return sum(w.parks for w in signal.wakers) if signal else 0
