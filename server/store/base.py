"""The Store protocol: the one seam between the service (gRPC) and a backend (memory, SQLite, ...).

Every backend implements exactly these semantics; the contract suite (tests/contract) and the
state-machine test check them against the memory store, the reference. Values arriving here are
already range-checked by `leaseq.server.validation`; a store still raises the domain errors of
`leaseq.server.errors` for what only it can know (a missing queue, the in-flight limit, ...).

Times are float seconds since the epoch, read from the store's injectable Clock. Every operation
reads the clock once ("now") and acts as of that instant.

Message states, derived from the message's fields at `now`:

- expired   now >= expires_at. Never delivered, peeked or counted; an expired message is removed.
            Every operation on a queue first removes the queue's expired messages, counting each
            in the queue's expired_total (so counts are exact whatever the sweep timing).
- visible   visible_at <= now
- leased    visible_at > now and the message is under a lease (delivered with a visibility
            timeout > 0 and neither released nor updated to visibility 0 since)
- delayed   visible_at > now and not leased (a send delay)

Delivery order: among visible messages, ascending (visible_at, key): the message visible the
longest goes first, ties in enqueue order. For messages never delayed or leased that is FIFO.
`key` is the store's internal integer id, increasing with every enqueued message.

Receipts (see `leaseq.server.receipts`) carry (key, receipt_seq). receipt_seq starts at 0 and goes
up by one at every delivery, every UpdateMessage, every move to a dead letter queue and every
redrive; only a receipt with the message's current receipt_seq may touch it.

Lease operations decide a per-receipt LeaseStatus in this order:
1. INVALID_RECEIPT    the receipt does not verify for this queue (forged, truncated, another queue's).
2. not in the queue:  a tombstone of this key in this queue, not older than TOMBSTONE_SECONDS:
                      ALREADY_DELETED if the receipt's seq equals the tombstone's, else
                      RECEIPT_SUPERSEDED. No tombstone: MESSAGE_NOT_FOUND (expired, purged, moved).
3. RECEIPT_SUPERSEDED receipt seq < message's receipt_seq. (A seq ahead of the message's can only
                      come from another copy of the store: INVALID_RECEIPT.)
4. delete:            OK whatever the lease state (Azure's rule: the latest receipt deletes even
                      after its lease expired, as long as there was no newer delivery). Deleting
                      leaves a tombstone (key, receipt_seq, deleted_at) and counts in deleted_total.
   change visibility: LEASE_EXPIRED unless the message is leased (live lease). Else visible_at =
                      now + visibility_timeout; 0 releases it (visible now, not leased, its receive
                      attempt id cleared). A non-empty reason becomes last_error.

Dead letters: when a receive reaches a candidate whose delivery_count >= the queue's
max_delivery_count (and the queue has a dead_letter_queue), it moves that message to the dead
letter queue instead of delivering it and goes on to the next candidate (moved ones do not count
towards max_messages). The moved message keeps key, message_id, body, attributes, channel,
enqueued_at, delivery_count and last_error; it records source_queue; it is visible at once and not
leased; expires_at becomes enqueued_at + the dead letter queue's message_retention (SQS's rule:
the retention clock keeps running from the original enqueue); receipt_seq + 1. The source
queue's dead_lettered_total counts it.

Receive attempts (`attempt_id`, non-follow receives): a message remembers the attempt id of its
latest delivery. A receive with an attempt id:
  a. if messages of the queue are leased (live lease) under that id: returns them, in key order,
     with their current receipts, and changes nothing (no delivery, no count);
  b. else if an attempt record of that id exists whose expiry (delivery time + visibility timeout
     of the receive that made it) is still ahead: returns no messages and changes nothing;
  c. else: an ordinary receive, whose messages record the id; when it delivered anything, a new
     attempt record (an empty receive records nothing, so a long poll retried with the same id
     still finds messages that arrive later).
Rules a and b come before the in-flight limit: a replay is answered even when the queue is full.
A replay returns every message of rule a, whatever max_bytes: it repeats what one receive
delivered, which was bounded when it was made.
DeleteMessages by attempt id deletes every message of the queue whose latest delivery was made
under that id and that was not released since (leased or lease expired, not redelivered), with
tombstones, and reports the count.

Dedup: a send with a non-empty dedup_id that was sent to the same queue at time t with the queue's
dedup_window w such that now < t + w enqueues nothing and returns the original message_id with
duplicate=True (even if that message was deleted since). Within one batch, a later entry repeating
an earlier entry's dedup_id is a duplicate of it (whatever the window). Purge keeps dedup records,
attempt records and tombstones.

Byte limit (`max_bytes` of receive and peek; None: no limit): the store counts the size of each
message it takes, in order, and stops after the message that brings the total to max_bytes or more,
so it reads and returns at most max_bytes plus one message, and always at least one message when
any is there (a message larger than max_bytes comes alone). A message's size is about
`message_size` (body plus attributes; a SQL store may count its attributes' stored encoding). The
service passes it so that one call holds a bounded number of bytes in memory (issue 14); a receive
cut by bytes is otherwise an ordinary receive of fewer messages, and a peek page cut by bytes has
a next_cursor at its last message.

The in-flight limit: a receive with visibility_timeout > 0 delivers at most
max_in_flight - (leased messages now) messages; if that is <= 0 it raises OverLimit (with retry_at,
the earliest end of a live lease). Deliveries with visibility_timeout 0 make no lease and are not
limited.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..clock import Clock

TOMBSTONE_SECONDS = 3600.0
"""How long a deleted message's tombstone answers ALREADY_DELETED / RECEIPT_SUPERSEDED."""

