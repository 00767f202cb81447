"""The lease decisions, written once for every store: fencing, deliveries, dead-lettering,
expiry, what a release or a moved lease does (the package docstring states the rules).

Stores look up rows and write them; what to write comes from here. The SQL stores load the
fencing state of the messages a lease request names into `Lease` and `Tombstone` objects and
let `apply_visibility_changes` / `apply_deletes` / `updated_message` decide, entry by entry, so
two entries for the same message see each other's effect. The memory store, the reference,
keeps its own objects and asks the same functions (`fence`, `lease_end`, ...).

Nothing here does I/O or reads a clock: `now` is always passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import LeaseRejected
from . import limits
from .rules import body_fits_update
from .types import (
    LeaseResult,
    LeaseStatus,
    MessageState,
    QueueConfig,
    RetryPolicy,
    VisibilityChange,
)


def message_state(visible_at: float, leased: bool, now: float) -> MessageState:
    """The state of an unexpired message at now."""
    if visible_at <= now:
        return MessageState.VISIBLE
    return MessageState.LEASED if leased else MessageState.DELAYED


def fence(
    receipt_seq: int,
    current_seq: int | None,
    tombstone: tuple[int, float] | None,
    now: float,
) -> LeaseStatus | None:
    """Steps 2 and 3 of the lease status order for a receipt that verified: None when the receipt
    is the message's current one (the caller applies step 4), else the status to answer.

    current_seq is the message's receipt_seq, None when the message is not in the queue;
    tombstone is (receipt_seq, deleted_at) of its tombstone in this queue, if any.
    """
    if current_seq is None:
        if tombstone is not None and now - tombstone[1] <= limits.TOMBSTONE_SECONDS:
            if receipt_seq == tombstone[0]:
                return LeaseStatus.ALREADY_DELETED
            return LeaseStatus.RECEIPT_SUPERSEDED
        return LeaseStatus.MESSAGE_NOT_FOUND
    if receipt_seq < current_seq:
        return LeaseStatus.RECEIPT_SUPERSEDED
    if receipt_seq > current_seq:
        # Never issued by this store's current state (e.g. a store restored from a backup).
        return LeaseStatus.INVALID_RECEIPT
    return None


# --- sending, delivering, expiring ----------------------------------------------------------


def send_times(
    now: float, delay: float | None, ttl: float | None, config: QueueConfig
) -> tuple[float, float]:
    """(visible_at, expires_at) of a message sent at now (None: the queue's default)."""
    return (
        now + (config.default_delay if delay is None else delay),
        now + (config.message_retention if ttl is None else ttl),
    )


def dedup_until(now: float, config: QueueConfig) -> float | None:
    """Until when a dedup id sent at now makes later sends duplicates; None when the queue's
    window is 0, which leaves no record (now < now + 0 never holds). A repeat later in the same
    batch is a duplicate whatever the window."""
    return now + config.dedup_window if config.dedup_window > 0 else None


def lease_end(now: float, timeout: float) -> float:
    """visible_at after a delivery or a visibility change of `timeout` seconds at now."""
    return now + timeout


def retry_backoff(delivery_count: int, policy: RetryPolicy) -> float:
    """Seconds a message waits, after its lease ended or a release without a delay, before it
    is visible again: min(maximum_backoff, minimum_backoff * 2^(n-1)), n its delivery count
    (at least 1)."""
    exponent = max(delivery_count, 1) - 1
    if exponent >= 64:  # 2^64 * any backoff above 0 is past every maximum
        return policy.maximum_backoff if policy.minimum_backoff > 0 else 0.0
    return min(policy.maximum_backoff, policy.minimum_backoff * 2.0**exponent)


def backs_off(config: QueueConfig) -> bool:
    """Whether leases of this queue end with a backoff (the queue has a retry policy)."""
    return config.retry_policy is not None


def redelivery_at(lease_end: float, delivery_count: int, config: QueueConfig) -> float:
    """When a message whose lease ended at lease_end (a lease a delivery gave; a
    ChangeVisibility > 0 names its instant itself) is visible again."""
    if config.retry_policy is None:
        return lease_end
    return lease_end + retry_backoff(delivery_count, config.retry_policy)


def delivery_backs_off(timeout: float, config: QueueConfig) -> bool:
    """Whether the lease a delivery of `timeout` seconds gives ends with the retry policy's
    backoff (a store marks the message so and turns the ended lease into a delay, `redelivery_at`)."""
    return timeout > 0 and config.retry_policy is not None


def release_end(now: float, delivery_count: int, config: QueueConfig, backoff: bool) -> float:
    """visible_at after a release (a visibility change of 0) at now: the retry policy's backoff
    unless the release asked for none."""
    if not backoff:
        return now
    return redelivery_at(now, delivery_count, config)


def leases(timeout: float) -> bool:
    """Whether a delivery or visibility change of `timeout` seconds holds the message under a
    lease; 0 releases it (visible now, not leased, its receive attempt forgotten)."""
    return timeout > 0


def delivery_room(max_messages: int, timeout: float, max_in_flight: int, in_flight: int) -> int:
    """How many messages a receive may deliver: deliveries without a lease are not limited;
    <= 0 means the queue is at its in-flight limit (OverLimit)."""
    if not leases(timeout):
        return max_messages
    return min(max_messages, max_in_flight - in_flight)


def dead_letters(config: QueueConfig) -> bool:
    """Whether receives of this queue may move messages to a dead letter queue."""
    return bool(config.dead_letter_queue) and config.max_delivery_count is not None


def due_for_dead_letter(delivery_count: int, config: QueueConfig) -> bool:
    """Whether a receive moves this candidate to the queue's dead letter queue instead of
    delivering it."""
    return (
        dead_letters(config)
        and config.max_delivery_count is not None
        and delivery_count >= config.max_delivery_count
    )


def dead_letter_expiry(enqueued_at: float, dead_letter_config: QueueConfig) -> float:
    """SQS's rule: a dead letter's retention clock keeps running from its original enqueue."""
    return enqueued_at + dead_letter_config.message_retention


def redrive_expiry(now: float, destination_config: QueueConfig) -> float:
    """A redriven message starts a new retention in its destination."""
    return now + destination_config.message_retention


# --- lease requests over loaded rows --------------------------------------------------------


@dataclass
class Lease:
    """The fencing-relevant state of one message, updated as a request's entries are applied."""

    key: int
    receipt_seq: int
    leased: bool
    visible_at: float
    last_error: str
    clear_attempt: bool = False
    delivery_count: int = 0
    backoff: bool = False  # the lease ends with the retry policy's backoff (delivery_backs_off)

    def live(self, now: float) -> bool:
        return self.leased and self.visible_at > now

    def set_visibility(
        self,
        now: float,
        timeout: float,
        reason: str = "",
        config: QueueConfig | None = None,
        backoff: bool = True,
    ) -> None:
        """A visibility change: the lease ends at now + timeout, without a backoff after it; 0
        releases it (visible now, or after the queue's retry backoff: release_end; no longer
        leased, no longer part of its receive attempt). A reason becomes last_error."""
        if leases(timeout):
            self.visible_at = lease_end(now, timeout)
        else:
            self.visible_at = (
                now if config is None else release_end(now, self.delivery_count, config, backoff)
            )
            self.leased = False
            self.clear_attempt = True
        self.backoff = False
        if reason:
            self.last_error = reason


@dataclass(frozen=True)
class Tombstone:
    receipt_seq: int
    deleted_at: float


def fence_lease(
    lease: Lease | None, tombstone: Tombstone | None, seq: int, now: float
) -> LeaseStatus | None:
    """fence over a loaded lease and tombstone: None when the receipt is current."""
    return fence(
        seq,
        None if lease is None else lease.receipt_seq,
        None if tombstone is None else (tombstone.receipt_seq, tombstone.deleted_at),
        now,
    )


def held_lease_status(
    lease: Lease | None, tombstone: Tombstone | None, seq: int, now: float
) -> LeaseStatus | None:
    """For operations that need a live lease (ChangeVisibility, UpdateMessage): None when the
    receipt is current and its lease live, else the status to answer (LEASE_EXPIRED after step 3)."""
    status = fence_lease(lease, tombstone, seq, now)
    if status is None and lease is not None and not lease.live(now):
        return LeaseStatus.LEASE_EXPIRED
    return status


def send_receipt(receipt_seq: int) -> bool:
    """Whether a receipt that fencing found current (its receipt_seq is the message's) is the
    message's send receipt: receipt_seq 0, never delivered nor updated. Deletes accept it as any
    current receipt; UpdateMessage takes it as holding the message though no lease does (Azure's
    Put Message pop receipt). gRPC never hands one out (receipts of deliveries start at 1)."""
    return receipt_seq == 0


def may_update(receipt_seq: int, live: bool) -> bool:
    """Whether UpdateMessage through a current receipt goes ahead: its lease is live, or it is
    the send receipt (else LEASE_EXPIRED)."""
    return live or send_receipt(receipt_seq)


def update_leases(receipt_seq: int, visibility_timeout: float | None) -> bool:
    """Whether an update through a current receipt must mark the message leased before its
    visibility change: through the send receipt, a timeout > 0 makes it invisible under a lease
    (as Azure's Update Message does), so the receipt it returns keeps working while invisible."""
    return (
        send_receipt(receipt_seq) and visibility_timeout is not None and leases(visibility_timeout)
    )


def lease_result(receipt: str, status: LeaseStatus, key: int) -> LeaseResult:
    """A result naming the message's key, except for a receipt that proved not to be a real one."""
    return LeaseResult(receipt, status, key=None if status is LeaseStatus.INVALID_RECEIPT else key)


Decoded = Sequence["tuple[int, int] | None"]
"""Each receipt of a request as (key, receipt_seq), None when it does not verify."""


def apply_visibility_changes(
    changes: Sequence[VisibilityChange],
    decoded: Decoded,
    leases_by_key: dict[int, Lease],
    tombstones: dict[int, Tombstone],
    now: float,
    config: QueueConfig | None = None,
) -> tuple[list[LeaseResult], dict[int, Lease]]:
    """ChangeVisibility over loaded rows: each entry's result, in order, and the leases to
    write (key -> its state after every entry). With the queue's config, releases follow its
    retry policy (Lease.set_visibility)."""
    changed: dict[int, Lease] = {}
    results: list[LeaseResult] = []
    for change, receipt in zip(changes, decoded):
        if receipt is None:
            results.append(LeaseResult(change.receipt, LeaseStatus.INVALID_RECEIPT))
            continue
        key, seq = receipt
        lease = leases_by_key.get(key)
        status = held_lease_status(lease, tombstones.get(key), seq, now)
        if status is not None:
            results.append(lease_result(change.receipt, status, key))
            continue
        assert lease is not None  # fencing gives a status for a missing message
        lease.set_visibility(now, change.visibility_timeout, change.reason, config, change.backoff)
        changed[key] = lease
        results.append(LeaseResult(change.receipt, LeaseStatus.OK, lease.visible_at, key))
    return results, changed


def apply_deletes(
    receipts: Sequence[str],
    decoded: Decoded,
    leases_by_key: dict[int, Lease],
    tombstones: dict[int, Tombstone],
    now: float,
) -> tuple[list[LeaseResult], list[int]]:
    """DeleteMessages by receipt over loaded rows: each entry's result, in order, and the keys to
    delete. A deleted message leaves a tombstone that later entries of the request see, as a
    retry would."""
    return _remove_current(receipts, decoded, leases_by_key, tombstones, now, leave_tombstone=True)


def apply_dead_letters(
    receipts: Sequence[str],
    decoded: Decoded,
    leases_by_key: dict[int, Lease],
    tombstones: dict[int, Tombstone],
    now: float,
) -> tuple[list[LeaseResult], list[int]]:
    """DeadLetterMessages over loaded rows: each receipt's result, in order (the statuses of
    apply_deletes: the current receipt moves its message whatever the lease state), and the keys
    to move to the dead letter queue. A moved message is gone from the queue for later entries
    (MESSAGE_NOT_FOUND, as for a receive's move)."""
    return _remove_current(receipts, decoded, leases_by_key, tombstones, now, leave_tombstone=False)


def _remove_current(
    receipts: Sequence[str],
    decoded: Decoded,
    leases_by_key: dict[int, Lease],
    tombstones: dict[int, Tombstone],
    now: float,
    leave_tombstone: bool,
) -> tuple[list[LeaseResult], list[int]]:
    """The fencing shared by deletes and dead-letter moves: each receipt's result, in order, and
    the keys whose current receipt it was, removed from leases_by_key (and, for a delete,
    given a tombstone) so that later entries of the request see them gone."""
    results: list[LeaseResult] = []
    removed: list[int] = []
    for text, receipt in zip(receipts, decoded):
        if receipt is None:
            results.append(LeaseResult(text, LeaseStatus.INVALID_RECEIPT))
            continue
        key, seq = receipt
        status = fence_lease(leases_by_key.get(key), tombstones.get(key), seq, now)
        if status is None:
            del leases_by_key[key]
            if leave_tombstone:
                tombstones[key] = Tombstone(seq, now)
            removed.append(key)
        results.append(lease_result(text, status or LeaseStatus.OK, key))
    return results, removed


def updated_message(
    lease: Lease | None,
    tombstone: Tombstone | None,
    seq: int,
    now: float,
    config: QueueConfig,
    stored: tuple[bytes, dict[str, str]],
    body: bytes | None,
    attributes: dict[str, str] | None,
    visibility_timeout: float | None,
) -> tuple[Lease, bytes, dict[str, str]]:
    """UpdateMessage over a loaded row: the lease after it and the new body and attributes
    (None: keep the stored ones). LeaseRejected unless the receipt holds a live lease or is the
    message's send receipt (may_update);
    InvalidArgument('body') when the result is over max_message_bytes. The caller writes them
    with receipt_seq + 1."""
    status = fence_lease(lease, tombstone, seq, now)
    if status is None and lease is not None and not may_update(seq, lease.live(now)):
        status = LeaseStatus.LEASE_EXPIRED
    if status is not None:
        raise LeaseRejected(status)
    assert lease is not None
    new_body = stored[0] if body is None else body
    new_attributes = dict(stored[1]) if attributes is None else dict(attributes)
    body_fits_update(new_body, new_attributes, config)
    if update_leases(seq, visibility_timeout):
        lease.leased = True
    if visibility_timeout is not None:
        lease.set_visibility(now, visibility_timeout, config=config)
    return lease, new_body, new_attributes
