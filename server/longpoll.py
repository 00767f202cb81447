"""Waiting GetMessages streams: wake-ups by event, and flow control of follow streams.

No waiter polls with a sleep. A waiting stream sleeps on its own `Waker` and is rung by whatever
may let it make progress:

- its queue's signal, which the service notifies after a send, a release (ChangeVisibility 0 or
  UpdateMessage to 0), a redrive into the queue, a delete (frees in-flight capacity), a purge, a
  configuration change or the queue's deletion;
- a timer at the store-reported `next_visible_at` (a lease or a delay ending: the store knows no
  event for the passing of time), or at `OverLimit.retry_at`;
- for a paused follow stream, the settling of one of its own leases (`LeaseTracker`);
- the server's drain, or its deadline (wait_time).

The lost-wake-up race: a send may land after the store answered "nothing visible" but before the
stream goes to sleep. So a waiter reads its queue's generation *before* the store call and sleeps
only if the generation is still the same afterwards; the notify also rings the waker, which is
cleared at the same instant the generation is read (no await in between), so a ring during the
store call is kept too.

Flow control (Pub/Sub StreamingPull's): a follow stream holds at most max_outstanding unsettled
leases. A lease is settled when its message is deleted or released through this server (the
service reports the keys; a `LeaseRegistry` maps (queue, key) to the stream that holds it), or
when the lease ends (a timer at the earliest lease end). ChangeVisibility moves a lease's end.
Deliveries with visibility_timeout 0 make no lease and are not tracked.

Several server replicas over one shared store: signals are in-process, so a send through another
replica reaches this one's waiters only through the store. A store that is a `ChangeFeed`
(PostgreSQL: LISTEN/NOTIFY) reports such changes, and `app.build` subscribes `store_changed` to it:
the queue's waiters look again, as after a local send. Flow control still counts only the
settlements made through this replica: a lease of this replica's follow stream that is acked
through another one is settled here when it would have ended.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncGenerator, Iterable, Iterator
from contextlib import contextmanager

from .errors import OverLimit
from .store.base import DeliveredMessage, Store
from .validation import ReceiveParams

# Timers for store-time instants fire this much late, so that the store, reading its own clock
# when woken, usually sees the lease or delay already ended (loop timers may fire a hair early,
# and the loop's monotonic clock and the store's wall clock tick apart). A timer that still
# fires too early costs one more empty store call and a new timer, never a missed wake-up, so
# the slack is kept small: it is part of every expiry-to-redelivery latency (`leaseq bench wake`).
TIMER_SLACK = 0.0005


class Waker:
    """One waiting stream's doorbell."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.sleeping = False  # parked in wait(): what LongPoll.sleeping counts
        self.parks = 0  # times parked: shows that a wake-up ran its course and parked again

    def ring(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

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
        timer = None if timeout is None else asyncio.get_running_loop().call_later(timeout, self.ring)
        try:
            await self._event.wait()
        finally:
            if timer is not None:
                timer.cancel()
            self.sleeping = False


class _Signal:
    __slots__ = ("generation", "wakers")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.wakers: set[Waker] = set()


class QueueSignals:
    """Per queue: a generation counter and the wakers of the streams waiting on it.

    An entry lives while a waker is subscribed. Generations come from one process-wide counter,
    so an entry dropped and created again never hands out a number a waiter saw before."""

    def __init__(self) -> None:
        self._signals: dict[str, _Signal] = {}
        self._counter = itertools.count(1)

    def generation(self, queue: str) -> int:
        signal = self._signals.get(queue)
        return signal.generation if signal else 0

    def notify(self, queue: str) -> None:
        signal = self._signals.get(queue)
        if signal is None:
            return  # nobody waits on this queue
        signal.generation = next(self._counter)
        for waker in signal.wakers:
            waker.ring()

    def notify_all(self) -> None:
        for queue in list(self._signals):
            self.notify(queue)

    def sleeping(self, queue: str) -> int:
        signal = self._signals.get(queue)
        return sum(w.sleeping for w in signal.wakers) if signal else 0

    def parks(self, queue: str) -> int:
        signal = self._signals.get(queue)
        return sum(w.parks for w in signal.wakers) if signal else 0

    @contextmanager
    def subscribe(self, queue: str, waker: Waker) -> Iterator[None]:
        signal = self._signals.get(queue)
        if signal is None:
            signal = self._signals[queue] = _Signal(next(self._counter))
        signal.wakers.add(waker)
        try:
            yield
        finally:
            signal.wakers.discard(waker)
            if not signal.wakers and self._signals.get(queue) is signal:
                del self._signals[queue]


class LeaseTracker:
    """A follow stream's unsettled leases: message key -> lease end (store time)."""

    def __init__(self, waker: Waker) -> None:
        self._waker = waker
        self._ends: dict[int, float] = {}
        # (end, key) entries; an entry whose end no longer matches _ends is stale and skipped.
        # Lazy deletion keeps settle O(1) and earliest-end O(log n) for 100,000 leases.
        self._heap: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self._ends)

    def __contains__(self, key: int) -> bool:
        return key in self._ends

    def add(self, key: int, end: float) -> None:
        self._ends[key] = end
        heapq.heappush(self._heap, (end, key))

    def extend(self, key: int, end: float) -> None:
        if key in self._ends:
            self.add(key, end)

    def settle(self, key: int) -> bool:
        if self._ends.pop(key, None) is None:
            return False
        self._waker.ring()  # a paused stream may go on
        return True

    def expire(self, now: float) -> list[int]:
        """Settle the leases that ended by now; returns their keys."""
        ended = []
        while self._heap and self._heap[0][0] <= now:
            end, key = heapq.heappop(self._heap)
            if self._ends.get(key) == end:
                del self._ends[key]
                ended.append(key)
        return ended

    def next_end(self) -> float | None:
        while self._heap and self._ends.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def keys(self) -> list[int]:
        return list(self._ends)


