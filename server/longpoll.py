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
import logging
from collections.abc import AsyncGenerator, Iterable, Iterator
from contextlib import contextmanager

from .budget import CALL_BYTES, MESSAGE_OVERHEAD, SERVER_BYTES, ByteBudget, Reservation, read_estimate
from .errors import OverLimit
from .store.base import (
    DeliveredMessage,
    LeaseStatus,
    QueueConfig,
    ReceiveOutcome,
    Store,
    VisibilityChange,
    message_size,
)
from .stream_checks import check_still_allowed
from .validation import ReceiveParams

log = logging.getLogger(__name__)

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

    def __init__(
        self, store: Store, budget: ByteBudget | None = None, call_bytes: int = CALL_BYTES
    ) -> None:
        self._store = store
        self._signals = QueueSignals()
        self._registry = LeaseRegistry()
        self._draining = False
        self.budget = budget if budget is not None else ByteBudget(SERVER_BYTES)
        self.call_bytes = call_bytes  # max_bytes of every store read (budget.py)
        self._releases: set[asyncio.Task[None]] = set()
        self.released = 0  # leases released because their stream ended before sending them

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

    async def _reserve(self, max_messages: int, max_message_bytes: int) -> Reservation:
        return await self.budget.reserve(
            read_estimate(max_messages, max_message_bytes, self.call_bytes)
        )

    def _hold(self, reservation: Reservation, messages: list[DeliveredMessage]) -> int:
        """Shrink the reservation to what the read returned; returns those bytes."""
        size = sum(message_size(m.body, m.attributes) for m in messages)
        reservation.resize(size + MESSAGE_OVERHEAD * len(messages))
        return size

    async def _first_chunk(
        self, params: ReceiveParams, config: QueueConfig
    ) -> tuple[ReceiveOutcome, Reservation] | None:
        """The long poll of a receive: its first non-empty chunk and the reservation that holds
        it, or None at the deadline or drain."""
        assert params.wait_time is not None, "resolve_receive fills wait_time"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + params.wait_time
        waker = Waker()
        with self._signals.subscribe(params.queue, waker):
            while True:
                reservation = await self._reserve(params.max_messages, config.max_message_bytes)
                generation = self._signals.generation(params.queue)
                waker.clear()
                try:
                    outcome = await self._store_receive(
                        params.queue,
                        params.max_messages,
                        params.visibility_timeout,
                        params.channel_filter,
                        params.attempt_id,
                        max_bytes=self.call_bytes,
                    )
                except BaseException:
                    reservation.release()
                    raise
                self._after_receive(config.dead_letter_queue)
                if outcome.messages:
                    return outcome, reservation
                reservation.release()
                remaining = deadline - loop.time()
                if remaining <= 0 or self._draining:
                    return None
                if self._signals.generation(params.queue) != generation:
                    continue  # something happened during the store call: look again now
                timer = self._delay_until(outcome.next_visible_at)
                await waker.wait(remaining if timer is None else min(remaining, timer))

    async def receive_batch(
        self, params: ReceiveParams, config: QueueConfig
    ) -> list[DeliveredMessage]:
        """A long poll for a front end that answers with one body (core.py, the SQS dialect):
        the first non-empty chunk only (at most call_bytes plus one message; fewer messages than
        asked when they are large), or [] at the deadline or drain. Its bytes leave the budget
        when it is returned: the front end's answer is built and sent outside it."""
        first = await self._first_chunk(params, config)
        if first is None:
            return []
        outcome, reservation = first
        reservation.release()
        return outcome.messages

    async def receive(
        self, params: ReceiveParams, config: QueueConfig
    ) -> AsyncGenerator[list[DeliveredMessage], None]:
        """A classic long poll, in chunks of at most `call_bytes` (plus one message).

        It waits for the first non-empty chunk and yields it, or yields [] once at the deadline
        or drain. When that chunk was cut by bytes (it holds fewer messages than asked and at
        least half of call_bytes), the next chunk is read, and leased, only when the caller comes
        back for it, that is after it sent the previous one; and so on up to max_messages or
        until a chunk comes back short. A receive with an attempt id delivers one chunk only, so
        that its replay (base.py rule a) repeats exactly what it delivered. When the caller
        stops (cancel, deadline) while holding a chunk, that chunk's leases are released
        (`_release_unsent`). OverLimit on the first chunk goes to the caller (RESOURCE_EXHAUSTED:
        API.md); on a later one the receive ends with what it sent."""
        first = await self._first_chunk(params, config)
        if first is None:
            yield []
            return
        outcome, reservation = first
        wanted = params.max_messages
        while True:
            messages = outcome.messages
            size = self._hold(reservation, messages)
            with reservation:
                with self._unsent(params.queue, messages):
                    yield messages
            wanted -= len(messages)
            # Sent: drop this chunk before reading the next, so that two are never held at once.
            messages = outcome = None  # type: ignore[assignment]
            if wanted <= 0 or params.attempt_id or self._draining or size < self.call_bytes // 2:
                return
            reservation = await self._reserve(wanted, config.max_message_bytes)
            try:
                outcome = await self._store_receive(
                    params.queue,
                    wanted,
                    params.visibility_timeout,
                    params.channel_filter,
                    max_bytes=self.call_bytes,
                )
            except OverLimit:
                reservation.release()
                return
            except BaseException:
                reservation.release()
                raise
            self._after_receive(config.dead_letter_queue)
            if not outcome.messages:
                reservation.release()
                return

    async def follow(
        self, params: ReceiveParams, config: QueueConfig
    ) -> AsyncGenerator[list[DeliveredMessage], None]:
        """Batches as messages become visible, until drain (or the caller stops iterating).

        Pauses while the stream holds max_outstanding unsettled leases. Each batch is at most
        `call_bytes` plus one message, and the next one is read (and leased) only when the
        caller comes back, after it sent this one: gRPC's flow control holds a stream whose
        client does not read in its `yield`, so such a stream leases one batch and no more. Before
        each read the stream's permission is checked again (`stream_checks`): a stream whose
        grant was revoked leases nothing more. When the stream ends (cancel, deadline, drain,
        revoked grant) the batch it holds but did not send is released (`_release_unsent`)."""
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
                await check_still_allowed()
                wanted = min(params.max_messages, room)
                reservation = await self._reserve(wanted, config.max_message_bytes)
                try:
                    outcome = await self._store_receive(
                        queue,
                        wanted,
                        params.visibility_timeout,
                        params.channel_filter,
                        max_bytes=self.call_bytes,
                    )
                    self._after_receive(config.dead_letter_queue)
                except OverLimit as err:
                    reservation.release()
                    # The queue's in-flight limit: a follow stream waits (API.md) for a delete
                    # or release (signal) or the earliest lease end (retry_at).
                    if self._signals.generation(queue) == generation:
                        await waker.wait(self._delay_until(err.retry_at))
                    continue
                except BaseException:
                    reservation.release()
                    raise
                if outcome.messages:
                    leased = [m for m in outcome.messages if m.visible_at > now]
                    for message in leased:
                        tracker.add(message.key, message.visible_at)
                    self._registry.claim(queue, (m.key for m in leased), tracker)
                    self._hold(reservation, outcome.messages)
                    with reservation:
                        with self._unsent(queue, outcome.messages):
                            yield outcome.messages
                    # Sent: dropped before the next read, so that two are never held at once.
                    outcome = leased = None  # type: ignore[assignment]
                    continue
                reservation.release()
                if self._signals.generation(queue) == generation:
                    await waker.wait(self._delay_until(outcome.next_visible_at))

    # --- releasing what a gone stream did not send -------------------------------------------

    async def _store_receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout: float | None,
        channel_filter: str,
        attempt_id: str = "",
        *,
        max_bytes: int,
    ) -> ReceiveOutcome:
        """store.receive, shielded from the stream's cancellation: a store may finish a receive
        whose caller is gone (SQLite's writer thread does; PostgreSQL would roll back only on
        the way), and what it leased then has nobody to go to. So the receive always finishes,
        and a cancelled stream's messages are released when it does."""
        call = asyncio.ensure_future(
            self._store.receive(
                queue, max_messages, visibility_timeout, channel_filter, attempt_id,
                max_bytes=max_bytes,
            )
        )
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            call.add_done_callback(lambda done: self._release_finished(queue, done))
            raise

    def _release_finished(self, queue: str, done: asyncio.Future[ReceiveOutcome]) -> None:
        if not done.cancelled() and done.exception() is None:
            self._release_unsent(queue, done.result().messages)

    @contextmanager
    def _unsent(self, queue: str, messages: list[DeliveredMessage]) -> Iterator[None]:
        """Around the yield of a chunk: when the caller never comes back for the next one (the
        stream was cancelled, hit its deadline, or was closed while sending this one), the
        chunk's leases are released."""
        try:
            yield
        except BaseException:
            self._release_unsent(queue, messages)
            raise

    def _release_unsent(self, queue: str, messages: list[DeliveredMessage]) -> None:
        """Release (ChangeVisibility 0) the leases of messages a stream took but did not send,
        so they are visible again at once instead of when their lease ends.

        It runs as a task of its own: the stream's task is being cancelled. The store counts
        those deliveries (delivery_count stays raised: base.py has no "undeliver", and a count
        that errs high is the safe side of max_delivery_count's at-least-once promise)."""
        now = self._store.clock.now()
        receipts = [m.receipt for m in messages if m.visible_at > now]
        if not receipts:
            return
        task = asyncio.get_running_loop().create_task(self._release(queue, receipts))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _release(self, queue: str, receipts: list[str]) -> None:
        changes = [VisibilityChange(receipt, 0.0) for receipt in receipts]
        try:
            results = await self._store.change_visibility(queue, changes)
        except Exception as error:  # the store closing at shutdown, the queue deleted, ...
            log.info("could not release %d unsent messages of %r: %s", len(changes), queue, error)
            return
        self.released += sum(r.status == LeaseStatus.OK for r in results)
        self.settled(queue, [r.key for r in results if r.status == LeaseStatus.OK and r.key])

    async def settle_releases(self, timeout: float = 10.0) -> None:
        """Until the releases of ended streams are done, at most timeout seconds (the server's
        shutdown awaits this before it closes the store; one release is one store call)."""
        if self._releases:
            await asyncio.wait(list(self._releases), timeout=timeout)