MAX_BATCH = 10_000


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


@dataclass(frozen=True)
class QueueInfo:
    name: str
    config: QueueConfig
    create_time: float


# Values made once per message (sent, delivered, peeked, acked) are slotted, not frozen:
# a frozen dataclass sets each field through object.__setattr__, 1.2 µs for a DeliveredMessage
# against 0.17 µs, and these are built tens of thousands of times a second (issue 6's profile).
# Treat them as immutable all the same; nothing here mutates one after building it.
_PER_MESSAGE = dataclass(slots=True)


@_PER_MESSAGE
class NewMessage:
    """One validated entry of a send. None means the queue's default (default_delay, retention)."""

    body: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    channel: str = ""
    delay: float | None = None
    ttl: float | None = None
    dedup_id: str = ""


@_PER_MESSAGE
class SendOutcome:
    message_id: str
    duplicate: bool = False


@_PER_MESSAGE
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


@dataclass(frozen=True)
class ReceiveOutcome:
    messages: list[DeliveredMessage]
    # When no message was delivered: the earliest visible_at > now of any message of the queue
    # (a lease or delay ending), so a long poll knows when to look again. None otherwise.
    next_visible_at: float | None = None


@_PER_MESSAGE
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


PeekCursor = tuple[float, int]
"""(visible_at, key) of the last message of a page; the next page starts after it."""


@dataclass(frozen=True)
class PeekPage:
    messages: list[PeekedMessage]
    next_cursor: PeekCursor | None  # None on the last page


@_PER_MESSAGE
class VisibilityChange:
    receipt: str
    visibility_timeout: float
    reason: str = ""


@_PER_MESSAGE
class LeaseResult:
    receipt: str
    status: LeaseStatus
    visible_at: float | None = None  # ChangeVisibility OK only
    key: int | None = None  # the message's key when the receipt verified (for stream bookkeeping)


class AllDeleted(Sequence[LeaseResult]):
    """A delete's results when every receipt deleted its own message (the usual ack): each an
    OK LeaseResult, made only when read. The service answers from the receipts alone
    (convert.delete_results_wire), so the usual ack makes no object per receipt (issue 20)."""

    __slots__ = ("receipts", "_named")

    def __init__(self, receipts: Sequence[str], named: Sequence[tuple[int, int]]) -> None:
        self.receipts = receipts
        self._named = named  # the (key, receipt_seq) each receipt named, in order

    def __len__(self) -> int:
        return len(self.receipts)

    def __getitem__(self, index):  # type: ignore[no-untyped-def,override]
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
    deleted_keys: list[int] = field(default_factory=list)  # every key deleted, by receipt or attempt


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
        )


def message_state(visible_at: float, leased: bool, now: float) -> MessageState:
    """The state of an unexpired message at now (see the module docstring)."""
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
        if tombstone is not None and now - tombstone[1] <= TOMBSTONE_SECONDS:
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


def new_message_ids(count: int) -> list[str]:
    """`count` fresh message ids, 32 hex digits (128 random bits) each, from one draw of the
    OS's randomness: a draw per id was a system call each, 4% of a PostgreSQL server's samples
    in sends at batch 100."""
    digits = os.urandom(16 * count).hex()
    return [digits[start : start + 32] for start in range(0, 32 * count, 32)]


def message_size(body: bytes, attributes: dict[str, str]) -> int:
    """What counts against max_message_bytes: the body plus every attribute's key and value (UTF-8)."""
    if not attributes:  # most messages: no generator to set up (twice per delivered message)
        return len(body)
    return len(body) + sum(len(k.encode()) + len(v.encode()) for k, v in attributes.items())


def bytes_reached(total: int, max_bytes: int | None) -> bool:
    """Whether a receive or peek that has taken `total` bytes stops (the byte limit above)."""
    return max_bytes is not None and total >= max_bytes


def channel_matches(channel: str, channel_filter: str) -> bool:
    """Empty filter: all; "abc*": channels starting with "abc"; else an exact match."""
    if not channel_filter:
        return True
    if channel_filter.endswith("*"):
        return channel.startswith(channel_filter[:-1])
    return channel == channel_filter