class LeaseRegistry:
    """(queue, key) -> the follow stream's tracker that holds that lease."""

    def __init__(self) -> None:
        self._owners: dict[tuple[str, int], LeaseTracker] = {}
        self._by_queue: dict[str, set[LeaseTracker]] = {}

    @contextmanager
    def tracking(self, queue: str, tracker: LeaseTracker) -> Iterator[None]:
        self._by_queue.setdefault(queue, set()).add(tracker)
        try:
            yield
        finally:
            trackers = self._by_queue.get(queue)
            if trackers is not None:
                trackers.discard(tracker)
                if not trackers:
                    del self._by_queue[queue]
            self.forget(queue, tracker.keys(), tracker)

    def claim(self, queue: str, keys: Iterable[int], tracker: LeaseTracker) -> None:
        # A later delivery of a key (to this or another stream) takes it over: the earlier
        # holder's lease has ended, and its tracker expires it at its own timer.
        for key in keys:
            self._owners[(queue, key)] = tracker

    def forget(self, queue: str, keys: Iterable[int], tracker: LeaseTracker) -> None:
        for key in keys:
            if self._owners.get((queue, key)) is tracker:
                del self._owners[(queue, key)]

    def settle(self, queue: str, keys: Iterable[int]) -> None:
        if queue not in self._by_queue:
            return  # no follow stream tracks leases of this queue (an ack of 1,000: no lookups)
        for key in keys:
            tracker = self._owners.pop((queue, key), None)
            if tracker is not None:
                tracker.settle(key)

    def extend(self, queue: str, key: int, end: float) -> None:
        tracker = self._owners.get((queue, key))
        if tracker is not None:
            tracker.extend(key, end)

    def settle_queue(self, queue: str) -> None:
        """Every lease on the queue is gone (purge, queue deleted)."""
        for tracker in list(self._by_queue.get(queue, ())):
            keys = tracker.keys()
            self.forget(queue, keys, tracker)
            for key in keys:
                tracker.settle(key)


