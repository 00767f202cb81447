"""The queue's value types: what the front ends, the core and the stores pass to each other.

Values made once per message (sent, delivered, peeked, acked) are slotted dataclasses, not
frozen ones: a frozen dataclass sets each field through object.__setattr__, several times
slower to build (docs/performance.md, "Figures behind the code"), and these are built tens of
thousands of times a second.
Treat them as immutable all the same; nothing mutates one after building it.

The semantics these values carry are the package docstring's (`leaseq.server.domain`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field


class LeaseStatus(enum.IntEnum):
    """Values equal the proto's LeaseStatus numbers."""

    OK = 1
    LEASE_EXPIRED = 2
    RECEIPT_SUPERSEDED = 3
    MESSAGE_NOT_FOUND = 4
    INVALID_RECEIPT = 5
    ALREADY_DELETED = 6


class MessageState(enum.IntEnum):
    """Values equal the proto's MessageState numbers."""

    VISIBLE = 1
    LEASED = 2
    DELAYED = 3


class Ordering(enum.IntEnum):
    """How a queue delivers messages with a group. Values equal the proto's Ordering numbers
    (its UNSPECIFIED, 0, is read as NONE)."""

    NONE = 1
    FIFO = 2
    FAIR = 3


class DedupScope(enum.IntEnum):
    """Where a FIFO queue's dedup ids are unique. Values equal the proto's DedupScope numbers."""

    QUEUE = 1
    GROUP = 2


@dataclass(frozen=True)
class RetryPolicy:
    """How long a message waits before it is visible again after its lease ended, or after a
    release without a delay: min(maximum_backoff, minimum_backoff * 2^(n-1)) seconds, n its
    delivery count (`leases.retry_backoff`)."""

    minimum_backoff: float = 10.0
    maximum_backoff: float = 600.0


@dataclass(frozen=True)
class QueueConfig:
    """A queue's effective configuration, in seconds and bytes. Defaults are API.md's."""

    visibility_timeout: float = 30.0
    receive_wait_time: float = 30.0
    message_retention: float = 7 * 86400.0
    default_delay: float = 0.0
    max_message_bytes: int = 1024 * 1024
    dead_letter_queue: str | None = None
    max_delivery_count: int | None = None
    max_in_flight: int = 120_000
    dedup_window: float = 300.0
    ordering: Ordering = Ordering.NONE
    content_based_dedup: bool = False
    dedup_scope: DedupScope = DedupScope.QUEUE
    retry_policy: RetryPolicy | None = None  # None: visible again at once (no backoff)

    def __post_init__(self) -> None:
        # Stores read these back as plain numbers: keep the enums (and a bool) whatever came in.
        if self.ordering.__class__ is not Ordering:
            object.__setattr__(self, "ordering", Ordering(self.ordering))
        if self.dedup_scope.__class__ is not DedupScope:
            object.__setattr__(self, "dedup_scope", DedupScope(self.dedup_scope))
        if self.content_based_dedup.__class__ is not bool:
            object.__setattr__(self, "content_based_dedup", bool(self.content_based_dedup))

    @property
    def grouped(self) -> bool:
        """FIFO or FAIR: receives choose by group (domain.groups)."""
        return self.ordering is not Ordering.NONE


@dataclass(frozen=True)
class QueueInfo:
    name: str
    config: QueueConfig
    create_time: float


@dataclass(slots=True)
class NewMessage:
    """One validated entry of a send. None means the queue's default (default_delay, retention)."""

    body: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    channel: str = ""
    delay: float | None = None
    ttl: float | None = None
    dedup_id: str = ""
    group: str = ""  # "" for none


@dataclass(slots=True)
class BodyBatch:
    """A send of messages that are only a body (no attributes, channel, delay or ttl), and
    perhaps a dedup id, column by column: the usual batch, and the Spark writer's. Stores write
    it without a Python object per message (`Store.send_batch`)."""

    bodies: list[bytes]
    dedup_ids: list[str] | None = None  # one per body, "" for none; None: no body has one

    def messages(self) -> list[NewMessage]:
        """The same batch as one NewMessage per body."""
        if self.dedup_ids is None:
            return [NewMessage(body) for body in self.bodies]
        return [NewMessage(body, dedup_id=d) for body, d in zip(self.bodies, self.dedup_ids)]


@dataclass(slots=True)
class SentBatch:
    """What a BodyBatch's send made: each body's message id (a duplicate's is its original's)
    and the indexes of the duplicates, in order."""

    message_ids: list[str]
    duplicates: list[int] = field(default_factory=list)


@dataclass(slots=True)
class SendOutcome:
    message_id: str
    duplicate: bool = False
    # The store's key of the sent message, on the per-message send path (None for a duplicate
    # and on the body-only column paths): `Store.receipt_of(name, key, 0)` is its send receipt.
    key: int | None = None


