"""Waiting GetMessages streams: targeted wake-ups, shared timers, flow control of follow streams.

No waiter polls with a sleep. A waiting stream *looks* (one store receive), and when the look
finds nothing it *parks* on its own `Waker` until something may let it make progress. What
wakes it, and how many of a queue's waiters are woken, is the subject of this module.

Wake-ups are counted, not broadcast
-----------------------------------
With 1,000 streams parked on a queue, ringing every one of them for every send costs 1,000 store
calls per send (a send then takes thirty times as long: `python -m leaseq.bench.wakeups`, figures
in docs/performance.md). So an event wakes only as many waiters as it can feed:

- a send of n visible messages wakes, per channel, parked waiters whose channel filter matches
  until their batch sizes ("want": max_messages, or a follow stream's room) add up to n;
- a release of n messages (ChangeVisibility or UpdateMessage to 0, a redrive of n) wakes, in
  each group of waiters with one channel filter, waiters wanting n (the store does not say the
  released messages' channels, and a waiter of another filter would not take them);
- a delete of n frees n of the queue's in-flight capacity: it wakes only waiters parked on the
  in-flight limit (OverLimit), wanting n; a release wakes those too;
- the passing of time (a lease or a delay ending, an OverLimit's retry_at) is one timer per
  queue, not one per waiter: at the earliest instant the store reported, it wakes one waiter of
  each filter group (and one parked on the limit); more follow by hand-on (below);
- a change made through another replica (PostgreSQL's change feed), and a receive that may have
  moved messages to a dead letter queue, are counted like a timer: one per group, then hand-on;
- rare events wake every waiter of the queue: UpdateQueue, PurgeQueue, DeleteQueue, a jump of
  a test's clock, a redrive back to source queues only the store knows, the change feed's "I may
  have missed something", drain.

Which waiter: the longest parked first (fair, and the one whose stream is surely idle). When
the parked ones cannot cover the count, waiters in the middle of a look are *owed* the rest.

The lost wake-up, and why counting does not lose one
----------------------------------------------------
Ringing fewer waiters makes the old race sharper: a woken waiter may find nothing because
another receive took the message; a send may land while a waiter's look is in flight, after the
store answered "nothing". The rules that keep every visible message covered:

1. A waiter parks only after a look that found nothing, and only if no wake-up was owed to it
   since that look began (`Waker.owed`, cleared when a look begins, set by any wake-up: a
   wake-up that arrives during a look makes the waiter look again instead of parking). Checking
   and parking happen with no await in between, so nothing slips through. A look that ends in
   OverLimit parks only if no in-flight room was freed since it began (a counter per queue,
   `room_freed`), so freed room is never spent on waking looking waiters.
2. An event covering n messages wakes waiters wanting n *after* the change committed; each of
   them looks after the change. Whatever one of them finds short of its want, nobody it could
   take is left visible at that instant: another receive took it (fine), or another transaction
   holds it locked (PostgreSQL's SKIP LOCKED: that receive delivers it, or rolls back and the
   store reports the change, `_wake_after_rollback`).
3. Hand-on. A waiter whose look filled its whole want may have left more behind (it may have
   taken older messages than the ones it was woken for, or messages another waiter was woken
   for: filters overlap): it wakes one more waiter (one per filter group). A waiter woken by an
   uncounted event (a timer, the change feed) hands on after any look that found something, so
   the chain goes on until a look comes back short or empty.
4. A wake-up is never dropped with its waiter: a stream that leaves (answered, cancelled, timed
   out) or pauses (a follow stream at max_outstanding, which takes nothing) while a wake-up is
   owed to it hands that wake-up on.
5. Timers: every look that finds nothing reports the store's earliest future visible_at, and
   the queue's one timer is armed at the earliest instant reported (arming only ever brings it
   forward). So is every lease this server grants (its end), every delayed send (its delay's
   end), and every lease end moved by ChangeVisibility or UpdateMessage: a lease shortened from
   30 s to 1 s wakes a waiter at 1 s, not at 30 s. When the timer fires, the instants behind it
   are unknown until a look reports them again: that is why a timer's wake-up hands on (rule 3)
   until an empty look re-arms it. On PostgreSQL a lease moved through another replica reaches
   this one as a change-feed event (one look, which reports the new instant).

Together: while a message is visible to some waiter, a look that began after it became visible
is under way or owed, or a timer will start one at its instant. The price of counting is the
hand-on: about one more look per full batch; a send of n messages wakes at most about 2n
waiters, whatever the number parked.

Timers are kept by the store's clock when it can run them (`clock.call_at`, a FakeClock: tests
move time and see exactly the wake-ups it causes), else by the event loop, converted from the
clock's "now" with TIMER_SLACK.

Flow control (Pub/Sub StreamingPull's): a follow stream holds at most max_outstanding unsettled
leases. A lease is settled when its message is deleted or released through this server (the
service reports the keys; a `LeaseRegistry` maps (queue, key) to the stream that holds it), or
when the lease ends (a timer at the earliest lease end). ChangeVisibility moves a lease's end.
Deliveries with visibility_timeout 0 make no lease and are not tracked. A paused stream is not
among the queue's parked waiters: a queue wake-up would be wasted on it.

Several server replicas over one shared store: signals are in-process, so a send through another
replica reaches this one's waiters only through the store. A store that is a `ChangeFeed`
(PostgreSQL: LISTEN/NOTIFY) reports such changes, and `app.build` subscribes `store_changed` to it.
Flow control still counts only the settlements made through this replica: a lease of this
replica's follow stream that is acked through another one is settled here when it would have
ended.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import Counter
from collections.abc import (
    AsyncGenerator,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from contextlib import contextmanager

from .budget import (
    CALL_BYTES,
    MESSAGE_OVERHEAD,
    SERVER_BYTES,
    ByteBudget,
    Reservation,
    read_estimate,
)
from .domain.commands import ReceiveParams
from .domain.rules import message_size
from .domain.types import (
    DeliveredMessage,
    LeaseResult,
    LeaseStatus,
    NewMessage,
    QueueConfig,
    ReceiveOutcome,
    SendOutcome,
    VisibilityChange,
)
from .errors import OverLimit
from .store.base import Store
from .stream_checks import check_still_allowed
from .traffic import Traffic
from .wakeups import QueueSignals, Waker, schedule

log = logging.getLogger(__name__)


def chunk_facts(messages: Sequence[DeliveredMessage], now: float) -> tuple[int, float | None]:
    """Of a chunk a look found: its bytes (message_size summed: what counts against call_bytes
    and the byte budget) and the earliest lease it granted ends (visible_at > now), in one pass
    instead of one pass for each (a pass is per message, on the event loop)."""
    size = 0
    end: float | None = None
    for message in messages:
        size += len(message.body)
        if message.attributes:
            size += message_size(b"", message.attributes)
        visible_at = message.visible_at
        if visible_at > now and (end is None or visible_at < end):
            end = visible_at
    return size, end


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
        old = self._ends.get(key)
        if old is not None:
            self.add(key, end)
            if end < old:
                self._waker.ring()  # a paused stream re-arms its timer at the earlier end

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
        self._signals = QueueSignals(store.clock)
        self._registry = LeaseRegistry()
        self._draining = False
        self.budget = budget if budget is not None else ByteBudget(SERVER_BYTES)
        self.call_bytes = call_bytes  # max_bytes of every store read (budget.py)
        self.traffic = Traffic()  # sent/acked per queue and second, every front end (traffic.py)
        self._releases: set[asyncio.Task[None]] = set()
        self.released = 0  # leases released because their stream ended before sending them

    # --- events reported by the service ---------------------------------------------------

    def sent(
        self,
        queue: str,
        messages: Sequence[NewMessage],
        outcomes: Sequence[SendOutcome],
        default_delay: float,
    ) -> None:
        """messages were sent (outcomes: the store's answers, in order; duplicates added
        nothing). Wakes waiters for those visible now; the earliest delay arms the timer."""
        visible: Counter[str] = Counter()
        earliest: float | None = None
        for message, outcome in zip(messages, outcomes):
            if outcome.duplicate:
                continue
            delay = default_delay if message.delay is None else message.delay
            if delay <= 0:
                visible[message.channel] += 1
            elif earliest is None or delay < earliest:
                earliest = delay
        if visible:
            self._signals.wake(queue, sum(visible.values()), visible, capacity=False)
        if earliest is not None:
            self._signals.arm(queue, self._store.clock.now() + earliest)

    def sent_bodies(self, queue: str, count: int, default_delay: float) -> None:
        """sent() of count messages that are only a body (none a duplicate: no dedup id), all
        on the default channel and delayed by the queue's default_delay."""
        if count <= 0:
            return
        if default_delay <= 0:
            self._signals.wake(queue, count, Counter({"": count}), capacity=False)
        else:
            self._signals.arm(queue, self._store.clock.now() + default_delay)

    def visibility_changed(
        self, queue: str, changes: Sequence[VisibilityChange], results: Sequence[LeaseResult]
    ) -> None:
        """ChangeVisibility's outcome: releases (0) and moved lease ends (see lease_moved). A
        release that waits out the queue's retry policy ends the lease now and arms the timer
        at the message's new instant."""
        released = []
        now = self._store.clock.now()
        for change, result in zip(changes, results):
            if result.status != LeaseStatus.OK or result.key is None:
                continue
            if change.visibility_timeout == 0:
                if result.visible_at is not None and result.visible_at > now:
                    self.released_later(queue, result.key, result.visible_at)
                else:
                    released.append(result.key)
            elif result.visible_at is not None:
                # Shorter or longer: a shorter lease must wake a waiter at its new end.
                self.lease_moved(queue, result.key, result.visible_at)
        self.lease_released(queue, released)

    def released_later(self, queue: str, key: int, visible_at: float) -> None:
        """A release that waits out the queue's retry policy: the lease ends now (as by a
        delete: room under the limits), and a waiter must wake at visible_at (the timer)."""
        self.deleted(queue, [key])
        self._signals.arm(queue, visible_at)

    def lease_released(self, queue: str, keys: Iterable[int]) -> None:
        """These leased messages are visible again (visibility set to 0): their leases no
        longer count, and waiters may take them."""
        keys = list(keys)
        if keys:
            self._registry.settle(queue, keys)
            self._signals.wake(queue, len(keys))

    def deleted(self, queue: str, keys: Iterable[int]) -> None:
        """These messages were deleted: their leases no longer count (room for paused follow
        streams, and under the queue's in-flight limit)."""
        keys = list(keys)
        if keys:
            self._registry.settle(queue, keys)
            self._signals.freed(queue, len(keys))

    def lease_moved(self, queue: str, key: int, end: float) -> None:
        """A lease's end moved (ChangeVisibility, UpdateMessage with a visibility > 0): to a
        later instant, or an earlier one, where a waiter must wake then (the timer)."""
        self._registry.extend(queue, key, end)
        self._signals.arm(queue, end)

    def became_visible(self, queue: str, count: int) -> None:
        """count messages of unknown channels became visible at once (a redrive into queue)."""
        self._signals.wake(queue, count)

    def notify(self, queue: str) -> None:
        """Anything about queue may have changed (its configuration): every waiter looks."""
        self._signals.wake_queue(queue)

    def queue_emptied(self, queue: str) -> None:
        """The queue was purged or deleted: no lease on it remains."""
        self._registry.settle_queue(queue)
        self._signals.wake_queue(queue)

    def wake_all(self) -> None:
        """Every waiter looks again (a test's fake clock jumped; messages went back to source
        queues only the store knows)."""
        self._signals.wake_everyone()

    def store_changed(self, queue: str | None) -> None:
        """The store reports a change made elsewhere (`store.base.ChangeFeed`): a look by the
        queue's waiters, counted like a timer's (see the module docstring); None: every waiter
        looks (changes may have gone unreported)."""
        if queue is None:
            self._signals.wake_everyone()
        else:
            self._signals.wake(queue, 1, chain=True)

    def drain(self) -> None:
        """Follow streams end, waiting long polls answer now with what they have."""
        self._draining = True
        self._signals.wake_everyone()

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

    @property
    def broadcasts(self) -> int:
        """Times every waiter of a queue was woken at once (UpdateQueue, the change feed's
        safety net, ...): tests that count wake-ups allow for them."""
        return self._signals.broadcasts

    @property
    def woken(self) -> int:
        """Queue wake-ups handed out since the start (each may cost a store call)."""
        return self._signals.woken

    # --- waiting ----------------------------------------------------------------------------

    def _after_look(
        self,
        queue: str,
        messages: list[DeliveredMessage],
        want: int,
        chain: bool,
        now: float,
        dead_letter_queue: str | None,
    ) -> int:
        """What a look's outcome tells the queue's waiters (rules 3 and 5); returns the bytes of
        the messages it found (`chunk_facts`)."""
        if dead_letter_queue:
            # A receive may have moved messages to the dead letter queue (the store does not
            # say how many): a look there, counted like a timer's.
            self._signals.wake(dead_letter_queue, 1, chain=True)
        if not messages:
            return 0
        size, lease_end = chunk_facts(messages, now)
        # A chunk cut by bytes may have left more behind, like a full one (rule 3).
        got = want if size >= self.call_bytes else len(messages)
        self._signals.delivered(queue, got, want, chain, lease_end)
        return size

    async def _reserve(self, max_messages: int, max_message_bytes: int) -> Reservation:
        return await self.budget.reserve(
            read_estimate(max_messages, max_message_bytes, self.call_bytes)
        )

    @staticmethod
    def _hold(reservation: Reservation, messages: list[DeliveredMessage], size: int) -> None:
        """Shrink the reservation to what the read returned (size: its messages' bytes)."""
        reservation.resize(size + MESSAGE_OVERHEAD * len(messages))

    async def _first_chunk(
        self, params: ReceiveParams, config: QueueConfig
    ) -> tuple[ReceiveOutcome, Reservation, int] | None:
        """The long poll of a receive: its first non-empty chunk, the reservation that holds
        it and the chunk's bytes, or None at the deadline or drain."""
        assert params.wait_time is not None, "resolve_receive fills wait_time"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + params.wait_time
        queue, want = params.queue, params.max_messages
        waker = Waker(params.channel_filter)
        with self._signals.subscribe(queue, waker):
            while True:
                reservation = await self._reserve(params.max_messages, config.max_message_bytes)
                chain = self._signals.look(queue, waker)
                now = self._store.clock.now()
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
                size = self._after_look(
                    queue, outcome.messages, want, chain, now, config.dead_letter_queue
                )
                if outcome.messages:
                    return outcome, reservation, size
                reservation.release()
                remaining = deadline - loop.time()
                if remaining <= 0 or self._draining:
                    return None
                if waker.owed:
                    continue  # woken during the look: look again now (rule 1)
                with self._signals.parked(queue, waker, want, outcome.next_visible_at):
                    await waker.wait(remaining)

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
        outcome, reservation, _ = first
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
        outcome, reservation, size = first
        wanted = params.max_messages
        while True:
            messages = outcome.messages
            self._hold(reservation, messages, size)
            with reservation:
                with self._unsent(params.queue, messages):
                    yield messages
            wanted -= len(messages)
            # Sent: drop this chunk before reading the next, so that two are never held at once.
            messages = outcome = None  # type: ignore[assignment]
            if wanted <= 0 or params.attempt_id or self._draining or size < self.call_bytes // 2:
                return
            reservation = await self._reserve(wanted, config.max_message_bytes)
            now = self._store.clock.now()
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
            size = self._after_look(
                params.queue, outcome.messages, wanted, False, now, config.dead_letter_queue
            )
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
        waker = Waker(params.channel_filter)
        tracker = LeaseTracker(waker)
        with self._signals.subscribe(queue, waker), self._registry.tracking(queue, tracker):
            while not self._draining:
                waker.clear()
                now = clock.now()
                self._registry.forget(queue, tracker.expire(now), tracker)
                room = params.max_outstanding - len(tracker)
                if room <= 0:
                    # Paused: a settle rings the waker; the earliest lease end settles by time.
                    self._signals.pause(queue, waker)
                    with self._timer(tracker.next_end(), waker.ring):
                        await waker.wait(None)
                    continue
                await check_still_allowed()
                wanted = min(params.max_messages, room)
                reservation = await self._reserve(wanted, config.max_message_bytes)
                chain = self._signals.look(queue, waker)
                now = clock.now()
                try:
                    outcome = await self._store_receive(
                        queue,
                        wanted,
                        params.visibility_timeout,
                        params.channel_filter,
                        max_bytes=self.call_bytes,
                    )
                except OverLimit as err:
                    reservation.release()
                    # The queue's in-flight limit: a follow stream waits (API.md) for a delete
                    # or release, or the earliest lease end (retry_at).
                    self._after_look(queue, [], wanted, chain, now, config.dead_letter_queue)
                    if not waker.owed and not self._signals.room_freed(queue, waker):
                        with self._signals.parked(queue, waker, wanted, err.retry_at, limited=True):
                            await waker.wait(None)
                    continue
                except BaseException:
                    reservation.release()
                    raise
                size = self._after_look(
                    queue, outcome.messages, wanted, chain, now, config.dead_letter_queue
                )
                if outcome.messages:
                    leased = [m for m in outcome.messages if m.visible_at > now]
                    for message in leased:
                        tracker.add(message.key, message.visible_at)
                    self._registry.claim(queue, (m.key for m in leased), tracker)
                    self._hold(reservation, outcome.messages, size)
                    with reservation:
                        with self._unsent(queue, outcome.messages):
                            yield outcome.messages
                    # Sent: dropped before the next read, so that two are never held at once.
                    outcome = leased = None  # type: ignore[assignment]
                    continue
                reservation.release()
                if not waker.owed:
                    with self._signals.parked(queue, waker, wanted, outcome.next_visible_at):
                        await waker.wait(None)

    @contextmanager
    def _timer(self, when: float | None, callback: Callable[[], None]) -> Iterator[None]:
        """A timer of one stream's own (a paused stream's earliest lease end)."""
        handle = None if when is None else schedule(self._store.clock, when, callback)
        try:
            yield
        finally:
            if handle is not None:
                handle.cancel()

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
        whose caller is gone (SQLite's writer does; PostgreSQL would roll back only on
        the way), and what it leased then has nobody to go to. So the receive always finishes,
        and a cancelled stream's messages are released when it does."""
        call = asyncio.ensure_future(
            self._store.receive(
                queue,
                max_messages,
                visibility_timeout,
                channel_filter,
                attempt_id,
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
        # At once, whatever the queue's retry policy: the consumer never saw them.
        changes = [VisibilityChange(receipt, 0.0, backoff=False) for receipt in receipts]
        try:
            results = await self._store.change_visibility(queue, changes)
        except Exception as error:  # the store closing at shutdown, the queue deleted, ...
            log.info("could not release %d unsent messages of %r: %s", len(changes), queue, error)
            return
        self.released += sum(r.status == LeaseStatus.OK for r in results)
        self.lease_released(queue, [r.key for r in results if r.status == LeaseStatus.OK and r.key])

    async def settle_releases(self, timeout: float = 10.0) -> None:
        """Until the releases of ended streams are done, at most timeout seconds (the server's
        shutdown awaits this before it closes the store; one release is one store call)."""
        if self._releases:
            await asyncio.wait(list(self._releases), timeout=timeout)
