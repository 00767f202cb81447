"""The in-memory store: the reference implementation of `base.Store`.

Every other backend is checked against this one, so it favours being obviously right over being
clever; where it keeps an index, the index is only a faster way to find what a scan would find.

Each method's body runs without awaiting, so under asyncio every call is atomic on its own: no
lock is needed, and a method either changes nothing (it raises before touching anything) or
finishes. The clock is assumed never to go backwards.

Indexes per queue, all with lazy invalidation (an entry whose version no longer matches its
message, or whose message has left the queue, is skipped and dropped when met):

- ``schedule``   heap of (visible_at, key, version) over every message: delivery order.
- ``lease_ends`` heap of (visible_at, key, version) over leased messages, and ``leased``, the set
                 of keys whose lease is live, so the in-flight count is O(1).
- ``expiries``   heap of (expires_at, key): the expiry sweep every operation starts with.
- ``groups``     each group's keys in order (memory_groups.py: FIFO and FAIR receives).
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from ..clock import Clock, SystemClock
from ..domain import groups as group_rules
from ..domain import leases
from ..domain.groups import redrive_group
from ..domain.leases import fence
from ..domain.limits import TOMBSTONE_SECONDS
from ..domain.rules import (
    body_fits_update,
    bytes_reached,
    channel_matches,
    check_dead_letter_pair,
    message_size,
)
from ..domain.types import (
    DeadLetterOutcome,
    DeleteOutcome,
    DeliveredMessage,
    LeaseResult,
    LeaseStatus,
    MessageState,
    NewMessage,
    PeekCursor,
    PeekedMessage,
    PeekPage,
    QueueConfig,
    QueueInfo,
    QueueStats,
    ReceiveOutcome,
    SendOutcome,
    UpdatedMessage,
    VisibilityChange,
)
from ..errors import (
    InvalidArgument,
    LeaseRejected,
    NoDeadLetterQueue,
    OverLimit,
    QueueAlreadyExists,
    QueueInUse,
    QueueNotFound,
)
from ..receipts import ReceiptCodec, new_queue_uid, new_signing_key
from .base import Store, update_state_map
from .memory_reads import queue_stats
from .memory_rows import _Dedup, _is_leased, _Message, _Queue, _state, _Tombstone

# A heap is rebuilt from its queue's messages once stale entries outnumber live ones by this much
# (a workload that only ever receives with a channel filter never pops the schedule heap).
_COMPACT_SLACK = 1024


class MemoryStore(Store):
    """Messages in dicts and heaps; nothing survives the process. Its send_batch is the
    protocol's default (through send)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._codec = ReceiptCodec(new_signing_key())
        self._queues: dict[str, _Queue] = {}
        self._next_key = 1
        self._settings: dict[str, dict[str, str]] = {}

    async def open(self) -> None:
        """Nothing to create: the store lives in this object."""

    async def close(self) -> None:
        """Nothing to release."""

    def token_key(self) -> bytes:
        return self._codec.derive(b"leaseq page tokens")

    # --- queues -------------------------------------------------------------------------------

    async def create_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        existing = self._queues.get(name)
        if existing is not None:
            if existing.config == config:
                return existing.info
            raise QueueAlreadyExists(name)
        self._check_dead_letter_queue(name, config)
        info = QueueInfo(name=name, config=config, create_time=self.clock.now())
        self._queues[name] = _Queue(info=info, uid=new_queue_uid())
        return info

    async def get_queue(self, name: str) -> QueueInfo:
        return self._queue(name).info

    async def list_queues(self, prefix: str, after: str | None, limit: int) -> list[QueueInfo]:
        names = sorted(
            n for n in self._queues if n.startswith(prefix) and (after is None or n > after)
        )
        return [self._queues[n].info for n in names[: max(limit, 0)]]

    async def update_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        queue = self._queue(name)
        self._check_dead_letter_queue(name, config)
        queue.info = QueueInfo(name=name, config=config, create_time=queue.info.create_time)
        return queue.info

    async def delete_queue(self, name: str) -> None:
        self._queue(name)
        users = sorted(q.name for q in self._queues.values() if q.config.dead_letter_queue == name)
        if users:
            raise QueueInUse(name, users[0])
        del self._queues[name]

    async def queue_metadata(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        found = (self._queues.get(name) for name in names)
        return {q.info.name: dict(q.metadata) for q in found if q is not None and q.metadata}

    async def set_queue_metadata(self, name: str, metadata: Mapping[str, str]) -> None:
        self._queue(name).metadata = dict(metadata)

    async def queue_state(self, name: str, namespace: str) -> dict[str, str]:
        return dict(self._queue(name).state.get(namespace, {}))

    async def update_queue_state(
        self, name: str, namespace: str, changes: Mapping[str, str | None], replace: bool = False
    ) -> dict[str, str]:
        return update_state_map(self._queue(name).state, namespace, changes, replace)

    async def settings(self, namespace: str) -> dict[str, str]:
        return dict(self._settings.get(namespace, {}))

    async def update_settings(
        self, namespace: str, changes: Mapping[str, str | None], replace: bool = False
    ) -> dict[str, str]:
        return update_state_map(self._settings, namespace, changes, replace)

    async def purge_queue(self, name: str) -> int:
        queue = self._open_queue(name, self.clock.now())
        count = len(queue.messages)
        # Dedup and attempt records stay: they describe sends and receives, not stored messages.
        queue.messages.clear()
        queue.schedule.clear()
        queue.lease_ends.clear()
        queue.leased.clear()
        queue.expiries.clear()
        queue.by_attempt.clear()
        queue.groups.clear()
        return count

    async def stats(self, name: str) -> QueueStats:
        now = self.clock.now()
        return queue_stats(self._open_queue(name, now), now)

    # --- messages -----------------------------------------------------------------------------

    async def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        now = self.clock.now()
        queue = self._open_queue(name, now)
        config = queue.config
        in_batch: dict[str, str] = {}  # dedup_id -> message_id, for repeats inside this batch
        outcomes: list[SendOutcome] = []
        for new in messages:
            if new.dedup_id:
                original = in_batch.get(new.dedup_id) or self._recent_duplicate(queue, new, now)
                if original is not None:
                    outcomes.append(SendOutcome(message_id=original, duplicate=True))
                    continue
            visible_at, expires_at = leases.send_times(now, new.delay, new.ttl, config)
            message = _Message(
                key=self._new_key(),
                message_id=os.urandom(16).hex(),
                body=new.body,
                attributes=dict(new.attributes),
                channel=new.channel,
                enqueued_at=now,
                expires_at=expires_at,
                visible_at=visible_at,
                group=group_rules.stored_group(new.group, config),
            )
            self._insert(queue, message)
            if new.dedup_id:
                in_batch[new.dedup_id] = message.message_id
                self._remember_dedup(queue, new.dedup_id, message.message_id, now)
            outcomes.append(SendOutcome(message_id=message.message_id, key=message.key))
        return outcomes

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: float | None = None,
        channel_filter: str = "",
        attempt_id: str = "",
        max_bytes: int | None = None,
    ) -> ReceiveOutcome:
        now = self.clock.now()
        queue = self._open_queue(name, now)
        vt = queue.config.visibility_timeout if visibility_timeout is None else visibility_timeout
        if attempt_id:
            replay = self._replay(queue, attempt_id, now)
            if replay is not None:
                return replay
        limit = leases.delivery_room(
            max_messages, vt, queue.config.max_in_flight, len(queue.leased)
        )
        if limit <= 0:
            raise OverLimit(name, queue.config.max_in_flight, self._earliest_lease_end(queue))

        delivered: list[_Message] = []
        taken = 0  # bytes, for max_bytes
        grouped = queue.config.grouped  # the groups' pick is the whole receive (memory_groups)
        exhausted = partial(self._due_for_dead_letter, queue)
        candidates = (
            iter(queue.groups.candidates(queue, now, limit, channel_filter, exhausted, max_bytes))
            if grouped
            else self._visible_in_order(queue, now, channel_filter)
        )
        while grouped or (len(delivered) < limit and not bytes_reached(taken, max_bytes)):
            message = next(candidates, None)
            if message is None:
                break
            if self._due_for_dead_letter(queue, message):
                self._dead_letter(queue, message, now)
                continue
            self._deliver(queue, message, now, vt, attempt_id)
            delivered.append(message)
            taken += message_size(message.body, message.attributes)
        # Re-index only now: a delivery with visibility 0 is visible again at once and must not
        # come round a second time in this same receive.
        for message in delivered:
            self._reindex(queue, message)

        if not delivered:
            return ReceiveOutcome(messages=[], next_visible_at=self._next_visible_at(queue, now))
        if attempt_id:
            self._remember_attempt(queue, attempt_id, now + vt)
        return ReceiveOutcome(messages=[self._delivered(queue, m) for m in delivered])

    async def peek(
        self,
        name: str,
        max_messages: int,
        channel_filter: str = "",
        include_leased: bool = False,
        include_delayed: bool = False,
        after: PeekCursor | None = None,
        max_bytes: int | None = None,
    ) -> PeekPage:
        now = self.clock.now()
        queue = self._open_queue(name, now)
        wanted = {MessageState.VISIBLE}
        if include_leased:
            wanted.add(MessageState.LEASED)
        if include_delayed:
            wanted.add(MessageState.DELAYED)
        matching = (
            m
            for m in queue.messages.values()
            if _state(m, now) in wanted
            and channel_matches(m.channel, channel_filter)
            and (after is None or m.order() > tuple(after))
        )
        # One more than asked tells whether another page exists.
        page = heapq.nsmallest(max(max_messages, 0) + 1, matching, key=_Message.order)
        more = len(page) > max_messages
        page = page[:max_messages]
        taken = 0
        for index, message in enumerate(page):
            taken += message_size(message.body, message.attributes)
            if bytes_reached(taken, max_bytes) and index + 1 < len(page):
                page, more = page[: index + 1], True
                break
        return PeekPage(
            messages=[self._peeked(m, now) for m in page],
            next_cursor=page[-1].order() if more and page else None,
        )

    async def receipt_of(self, name: str, key: int, receipt_seq: int) -> str:
        return self._codec.encode(self._queue(name).uid, key, receipt_seq)

    async def change_visibility(
        self, name: str, changes: list[VisibilityChange]
    ) -> list[LeaseResult]:
        now = self.clock.now()
        queue = self._open_queue(name, now)
        results: list[LeaseResult] = []
        for change in changes:
            status, key, message = self._resolve(queue, change.receipt, now)
            if message is not None and not _is_leased(message, now):
                status, message = LeaseStatus.LEASE_EXPIRED, None
            if message is None:
                results.append(LeaseResult(receipt=change.receipt, status=status, key=key))
                continue
            self._set_visibility(queue, message, now, change.visibility_timeout, change.backoff)
            if change.reason:
                message.last_error = change.reason
            results.append(
                LeaseResult(
                    receipt=change.receipt,
                    status=LeaseStatus.OK,
                    visible_at=message.visible_at,
                    key=key,
                )
            )
        return results

    async def delete(
        self, name: str, receipts: list[str], attempt_ids: Sequence[str] = ()
    ) -> DeleteOutcome:
        now = self.clock.now()
        queue = self._open_queue(name, now)
        results: list[LeaseResult] = []
        deleted_keys: list[int] = []
        for receipt in receipts:
            status, key, message = self._resolve(queue, receipt, now)
            if message is not None:
                self._delete(queue, message, now)
                deleted_keys.append(message.key)
            results.append(LeaseResult(receipt=receipt, status=status, key=key))
        attempt_counts: list[tuple[str, int]] = []
        for attempt_id in attempt_ids:
            # An empty id would match every message delivered without one.
            keys = sorted(queue.by_attempt.get(attempt_id, ())) if attempt_id else []
            for key in keys:
                self._delete(queue, queue.messages[key], now)
            deleted_keys.extend(keys)
            attempt_counts.append((attempt_id, len(keys)))
        return DeleteOutcome(
            results=results, attempt_counts=attempt_counts, deleted_keys=deleted_keys
        )

    async def dead_letter(self, name: str, receipts: list[str], reason: str) -> DeadLetterOutcome:
        now = self.clock.now()
        queue = self._open_queue(name, now)
        if not leases.dead_letters(queue.config):
            raise NoDeadLetterQueue(name)
        results: list[LeaseResult] = []
        moved: list[int] = []
        for receipt in receipts:
            status, key, message = self._resolve(queue, receipt, now)
            if message is not None:
                self._dead_letter(queue, message, now)
                if reason:
                    message.last_error = reason
                moved.append(message.key)
            results.append(LeaseResult(receipt=receipt, status=status, key=key))
        return DeadLetterOutcome(results, moved, queue.config.dead_letter_queue or "")

    async def update_message(
        self,
        name: str,
        receipt: str,
        body: bytes | None = None,
        attributes: dict[str, str] | None = None,
        visibility_timeout: float | None = None,
    ) -> UpdatedMessage:
        now = self.clock.now()
        queue = self._open_queue(name, now)
        status, _key, message = self._resolve(queue, receipt, now)
        if message is not None and not leases.may_update(
            message.receipt_seq, _is_leased(message, now)
        ):
            status, message = LeaseStatus.LEASE_EXPIRED, None
        if message is None:
            raise LeaseRejected(status)
        new_body = message.body if body is None else body
        new_attributes = message.attributes if attributes is None else dict(attributes)
        body_fits_update(new_body, new_attributes, queue.config)
        message.body = new_body
        message.attributes = new_attributes
        if leases.update_leases(message.receipt_seq, visibility_timeout):
            message.leased = True
        message.receipt_seq += 1
        if visibility_timeout is not None:
            self._set_visibility(queue, message, now, visibility_timeout)
        return UpdatedMessage(
            key=message.key,
            receipt=self._receipt(queue, message),
            visible_at=message.visible_at,
        )

    async def redrive(
        self,
        name: str,
        destination: str | None = None,
        max_messages: int = 0,
        channel_filter: str = "",
    ) -> int:
        now = self.clock.now()
        queue = self._open_queue(name, now)
        target = None if destination is None else self._open_queue(destination, now)
        # A snapshot, so a message moved into this same queue is not met again.
        candidates = list(self._visible_in_order(queue, now, channel_filter, consume=False))
        moved = 0
        for message in candidates:
            if max_messages and moved >= max_messages:
                break
            to = target if target is not None else self._source_of(message, now)
            movable, group = (
                (False, None) if to is None else redrive_group(message.group, to.config)
            )
            if to is None or not movable:
                continue  # no source to go back to, or a FIFO one and no group: it stays
            self._remove(queue, message)  # also forgets its receive attempt
            message.group = group
            message.delivery_count = 0
            message.visible_at = now
            message.leased = message.backoff = False
            message.source_queue = None
            message.receipt_seq += 1
            message.expires_at = leases.redrive_expiry(now, to.config)
            self._insert(to, message)
            moved += 1
        return moved

    # --- queue helpers ------------------------------------------------------------------------

    def _queue(self, name: str) -> _Queue:
        queue = self._queues.get(name)
        if queue is None:
            raise QueueNotFound(name)
        return queue

    def _open_queue(self, name: str, now: float) -> _Queue:
        """The queue, with everything that ended by `now` swept away: what every operation
        on messages starts with, so counts are exact whenever they are read."""
        queue = self._queue(name)
        self._settle(queue, now)
        return queue

    def _check_dead_letter_queue(self, name: str, config: QueueConfig) -> None:
        dlq = config.dead_letter_queue
        if not dlq:
            return
        if dlq == name:
            raise InvalidArgument(
                "config.dead_letter_queue", "a queue cannot be its own dead letter queue"
            )
        if dlq not in self._queues:
            raise InvalidArgument("config.dead_letter_queue", f"queue {dlq!r} does not exist")
        check_dead_letter_pair(config, self._queues[dlq].config)

    def _new_key(self) -> int:
        key = self._next_key
        self._next_key += 1
        return key

    def _settle(self, queue: _Queue, now: float) -> None:
        self._expire(queue, now)
        self._end_leases(queue, now)
        self._forget_old_records(queue, now)
        self._compact(queue)

    def _expire(self, queue: _Queue, now: float) -> None:
        while queue.expiries and queue.expiries[0][0] <= now:
            expires_at, key = heapq.heappop(queue.expiries)
            message = queue.messages.get(key)
            if message is not None and message.expires_at == expires_at:
                self._remove(queue, message)
                queue.expired_total += 1

    def _end_leases(self, queue: _Queue, now: float) -> None:
        """Drop leases that ended by now from the live set (the message itself is visible by
        its visible_at alone; its `leased` flag is harmless once visible_at <= now). A lease
        that ends with the retry policy's backoff becomes a delay until its redelivery."""
        while queue.lease_ends and queue.lease_ends[0][0] <= now:
            end, key, version = heapq.heappop(queue.lease_ends)
            message = queue.messages.get(key)
            if message is not None and message.version == version:
                queue.leased.discard(key)
                if message.backoff:
                    message.visible_at = leases.redelivery_at(
                        end, message.delivery_count, queue.config
                    )
                    message.leased = message.backoff = False
                    self._reindex(queue, message)

    def _forget_old_records(self, queue: _Queue, now: float) -> None:
        while queue.tombstone_order and now - queue.tombstone_order[0][0] > TOMBSTONE_SECONDS:
            deleted_at, key = queue.tombstone_order.popleft()
            tombstone = queue.tombstones.get(key)
            if tombstone is not None and tombstone.deleted_at == deleted_at:
                del queue.tombstones[key]
        while queue.dedup_expiries and queue.dedup_expiries[0][0] <= now:
            until, dedup_id = heapq.heappop(queue.dedup_expiries)
            record = queue.dedup.get(dedup_id)
            if record is not None and record.until == until:
                del queue.dedup[dedup_id]
        while queue.attempt_expiries and queue.attempt_expiries[0][0] <= now:
            until, attempt_id = heapq.heappop(queue.attempt_expiries)
            if queue.attempts.get(attempt_id) == until:
                del queue.attempts[attempt_id]

    def _compact(self, queue: _Queue) -> None:
        live = len(queue.messages)
        if len(queue.schedule) > 2 * live + _COMPACT_SLACK:
            queue.schedule = [(m.visible_at, m.key, m.version) for m in queue.messages.values()]
            heapq.heapify(queue.schedule)
        if len(queue.lease_ends) > 2 * len(queue.leased) + _COMPACT_SLACK:
            queue.lease_ends = [
                (m.visible_at, m.key, m.version) for m in (queue.messages[k] for k in queue.leased)
            ]
            heapq.heapify(queue.lease_ends)
        if len(queue.expiries) > 2 * live + _COMPACT_SLACK:
            queue.expiries = [(m.expires_at, m.key) for m in queue.messages.values()]
            heapq.heapify(queue.expiries)

    # --- message index helpers ----------------------------------------------------------------

    def _insert(self, queue: _Queue, message: _Message) -> None:
        queue.messages[message.key] = message
        heapq.heappush(queue.expiries, (message.expires_at, message.key))
        if message.group is not None:
            queue.groups.add(message.group, message.key)
        if message.attempt_id:
            queue.by_attempt.setdefault(message.attempt_id, set()).add(message.key)
        self._reindex(queue, message)

    def _remove(self, queue: _Queue, message: _Message) -> None:
        """Take the message out of the queue; its heap entries go stale."""
        del queue.messages[message.key]
        if message.group is not None:
            queue.groups.discard(message.group, message.key)
        queue.leased.discard(message.key)
        self._set_attempt(queue, message, "")

    def _reindex(self, queue: _Queue, message: _Message) -> None:
        """Record the message's current visible_at / lease in the heaps."""
        message.version += 1
        entry = (message.visible_at, message.key, message.version)
        heapq.heappush(queue.schedule, entry)
        if message.leased:
            heapq.heappush(queue.lease_ends, entry)
            queue.leased.add(message.key)
        else:
            queue.leased.discard(message.key)

    def _set_attempt(self, queue: _Queue, message: _Message, attempt_id: str) -> None:
        if message.attempt_id:
            keys = queue.by_attempt.get(message.attempt_id)
            if keys is not None:
                keys.discard(message.key)
                if not keys:
                    del queue.by_attempt[message.attempt_id]
        message.attempt_id = attempt_id
        if attempt_id:
            queue.by_attempt.setdefault(attempt_id, set()).add(message.key)

    def _is_current(self, queue: _Queue, entry: tuple[float, int, int]) -> bool:
        message = queue.messages.get(entry[1])
        return message is not None and message.version == entry[2]

    def _visible_in_order(
        self, queue: _Queue, now: float, channel_filter: str, consume: bool = True
    ) -> Iterator[_Message]:
        """Visible messages in delivery order, lazily. Without a channel filter (and when the
        caller will re-index or remove every message it takes) this pops the schedule heap;
        otherwise it orders a snapshot of the matching visible messages."""
        if consume and not channel_filter:
            while queue.schedule and queue.schedule[0][0] <= now:
                entry = heapq.heappop(queue.schedule)
                if self._is_current(queue, entry):
                    yield queue.messages[entry[1]]
            return
        matching = [
            (m.visible_at, m.key)
            for m in queue.messages.values()
            if m.visible_at <= now and channel_matches(m.channel, channel_filter)
        ]
        heapq.heapify(matching)
        while matching:
            _, key = heapq.heappop(matching)
            message = queue.messages.get(key)
            if message is not None:
                yield message

    def _next_visible_at(self, queue: _Queue, now: float) -> float | None:
        """The earliest visible_at > now of any message (a lease or a delay ending)."""
        while queue.schedule and not self._is_current(queue, queue.schedule[0]):
            heapq.heappop(queue.schedule)
        if queue.schedule and queue.schedule[0][0] > now:
            return queue.schedule[0][0]
        # Visible messages remain (they did not match the filter): look past them.
        later = [m.visible_at for m in queue.messages.values() if m.visible_at > now]
        return min(later, default=None)

    def _earliest_lease_end(self, queue: _Queue) -> float | None:
        while queue.lease_ends and not self._is_current(queue, queue.lease_ends[0]):
            heapq.heappop(queue.lease_ends)
        return queue.lease_ends[0][0] if queue.lease_ends else None

    # --- delivery, leases, dead letters -------------------------------------------------------

    def _deliver(
        self, queue: _Queue, message: _Message, now: float, vt: float, attempt_id: str
    ) -> None:
        """Mutate the message into its new delivery; the caller re-indexes it."""
        message.delivery_count += 1
        message.receipt_seq += 1
        message.visible_at = leases.lease_end(now, vt)
        message.leased = leases.leases(vt)
        if queue.config.retry_policy is not None:  # (a stale flag without one changes nothing)
            message.backoff = leases.delivery_backs_off(vt, queue.config)
        self._set_attempt(queue, message, attempt_id)

    def _set_visibility(
        self, queue: _Queue, message: _Message, now: float, vt: float, backoff: bool = True
    ) -> None:
        message.backoff = False  # a lease end named by the caller: no backoff after it
        if leases.leases(vt):
            message.visible_at = leases.lease_end(now, vt)
        else:  # a release: visible now (or after the retry backoff), held by no one
            message.visible_at = leases.release_end(
                now, message.delivery_count, queue.config, backoff
            )
            message.leased = False
            self._set_attempt(queue, message, "")
        self._reindex(queue, message)

    def _replay(self, queue: _Queue, attempt_id: str, now: float) -> ReceiveOutcome | None:
        """Rules a and b of receive attempts; None means: receive as usual (rule c)."""
        keys = queue.by_attempt.get(attempt_id, set())
        held = sorted(k for k in keys if _is_leased(queue.messages[k], now))
        if held:
            messages = [self._delivered(queue, queue.messages[k]) for k in held]
            return ReceiveOutcome(messages=messages)
        until = queue.attempts.get(attempt_id)
        if until is not None and until > now:
            return ReceiveOutcome(messages=[], next_visible_at=self._next_visible_at(queue, now))
        return None

    def _remember_attempt(self, queue: _Queue, attempt_id: str, until: float) -> None:
        queue.attempts[attempt_id] = until
        heapq.heappush(queue.attempt_expiries, (until, attempt_id))

    def _due_for_dead_letter(self, queue: _Queue, message: _Message) -> bool:
        return (
            leases.due_for_dead_letter(message.delivery_count, queue.config)
            and queue.config.dead_letter_queue in self._queues
        )

    def _dead_letter(self, queue: _Queue, message: _Message, now: float) -> None:
        dlq = self._open_queue(queue.config.dead_letter_queue or "", now)
        self._remove(queue, message)
        message.source_queue = queue.name
        message.visible_at = now
        message.leased = message.backoff = False
        message.expires_at = leases.dead_letter_expiry(message.enqueued_at, dlq.config)
        message.receipt_seq += 1
        self._insert(dlq, message)
        queue.dead_lettered_total += 1

    def _source_of(self, message: _Message, now: float) -> _Queue | None:
        if not message.source_queue or message.source_queue not in self._queues:
            return None
        return self._open_queue(message.source_queue, now)

    def _delete(self, queue: _Queue, message: _Message, now: float) -> None:
        self._remove(queue, message)
        queue.tombstones[message.key] = _Tombstone(message.receipt_seq, now)
        queue.tombstone_order.append((now, message.key))
        queue.deleted_total += 1

    # --- receipts -----------------------------------------------------------------------------

    def _receipt(self, queue: _Queue, message: _Message) -> str:
        return self._codec.encode(queue.uid, message.key, message.receipt_seq)

    def _resolve(
        self, queue: _Queue, receipt: str, now: float
    ) -> tuple[LeaseStatus, int | None, _Message | None]:
        """Steps 1-3 of the lease status order: (status, key, message). The message is given
        only when the receipt is its current one (status OK); the caller applies step 4."""
        decoded = self._codec.decode(receipt, queue.uid)
        if decoded is None:
            return LeaseStatus.INVALID_RECEIPT, None, None
        key, seq = decoded
        message = queue.messages.get(key)
        tombstone = queue.tombstones.get(key) if message is None else None
        status = fence(
            seq,
            None if message is None else message.receipt_seq,
            None if tombstone is None else (tombstone.receipt_seq, tombstone.deleted_at),
            now,
        )
        if status is LeaseStatus.INVALID_RECEIPT:
            return status, None, None
        if status is not None:
            return status, key, None
        return LeaseStatus.OK, key, message

    # --- dedup --------------------------------------------------------------------------------

    def _recent_duplicate(self, queue: _Queue, new: NewMessage, now: float) -> str | None:
        record = queue.dedup.get(new.dedup_id)
        if record is not None and now < record.until:
            return record.message_id
        return None

    def _remember_dedup(self, queue: _Queue, dedup_id: str, message_id: str, now: float) -> None:
        until = leases.dedup_until(now, queue.config)
        if until is None:
            return  # a zero window leaves no record
        queue.dedup[dedup_id] = _Dedup(message_id, until)
        heapq.heappush(queue.dedup_expiries, (until, dedup_id))

    # --- views --------------------------------------------------------------------------------

    def _delivered(self, queue: _Queue, message: _Message) -> DeliveredMessage:
        return DeliveredMessage(receipt=self._receipt(queue, message), **_view(message))

    def _peeked(self, message: _Message, now: float) -> PeekedMessage:
        return PeekedMessage(
            state=_state(message, now),
            receipt_seq=message.receipt_seq,
            source_queue=message.source_queue,
            **_view(message),
        )


_VIEW_FIELDS = (
    "key", "message_id", "body", "channel", "enqueued_at", "expires_at", "visible_at",
    "delivery_count", "last_error",
)  # fmt: skip


def _view(message: _Message) -> dict[str, Any]:
    """What DeliveredMessage and PeekedMessage show of a message alike."""
    view = {name: getattr(message, name) for name in _VIEW_FIELDS}
    view["attributes"] = dict(message.attributes)
    view["group"] = message.group or ""
    view["sequence"] = 0 if message.group is None else message.key
    return view


__all__ = ["MemoryStore"]