class LongPoll:
    """The receive side of the service: long polls, follow streams, and the events that wake
    them. One per server; every method runs on the server's event loop."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._signals = QueueSignals()
        self._registry = LeaseRegistry()
        self._draining = False

    # --- events reported by the service ---------------------------------------------------

    def notify(self, queue: str) -> None:
        """Something happened that may let a waiter of queue deliver (see module docstring)."""
        self._signals.notify(queue)

    def settled(self, queue: str, keys: Iterable[int]) -> None:
        """These messages were deleted or released: their leases no longer count."""
        keys = list(keys)
        if keys:
            self._registry.settle(queue, keys)
            self._signals.notify(queue)

    def extended(self, queue: str, key: int, end: float) -> None:
        """A lease's end moved (ChangeVisibility, UpdateMessage with a visibility > 0)."""
        self._registry.extend(queue, key, end)

    def queue_emptied(self, queue: str) -> None:
        """The queue was purged or deleted: no lease on it remains."""
        self._registry.settle_queue(queue)
        self._signals.notify(queue)

    def wake_all(self) -> None:
        """Every waiter looks again (used when a test's fake clock jumps)."""
        self._signals.notify_all()

    def store_changed(self, queue: str | None) -> None:
        """The store reports a change made elsewhere (`store.base.ChangeFeed`): the queue's
        waiters look again; None: every waiter does (changes may have gone unreported)."""
        if queue is None:
            self._signals.notify_all()
        else:
            self._signals.notify(queue)

    def drain(self) -> None:
        """Follow streams end, waiting long polls answer now with what they have."""
        self._draining = True
        self._signals.notify_all()

    @property
    def draining(self) -> bool:
        return self._draining

    def sleeping(self, queue: str) -> int:
        """Streams of queue parked until an event (a gauge for metrics; tests use it to know a
        stream is really waiting before they act)."""
        return self._signals.sleeping(queue)

    def parks(self, queue: str) -> int:
        """How many times the live streams of queue have parked: it goes up once a woken stream
        has looked at the store and found nothing to do."""
        return self._signals.parks(queue)

    # --- waiting ----------------------------------------------------------------------------

    def _delay_until(self, when: float | None) -> float | None:
        """Loop seconds until a store-clock instant (None: never)."""
        if when is None:
            return None
        return max(0.0, when - self._store.clock.now()) + TIMER_SLACK

    def _after_receive(self, dead_letter_queue: str | None) -> None:
        # A receive may have moved messages to the dead letter queue (the store does not say
        # which did): its waiters look again.
        if dead_letter_queue:
            self._signals.notify(dead_letter_queue)

    async def receive(
        self, params: ReceiveParams, dead_letter_queue: str | None = None
    ) -> list[DeliveredMessage]:
        """A classic long poll: the first non-empty batch, or [] at the deadline or drain.
        OverLimit goes to the caller (RESOURCE_EXHAUSTED: API.md)."""
        assert params.wait_time is not None, "resolve_receive fills wait_time"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + params.wait_time
        waker = Waker()
        with self._signals.subscribe(params.queue, waker):
            while True:
                generation = self._signals.generation(params.queue)
                waker.clear()
                outcome = await self._store.receive(
                    params.queue,
                    params.max_messages,
                    params.visibility_timeout,
                    params.channel_filter,
                    params.attempt_id,
                )
                self._after_receive(dead_letter_queue)
                if outcome.messages:
                    return outcome.messages
                remaining = deadline - loop.time()
                if remaining <= 0 or self._draining:
                    return []
                if self._signals.generation(params.queue) != generation:
                    continue  # something happened during the store call: look again now
                timer = self._delay_until(outcome.next_visible_at)
                await waker.wait(remaining if timer is None else min(remaining, timer))

    async def follow(
        self, params: ReceiveParams, dead_letter_queue: str | None = None
    ) -> AsyncGenerator[list[DeliveredMessage], None]:
        """Batches as messages become visible, until drain (or the caller stops iterating).
        Pauses while the stream holds max_outstanding unsettled leases."""
        queue = params.queue
        clock = self._store.clock
        waker = Waker()
        tracker = LeaseTracker(waker)
        with self._signals.subscribe(queue, waker), self._registry.tracking(queue, tracker):
            while not self._draining:
                generation = self._signals.generation(queue)
                waker.clear()
                now = clock.now()
                self._registry.forget(queue, tracker.expire(now), tracker)
                room = params.max_outstanding - len(tracker)
                if room <= 0:
                    # Paused: a settle rings the waker; the earliest lease end settles by time.
                    await waker.wait(self._delay_until(tracker.next_end()))
                    continue
                try:
                    outcome = await self._store.receive(
                        queue,
                        min(params.max_messages, room),
                        params.visibility_timeout,
                        params.channel_filter,
                    )
                    self._after_receive(dead_letter_queue)
                except OverLimit as err:
                    # The queue's in-flight limit: a follow stream waits (API.md) for a delete
                    # or release (signal) or the earliest lease end (retry_at).
                    if self._signals.generation(queue) == generation:
                        await waker.wait(self._delay_until(err.retry_at))
                    continue
                if outcome.messages:
                    leased = [m for m in outcome.messages if m.visible_at > now]
                    for message in leased:
                        tracker.add(message.key, message.visible_at)
                    self._registry.claim(queue, (m.key for m in leased), tracker)
                    yield outcome.messages
                    continue
                if self._signals.generation(queue) == generation:
                    await waker.wait(self._delay_until(outcome.next_visible_at))