@runtime_checkable
class Store(Protocol):
    """An async message store. Each method is atomic: it commits all or nothing."""

    clock: Clock

    async def open(self) -> None:
        """Create or open the backing storage (schema, signing key)."""
        ...

    async def close(self) -> None: ...

    def token_key(self) -> bytes:
        """A secret of this store (after open), the same for every server process over it and
        across restarts: page tokens are sealed with it (page_tokens.py)."""
        ...

    # --- queues -------------------------------------------------------------------------------

    async def create_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        """Create, or return the existing queue if its config is equal; else QueueAlreadyExists.
        A dead_letter_queue must exist and differ from name (InvalidArgument field
        'config.dead_letter_queue')."""
        ...

    async def get_queue(self, name: str) -> QueueInfo:
        """QueueNotFound when missing."""
        ...

    async def list_queues(self, prefix: str, after: str | None, limit: int) -> list[QueueInfo]:
        """Queues whose name starts with prefix and is > after, in name order, at most limit."""
        ...

    async def update_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        """Replace the whole config (the service merges update masks). Same DLQ rules as create."""
        ...

    async def delete_queue(self, name: str) -> None:
        """Delete the queue and its messages. QueueInUse while it is another queue's DLQ."""
        ...

    async def purge_queue(self, name: str) -> int:
        """Delete every message (all states), returning how many. Not counted in deleted_total,
        no tombstones."""
        ...

    async def queue_metadata(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        """The metadata (free-form name -> value pairs, as Azure's x-ms-meta-* headers) of the
        named queues that have any; queues without metadata, or missing, are left out."""
        ...

    async def set_queue_metadata(self, name: str, metadata: Mapping[str, str]) -> None:
        """Replace the queue's metadata (empty: none). It lives and dies with the queue: a queue
        deleted and created again starts without. QueueNotFound when the queue is missing."""
        ...

    async def stats(self, name: str) -> QueueStats: ...

    # --- messages -----------------------------------------------------------------------------

    async def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        """Enqueue in order, one outcome per message. enqueued_at = now, visible_at = now + delay,
        expires_at = now + ttl, delivery_count 0, receipt_seq 0. Durable before it returns."""
        ...

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: float | None = None,
        channel_filter: str = "",
        attempt_id: str = "",
        max_bytes: int | None = None,
    ) -> ReceiveOutcome:
        """Deliver up to max_messages visible messages in delivery order, stopping after the
        message that reaches max_bytes (module docstring). Each delivery: delivery_count + 1,
        receipt_seq + 1, visible_at = now + visibility_timeout (None: the queue's), leased when
        visibility_timeout > 0, attempt id recorded (or cleared)."""
        ...

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
        """Messages in (visible_at, key) order after the cursor, without any side effect (other
        than removing expired messages); the page ends after the message that reaches max_bytes
        (module docstring), with a next_cursor when more messages follow."""
        ...

    async def receipt_of(self, name: str, key: int, receipt_seq: int) -> str:
        """The receipt of delivery receipt_seq of message `key` of queue `name` (a peeked
        message's key and receipt_seq), as the receive that made the delivery issued it: for an
        administrator's release or delete of a leased message (core.QueueCore.admin_release).
        It reads no message: the fencing of the lease operation that then uses the receipt
        decides, as for any consumer's. QueueNotFound for a missing queue."""
        ...

    async def change_visibility(
        self, name: str, changes: list[VisibilityChange]
    ) -> list[LeaseResult]: ...

    async def delete(
        self, name: str, receipts: list[str], attempt_ids: list[str] = ()
    ) -> DeleteOutcome: ...

    async def update_message(
        self,
        name: str,
        receipt: str,
        body: bytes | None = None,
        attributes: dict[str, str] | None = None,
        visibility_timeout: float | None = None,
    ) -> UpdatedMessage:
        """Replace body and/or attributes of a leased message (None: keep) and, when
        visibility_timeout is given, set visible_at = now + it (0: release). receipt_seq + 1; the
        new receipt is returned. LeaseRejected(status) when the receipt does not hold a live
        lease (statuses as for change_visibility); InvalidArgument('body') when the new body plus
        attributes exceed max_message_bytes."""
        ...

    async def redrive(
        self,
        name: str,
        destination: str | None = None,
        max_messages: int = 0,
        channel_filter: str = "",
    ) -> int:
        """Move visible messages of dead letter queue `name`, in delivery order, to destination
        (None: each one's source_queue; a message with none, or whose source no longer exists,
        stays). Up to max_messages (0: all). A moved message: delivery_count 0, visible now, not
        leased, source_queue cleared, receipt_seq + 1, expires_at = now + the destination's
        retention; it keeps message_id, body, attributes, channel, enqueued_at, last_error.
        QueueNotFound for a missing name or destination. Returns how many moved."""
        ...


ChangeListener = Callable[[str | None], None]
"""Called with a queue's name when something changed it elsewhere (another server process over
the same store) that may let a waiting receiver make progress: a send, a release, a redrive, ...;
called with None when such changes may have gone unreported (e.g. the store's notification channel
was down for a while), meaning "look at every queue again"."""


@runtime_checkable
class ChangeFeed(Protocol):
    """Optional, for stores shared by several server processes (PostgreSQL): reports changes made
    through the other processes, so that their long polls wake here too. A store used by one
    process only needs none: the service sees every change itself."""

    def subscribe(self, listener: ChangeListener) -> Callable[[], None]:
        """Call listener on the event loop that opened the store; returns an unsubscribe."""
        ...
