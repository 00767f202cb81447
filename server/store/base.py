"""The Store protocol: the one seam between the core (core.py) and a backend (memory, SQLite,
PostgreSQL).

Every backend implements the semantics of `leaseq.server.domain` (its package docstring), and
asks the domain's lease decisions (`domain.leases`) what to write; the contract suite
(tests/contract) and the model tests check every backend against the memory store, the
reference. Only the core calls a store; the front ends know the domain, never a store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from ..clock import Clock
from ..domain.types import (
    BodyBatch,
    DeadLetterOutcome,
    DeleteOutcome,
    LeaseResult,
    NewMessage,
    PeekCursor,
    PeekPage,
    QueueConfig,
    QueueInfo,
    QueueStats,
    ReceiveOutcome,
    SendOutcome,
    SentBatch,
    UpdatedMessage,
    VisibilityChange,
)


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

    async def queue_state(self, name: str, namespace: str) -> dict[str, str]:
        """A front end's own name -> value pairs for the queue in `namespace` (e.g. SQS's tags
        in "sqs.tags"): state of a dialect that the domain does not interpret. It lives and dies
        with the queue: a queue deleted and created again starts without. QueueNotFound when
        the queue is missing."""
        ...

    async def update_queue_state(
        self, name: str, namespace: str, changes: Mapping[str, str | None], replace: bool = False
    ) -> dict[str, str]:
        """Set each name of `changes` to its value in the queue's `namespace` (None: remove the
        name), after removing every other name of the namespace when `replace`; atomic. Returns
        the namespace's pairs after. QueueNotFound when the queue is missing."""
        ...

    async def settings(self, namespace: str) -> dict[str, str]:
        """A front end's own server-wide name -> value pairs in `namespace` (e.g. Azure's
        service properties), shared by every server process over the store."""
        ...

    async def update_settings(
        self, namespace: str, changes: Mapping[str, str | None], replace: bool = False
    ) -> dict[str, str]:
        """update_queue_state's rules for the server-wide pairs of `namespace`."""
        ...

    # --- messages -----------------------------------------------------------------------------

    async def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        """Enqueue in order, one outcome per message. enqueued_at = now, visible_at = now + delay,
        expires_at = now + ttl, delivery_count 0, receipt_seq 0. Durable before it returns."""
        ...

    async def send_batch(self, name: str, batch: BodyBatch) -> SentBatch:
        """`send` of a column-wise batch: the same rows and outcomes as send(batch.messages()),
        answered column by column. The core sends every batch that is only bodies (and dedup
        ids) this way; a store writes it without an object per message where it can. This
        default goes through send (a store that subclasses Store inherits it)."""
        return await send_batch_by_messages(self, name, batch)

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
        self, name: str, receipts: list[str], attempt_ids: Sequence[str] = ()
    ) -> DeleteOutcome: ...

    async def dead_letter(self, name: str, receipts: list[str], reason: str) -> DeadLetterOutcome:
        """Move each message whose receipt is its current one (DeleteMessages' fencing: whatever
        its lease state) to the queue's dead letter queue now, as a receive moves one
        (delivery_count, enqueued_at kept; dead_lettered_total counted), with reason (when not
        empty) as its last_error. One result per receipt, in order; statuses as delete's.
        NoDeadLetterQueue when the queue has none; QueueNotFound for a missing queue."""
        ...

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


def update_state_map(
    held: dict[str, dict[str, str]],
    namespace: str,
    changes: Mapping[str, str | None],
    replace: bool,
) -> dict[str, str]:
    """update_queue_state / update_settings on pairs held as namespace -> name -> value (the
    memory store); returns a copy of the namespace's pairs after."""
    after = {} if replace else dict(held.get(namespace, {}))
    for key, value in changes.items():
        if value is None:
            after.pop(key, None)
        else:
            after[key] = value
    held[namespace] = after
    return dict(after)


async def send_batch_by_messages(store: Store, name: str, batch: BodyBatch) -> SentBatch:
    """Store.send_batch's default: through Store.send, one NewMessage per body."""
    outcomes = await store.send(name, batch.messages())
    return SentBatch(
        [outcome.message_id for outcome in outcomes],
        [index for index, outcome in enumerate(outcomes) if outcome.duplicate],
    )


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
