"""What ``Consumer`` and ``AsyncConsumer`` share (``leaseq.client.consumer`` tells how a consumer
works): the settings and their checks, the lease table and the counters, and every decision
about a held message (what a handler call gets, what to release or delete, which leases are due
for extension), all I/O-free; the drivers (``_consumer_thread``, ``_consumer_async``) do the
calls, the waiting and the threads or tasks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc

from ._leases import (
    MAX_VISIBILITY,
    REJECT,
    Extension,
    Lease,
    LeaseTable,
    Reject,
    ReleaseDelay,
    reason_of,
    release_seconds,
)
from ._wire import MAX_BATCH, seconds
from .client import AsyncQueueClient, QueueClient
from .errors import DeadlineExceeded, LeaseqError, Unavailable
from .retry import RetryPolicy
from .types import DurationLike, LeaseResult, LeaseStatus, Message, VisibilityChange

log = logging.getLogger("leaseq.client.consumer")

ClientT = TypeVar("ClientT", QueueClient, AsyncQueueClient)

MessageHandler = Callable[[Message], object]
BatchHandler = Callable[[list[Message]], object]
Handler = MessageHandler | BatchHandler
AsyncMessageHandler = Callable[[Message], Awaitable[object]]
AsyncBatchHandler = Callable[[list[Message]], Awaitable[object]]
AsyncHandler = AsyncMessageHandler | AsyncBatchHandler

DEFAULT_RECONNECT = RetryPolicy(initial_backoff=0.1, max_backoff=5.0, jitter=0.2)
"""Pacing of stream reconnects and of settle/extension calls that failed even after the
client's own retries (``max_attempts`` does not apply: these loops never give up while the
consumer runs)."""

SETTLE_GRACE = 1.0
"""Seconds ``close`` still gives the last acknowledgements and releases when its timeout has
already passed, so that what is known to be done is not left to redelivery for a moment's
lack of time."""

# A follow stream ends with these when the server or the connection failed, or when the server
# drained: open a new one. Anything else (the queue was deleted, no permission, a bad argument)
# will not get better by trying again and stops the consumer.
RECONNECT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)

# Settle and extension calls are retried by the client on these; when even that gave up, the
# consumer keeps trying (the server may be restarting) rather than drop what is known.
TRANSIENT = (Unavailable, DeadlineExceeded)

Item = list[Lease]
"""What one handler call gets: one lease (per-message mode) or a stream batch's leases; in
per-message mode, the messages of one group in a batch make one item, handled in order."""


def _items(leases: list[Lease]) -> list[Item]:
    """Per-message mode: an item per message, except that the messages of one group are one
    item (in their order), so that no two workers run one group's messages at once."""
    items: list[Item] = []
    by_group: dict[str, Item] = {}
    for lease in leases:
        group = lease.message.group
        if not group:
            items.append([lease])
        elif group in by_group:
            by_group[group].append(lease)
        else:
            by_group[group] = [lease]
            items.append(by_group[group])
    return items


@dataclass(frozen=True)
class ConsumerStats:
    """A consumer's counters at one moment (``Consumer.stats()``).

    Attributes:
        received: messages delivered to this consumer.
        succeeded: messages whose handler returned (deleted, or being deleted).
        failed: messages whose handler raised (released, or being released).
        rejected: messages whose handler raised ``Reject`` (moved to the dead letter queue, or
            being moved).
        unstarted_released: messages released by ``close`` before a handler saw them.
        extensions: lease extensions the server granted.
        extension_calls: ChangeVisibility calls that asked for them.
        lost_leases: leases the server no longer held for this consumer while it still held
            the message (expired or superseded; the message will be or was delivered again).
        ack_failures: deletes the server refused (e.g. ``RECEIPT_SUPERSEDED``: the message had
            been delivered again after its lease was lost).
        reconnects: follow streams opened again after an error or a server's drain.
        held: messages held now (delivered, not yet settled).
        running: handler calls running now.
    """

    received: int = 0
    succeeded: int = 0
    failed: int = 0
    rejected: int = 0
    unstarted_released: int = 0
    extensions: int = 0
    extension_calls: int = 0
    lost_leases: int = 0
    ack_failures: int = 0
    reconnects: int = 0
    held: int = 0
    running: int = 0


