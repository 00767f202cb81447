"""The fencing state of one message as the SQL stores read it, and the status it gives a receipt.

The SQL stores (SQLite, PostgreSQL) load the rows a lease request names, then apply its entries
in order on these small objects, so two entries for the same message see each other's effect.
The rule itself is base.fence; the memory store applies it to its own objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import LeaseResult, LeaseStatus, fence


@dataclass
class Lease:
    """The fencing-relevant state of one message, updated as a request's entries are applied."""

    key: int
    receipt_seq: int
    leased: bool
    visible_at: float
    last_error: str
    clear_attempt: bool = False

    def live(self, now: float) -> bool:
        return self.leased and self.visible_at > now


@dataclass(frozen=True)
class Tombstone:
    receipt_seq: int
    deleted_at: float


def fence_lease(
    lease: Lease | None, tombstone: Tombstone | None, seq: int, now: float
) -> LeaseStatus | None:
    """base.fence over a loaded lease and tombstone: None when the receipt is current."""
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


def lease_result(receipt: str, status: LeaseStatus, key: int) -> LeaseResult:
    """A result naming the message's key, except for a receipt that proved not to be a real one."""
    return LeaseResult(receipt, status, key=None if status is LeaseStatus.INVALID_RECEIPT else key)
