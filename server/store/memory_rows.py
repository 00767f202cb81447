"""The memory store's records (memory.py): a message, a tombstone, a dedup record, a queue with
its indexes (memory.py's docstring says what each index holds)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..domain.leases import message_state
from ..domain.types import MessageState, QueueConfig, QueueInfo
from .memory_groups import GroupIndex


@dataclass(eq=False)
class _Message:
    key: int
    message_id: str
    body: bytes
    attributes: dict[str, str]
    channel: str
    enqueued_at: float
    expires_at: float
    visible_at: float
    delivery_count: int = 0
    receipt_seq: int = 0
    # Under a lease: delivered with a visibility timeout > 0 and not released since. The lease is
    # live only while visible_at > now as well (see _is_leased).
    leased: bool = False
    backoff: bool = False  # the lease ends with the retry policy's backoff (see _end_leases)
    last_error: str = ""
    attempt_id: str = ""  # the receive attempt of the latest delivery, until released
    source_queue: str | None = None  # set while in a dead letter queue
    group: str | None = None  # None: none (domain.groups.stored_group)
    version: int = 0  # bumped at every schedule change; older heap entries are stale

    def order(self) -> tuple[float, int]:
        return (self.visible_at, self.key)


@dataclass(eq=False)
class _Tombstone:
    receipt_seq: int
    deleted_at: float


@dataclass(eq=False)
class _Dedup:
    message_id: str
    until: float  # sent_at + the dedup window in force when it was sent


@dataclass(eq=False)
class _Queue:
    info: QueueInfo
    uid: int  # receipts are bound to it: a recreated queue does not accept old receipts
    messages: dict[int, _Message] = field(default_factory=dict)
    schedule: list[tuple[float, int, int]] = field(default_factory=list)
    lease_ends: list[tuple[float, int, int]] = field(default_factory=list)
    leased: set[int] = field(default_factory=set)
    expiries: list[tuple[float, int]] = field(default_factory=list)
    by_attempt: dict[str, set[int]] = field(default_factory=dict)
    attempts: dict[str, float] = field(default_factory=dict)  # attempt id -> record expiry
    attempt_expiries: list[tuple[float, str]] = field(default_factory=list)
    tombstones: dict[int, _Tombstone] = field(default_factory=dict)
    tombstone_order: deque[tuple[float, int]] = field(default_factory=deque)
    dedup: dict[str, _Dedup] = field(default_factory=dict)
    dedup_expiries: list[tuple[float, str]] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    state: dict[str, dict[str, str]] = field(default_factory=dict)  # namespace -> pairs
    groups: GroupIndex = field(default_factory=GroupIndex)
    dead_lettered_total: int = 0
    expired_total: int = 0
    deleted_total: int = 0

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def config(self) -> QueueConfig:
        return self.info.config


def _is_leased(message: _Message, now: float) -> bool:
    return message.leased and message.visible_at > now


def _state(message: _Message, now: float) -> MessageState:
    return message_state(message.visible_at, message.leased, now)