@dataclass(slots=True)
class DeliveredMessage:
    key: int  # the store's internal id; not shown to clients except inside receipts
    message_id: str
    receipt: str
    body: bytes
    attributes: dict[str, str]
    channel: str
    enqueued_at: float
    expires_at: float
    visible_at: float
    delivery_count: int
    last_error: str
    group: str = ""
    sequence: int = 0  # messages with a group: the store's key, increasing in send order


@dataclass(frozen=True)
class ReceiveOutcome:
    messages: list[DeliveredMessage]
    # When no message was delivered: the earliest visible_at > now of any message of the queue
    # (a lease or delay ending), so a long poll knows when to look again. None otherwise.
    next_visible_at: float | None = None


@dataclass(slots=True)
class PeekedMessage:
    key: int
    message_id: str
    body: bytes
    attributes: dict[str, str]
    channel: str
    enqueued_at: float
    expires_at: float
    visible_at: float
    delivery_count: int
    last_error: str
    state: MessageState
    # For the web console: its message detail shows a dead letter's source queue, and an
    # administrator's release or delete acts on this delivery (`Store.receipt_of`).
    receipt_seq: int = 0
    source_queue: str | None = None
    group: str = ""
    sequence: int = 0


PeekCursor = tuple[float, int]
"""(visible_at, key) of the last message of a page; the next page starts after it."""


@dataclass(frozen=True)
class PeekPage:
    messages: list[PeekedMessage]
    next_cursor: PeekCursor | None  # None on the last page


@dataclass(slots=True)
class VisibilityChange:
    receipt: str
    visibility_timeout: float
    reason: str = ""
    # A release (0) waits out the queue's retry policy; False releases at once whatever the
    # policy (a stream's unsent leases, an administrator's release).
    backoff: bool = True


@dataclass(slots=True)
class LeaseResult:
    receipt: str
    status: LeaseStatus
    visible_at: float | None = None  # ChangeVisibility OK only
    key: int | None = None  # the message's key when the receipt verified (for stream bookkeeping)


class AllDeleted(Sequence[LeaseResult]):
    """A delete's results when every receipt deleted its own message (the usual ack): each an
    OK LeaseResult, made only when read. The service answers from the receipts alone
    (convert.delete_results_wire), so the usual ack makes no object per receipt."""

    __slots__ = ("receipts", "_named")

    def __init__(self, receipts: Sequence[str], named: Sequence[tuple[int, int]]) -> None:
        self.receipts = receipts
        self._named = named  # the (key, receipt_seq) each receipt named, in order

    def __len__(self) -> int:
        return len(self.receipts)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return LeaseResult(self.receipts[index], LeaseStatus.OK, None, self._named[index][0])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return repr(list(self))


@dataclass(frozen=True)
class DeleteOutcome:
    results: Sequence[LeaseResult]
    attempt_counts: list[tuple[str, int]]  # (attempt_id, deleted_count) in request order
    deleted_keys: list[int] = field(
        default_factory=list
    )  # every key deleted, by receipt or attempt


@dataclass(frozen=True)
class DeadLetterOutcome:
    results: list[LeaseResult]  # one per receipt, in order; OK: moved
    moved_keys: list[int] = field(default_factory=list)
    dead_letter_queue: str = ""  # where they went


@dataclass(frozen=True)
class UpdatedMessage:
    key: int
    receipt: str
    visible_at: float


@dataclass(frozen=True)
class CountsByState:
    visible: int = 0
    leased: int = 0
    delayed: int = 0

    @property
    def total(self) -> int:
        return self.visible + self.leased + self.delayed


@dataclass(frozen=True)
class QueueStats:
    visible: int
    leased: int
    delayed: int
    total: int
    oldest_visible_age: float  # now - min(enqueued_at) over visible messages; 0 when none
    dead_lettered_total: int
    expired_total: int
    deleted_total: int
    channels: dict[str, CountsByState]  # every channel with at least one message ("" = default)
    groups: int = 0  # FIFO and FAIR queues: groups holding a message
    blocked_groups: int = 0  # of those, the ones no receive can deliver from now

    @classmethod
    def from_channels(
        cls,
        channels: dict[str, CountsByState],
        oldest_visible_enqueued_at: float | None,
        now: float,
        *,
        dead_lettered_total: int,
        expired_total: int,
        deleted_total: int,
        groups: int = 0,
        blocked_groups: int = 0,
    ) -> QueueStats:
        """The queue's stats from its per-channel counts: the totals are their sums."""
        visible = sum(c.visible for c in channels.values())
        leased = sum(c.leased for c in channels.values())
        delayed = sum(c.delayed for c in channels.values())
        return cls(
            visible=visible,
            leased=leased,
            delayed=delayed,
            total=visible + leased + delayed,
            oldest_visible_age=(
                0.0
                if oldest_visible_enqueued_at is None
                else max(0.0, now - oldest_visible_enqueued_at)
            ),
            dead_lettered_total=dead_lettered_total,
            expired_total=expired_total,
            deleted_total=deleted_total,
            channels=channels,
            groups=groups,
            blocked_groups=blocked_groups,
        )