def chunks(items: Sequence[Any], size: int = MAX_BATCH) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Core(Generic[ClientT]):
    """Settings, the lease table and the counters that both consumers share; every method is
    I/O-free and runs under ``lock`` (a sync consumer's threads share it; an async consumer
    never contends for it)."""

    def __init__(
        self,
        client: ClientT,
        queue: str,
        *,
        batch: bool,
        concurrency: int,
        max_outstanding: int,
        batch_size: int,
        visibility_timeout: DurationLike | None,
        max_lease_time: DurationLike | None,
        release_delay: ReleaseDelay,
        channel: str | None,
        reconnect: RetryPolicy | None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 1 <= max_outstanding <= 100_000:
            raise ValueError("max_outstanding must be between 1 and 100,000")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
        self.client: ClientT = client
        self.queue = queue
        self.batch = batch
        self.concurrency = concurrency
        self.max_outstanding = max_outstanding
        self.batch_size = min(batch_size, max_outstanding)
        self.lease_length: float | None = None
        if visibility_timeout is not None:
            self.lease_length = self._check_lease(seconds(visibility_timeout))
        self.max_lease = None if max_lease_time is None else seconds(max_lease_time)
        if self.max_lease is not None and self.max_lease <= 0:
            raise ValueError("max_lease_time must be positive (or None: no limit)")
        if not callable(release_delay):
            seconds(release_delay)  # a TypeError now rather than at the first failure
        self.release_delay = release_delay
        self.channel = channel
        self.reconnect = reconnect or DEFAULT_RECONNECT
        self.lock = threading.Lock()
        self.table = LeaseTable(self.lease_length or 30.0, self.max_lease)
        self.counts: dict[str, int] = dict.fromkeys(
            (
                "received",
                "succeeded",
                "failed",
                "rejected",
                "unstarted_released",
                "extensions",
                "extension_calls",
                "lost_leases",
                "ack_failures",
                "reconnects",
            ),
            0,
        )
        self.running = 0
        self.error: LeaseqError | None = None
        self.wake_at: float | None = None  # when the leaser plans to look at the schedule

    @staticmethod
    def _check_lease(length: float) -> float:
        if not 0 < length <= MAX_VISIBILITY:
            raise ValueError("a consumer needs a visibility timeout above 0 s (at most 7 days)")
        return length

    def configure(self, queue_visibility_timeout: float | None) -> None:
        """Fix the lease length: the consumer's own, else the queue's (read at start)."""
        if self.lease_length is None:
            assert queue_visibility_timeout is not None
            self.lease_length = self._check_lease(queue_visibility_timeout)
        self.table = LeaseTable(self.lease_length, self.max_lease)

    def stream_options(self) -> dict[str, Any]:
        return {
            "max_messages": self.batch_size,
            "max_outstanding": self.max_outstanding,
            "visibility_timeout": self.lease_length,
            "channel": self.channel,
        }

    def stats(self) -> ConsumerStats:
        with self.lock:
            return ConsumerStats(**self.counts, held=len(self.table), running=self.running)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    # --- deliveries -------------------------------------------------------------------------

    def hold(self, messages: list[Message]) -> tuple[list[Item], bool]:
        """Hold a stream batch; returns the handler calls it makes, and whether the leaser
        must look at its schedule again (a new lease is due before it planned to wake)."""
        now = time.monotonic()
        with self.lock:
            leases = [self.table.add(m, now) for m in messages]
            self.counts["received"] += len(leases)
            earliest = min((lease.renew_at for lease in leases), default=None)
            wake = earliest is not None and (self.wake_at is None or earliest < self.wake_at)
            if wake:
                self.wake_at = earliest
        return ([leases] if self.batch else _items(leases)), wake

    def in_order(self, item: Item) -> bool:
        """Per-message mode, several messages of one group: the handler takes them one after
        another, in the batch's (the group's) order (see `finished_in_order`)."""
        return not self.batch and len(item) > 1

    def messages_of(self, item: Item) -> Any:
        messages = [lease.message for lease in item]
        return messages if self.batch else messages[0]

    def started(self, item: Item) -> None:
        with self.lock:
            self.running += 1
            for lease in item:
                lease.started = True

    def finished(self, item: Item, error: BaseException | None) -> list[tuple[Lease, float, str]]:
        """A handler call ended; returns the releases it needs (none on success)."""
        with self.lock:
            self.running -= 1
            self.counts["succeeded" if error is None else "failed"] += len(item)
            self.table.settling(item, renew=error is None)
        if error is None:
            return []
        reason = reason_of(error)
        return [(lease, self._release_delay(lease.message, error), reason) for lease in item]

    def rejected(self, item: Item, reject: Reject) -> tuple[Item, list[tuple[Lease, float, str]]]:
        """A handler raised Reject: (the leases to delete: the rest of a batch that named its
        rejected messages; the dead-letterings, as releases of delay REJECT)."""
        named = None if reject.messages is None else {id(m) for m in reject.messages}
        gone = [lease for lease in item if named is None or id(lease.message) in named]
        done = [lease for lease in item if named is not None and id(lease.message) not in named]
        with self.lock:
            self.running -= 1
            self.counts["rejected"] += len(gone)
            self.counts["succeeded"] += len(done)
            # Kept extended until the move lands: a lease lost meanwhile would let the message
            # be delivered again, and its move be refused as superseded.
            self.table.settling(item, renew=True)
        return done, [(lease, REJECT, reject.reason) for lease in gone]

    def finished_in_order(
        self, item: Item, done: int, error: BaseException | None
    ) -> list[tuple[Lease, float, str]]:
        """A group's messages, handled in order, ended: the first `done` succeeded (the caller
        deletes them); on an error the failed one is released as a failed message is (a
        Reject dead-letters it), and the ones after it at once, so that the group comes back in
        order."""
        with self.lock:
            self.running -= 1
            self.counts["succeeded"] += done
            if isinstance(error, Reject):
                self.counts["rejected"] += 1
                self.counts["failed"] += len(item) - done - 1
            elif error is not None:
                self.counts["failed"] += len(item) - done
            self.table.settling(item[:done], renew=True)
            self.table.settling(item[done:], renew=False)
        if error is None:
            return []
        failed, *after = item[done:]
        if isinstance(error, Reject):
            return [(failed, REJECT, error.reason), *((lease, 0.0, "") for lease in after)]
        return [
            (failed, self._release_delay(failed.message, error), reason_of(error)),
            *((lease, 0.0, "") for lease in after),
        ]

    def unstarted(self, items: list[Item]) -> list[tuple[Lease, float, str]]:
        """Closing: these were never started; release them now, without a reason (nothing
        failed)."""
        leases = [lease for item in items for lease in item]
        with self.lock:
            self.counts["unstarted_released"] += len(leases)
            self.table.settling(leases, renew=False)
        return [(lease, 0.0, "") for lease in leases]

    def abandoned(self, item: Item) -> list[tuple[Lease, float, str]]:
        """A handler call was cancelled (close ran out of time): release its messages now."""
        with self.lock:
            self.running -= 1
            self.table.settling(item, renew=False)
        return [(lease, 0.0, "") for lease in item]

    def _release_delay(self, message: Message, error: BaseException) -> float:
        try:
            return release_seconds(self.release_delay, message, error)
        except Exception:  # a broken release_delay must not lose the release itself
            log.exception("release_delay failed; releasing message %s now", message.message_id)
            return 0.0

    # --- leases -----------------------------------------------------------------------------

    def due(self) -> tuple[list[Extension], float | None, float]:
        """(extensions to send now, when the next one is due, now)."""
        now = time.monotonic()
        with self.lock:
            extensions, gave_up = self.table.due(now)
            # Where the leaser will wake next (hold() pokes it only for an earlier lease).
            following = self.wake_at = self.table.next_renewal()
        for lease in gave_up:
            log.warning(
                "message %s reached max_lease_time (%.0f s) with its handler %s; its lease is "
                "no longer extended and it will be delivered again when the lease ends",
                lease.message.message_id,
                self.max_lease or 0,
                "still running" if lease.started else "not started",
            )
        return extensions, following, now

    def extended(
        self, extensions: Sequence[Extension], results: Sequence[LeaseResult], sent_at: float
    ) -> None:
        lost: list[tuple[Lease, LeaseStatus]] = []
        with self.lock:
            self.counts["extension_calls"] += 1
            for extension, result in zip(extensions, results):
                if extension.lease not in self.table:
                    continue  # settled meanwhile: whatever the server said no longer matters
                held = self.table.extended(extension, result.status, sent_at)
                if result.status is LeaseStatus.OK:
                    self.counts["extensions"] += 1
                elif not held:
                    self.counts["lost_leases"] += 1
                    lost.append((extension.lease, result.status))
        for lease, status in lost:
            log.warning(
                "lost the lease of message %s (%s) while %s: it may be handled twice",
                lease.message.message_id,
                status.name,
                "its handler runs" if lease.started else "waiting for a handler",
            )

    def postpone(self, extensions: Sequence[Extension], failures: int, error: Exception) -> None:
        if isinstance(error, LeaseqError):
            delay = self.reconnect.backoff(failures, error)
            log.debug(
                "extending %d leases failed with %s; trying again in %.3f s",
                len(extensions),
                error.code.name,
                delay,
            )
        else:  # a bug, or the client was closed under us: keep the leaser alive, say why
            delay = self.reconnect.backoff(failures)
            log.error("extending %d leases failed", len(extensions), exc_info=error)
        with self.lock:
            self.table.postpone(extensions, time.monotonic() + delay)

    # --- settling ---------------------------------------------------------------------------

    def deleted(self, leases: Sequence[Lease], results: Sequence[LeaseResult]) -> None:
        refused = []
        with self.lock:
            for lease in leases:
                self.table.remove(lease)
            for lease, result in zip(leases, results):
                if result.status not in (LeaseStatus.OK, LeaseStatus.ALREADY_DELETED):
                    self.counts["ack_failures"] += 1
                    refused.append((lease, result.status))
        for lease, status in refused:
            log.warning(
                "deleting message %s after its handler succeeded was refused (%s): it was or "
                "will be delivered again",
                lease.message.message_id,
                status.name,
            )

    def dead_lettered(self, leases: Sequence[Lease], results: Sequence[LeaseResult]) -> None:
        refused = []
        with self.lock:
            for lease in leases:
                self.table.remove(lease)
            for lease, result in zip(leases, results):
                if result.status is not LeaseStatus.OK:
                    refused.append((lease, result.status))
        for lease, status in refused:
            log.warning(
                "moving rejected message %s to the dead letter queue was refused (%s)",
                lease.message.message_id,
                status.name,
            )

    def released(self, leases: Sequence[Lease]) -> None:
        with self.lock:
            for lease in leases:
                self.table.remove(lease)

    def dropped(self, leases: Sequence[Lease], what: str, error: LeaseqError) -> None:
        """A settle failed for good (not a transient error): forget the leases; the messages
        come back when the leases end."""
        log.warning(
            "%s of %d messages failed (%s); they will be delivered again", what, len(leases), error
        )
        self.released(leases)

    def reconnectable(self, error: LeaseqError) -> bool:
        return error.code in RECONNECT_CODES


def release_changes(releases: Sequence[tuple[Lease, float, str]]) -> list[VisibilityChange]:
    return [VisibilityChange(lease.receipt, delay, reason) for lease, delay, reason in releases]


def split_rejects(
    releases: Sequence[tuple[Lease, float, str]],
) -> tuple[list[tuple[Lease, float, str]], dict[str, list[Lease]]]:
    """(the real releases, the dead-letterings by reason: one DeadLetterMessages call each)."""
    plain = [release for release in releases if release[1] != REJECT]
    rejects: dict[str, list[Lease]] = {}
    for lease, delay, reason in releases:
        if delay == REJECT:
            rejects.setdefault(reason, []).append(lease)
    return plain, rejects
