"""The queue's operations, below every front end, and the only caller of the store and of the
long-poll machinery (docs/architecture.md).

A front end (gRPC in service.py, the SQS and Azure HTTP dialects, the web console) translates its
wire format into one call of `QueueCore` per operation with domain values (names, seconds,
`NewMessage` or a column-wise `BodyBatch`, receipts, `ReceiveParams`) and the caller's
`Principal`, and translates the results and the domain errors of `errors.py` back. What must
hold whatever the dialect lives here, once:

- the checks of queue configurations and of sent messages (`domain.rules`: one definition);
- grant checks: the same rules as `auth.RULES` gives gRPC (admin to create/change/delete/purge a
  queue and on the dead letter queue it names, send, receive, peek, ack, redrive, any action to
  read a queue, and list filtering). A principal of None means "not checked here": no policy is
  configured, or the gRPC interceptor has already checked the call;
- long-poll waits and the wake-up notifications (one `LongPoll` per server, shared by every
  front end's core, so a message sent through one front end wakes a waiting receive of
  another), and the byte budget of what receives and peeks read;
- refusing new work while the server drains;
- counting the messages sent and acknowledged per queue and second (`traffic.py`, the console's
  rates), in send and delete.

One send: `send` takes a list of messages (each checked, failing alone) or a `BodyBatch`, the
usual batch as columns, which goes to `Store.send_batch` whole when it passes the same rule (the
fast path, with no object per message). Receives: `get_messages` streams chunks (gRPC), `receive`
answers one batch (the HTTP dialects); `peek` reads one page under the byte budget.

For the web console: `find_message` reads one peeked message again by its position, and
`admin_release` / `admin_delete` act on a leased message someone else holds (admin only) with the
receipt of the delivery the console showed (`Store.receipt_of`), through the ordinary lease
operations, so API.md's fencing rules hold for them as for any consumer.

A dialect's own ranges (SQS's WaitTimeSeconds up to 20 s, its 10-entry batches) stay in that
dialect's module: this core only enforces leaseq's.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, TypeVar, overload

from . import domain
from .auth import ANY, Principal
from .budget import CALL_BYTES, MESSAGE_OVERHEAD, SERVER_BYTES, ByteBudget, read_estimate
from .domain import groups, limits, rules
from .domain.commands import ReceiveParams, resolve_receive
from .domain.types import (
    BodyBatch,
    DeadLetterOutcome,
    DeleteOutcome,
    DeliveredMessage,
    LeaseResult,
    NewMessage,
    Ordering,
    QueueConfig,
    QueueInfo,
    QueueStats,
    SendOutcome,
    SentBatch,
    UpdatedMessage,
    VisibilityChange,
)
from .errors import InvalidArgument, LeaseqError, Unavailable, clip
from .longpoll import LongPoll
from .page_tokens import PageTokens
from .store.base import Store as Store  # named here too: the gRPC service imports no store

DRAIN_RETRY_AFTER = 1.0

T = TypeVar("T")

_ADMIN = frozenset({"admin"})
_SEND = frozenset({"send"})
_RECEIVE = frozenset({"receive"})
_PEEK = frozenset({"peek"})
_ACK = frozenset({"ack"})
_REDRIVE = frozenset({"redrive"})


class PermissionDenied(LeaseqError):
    """The principal holds no grant for the action on the queue. (gRPC never sees this one: its
    interceptor refuses the call before the handler runs.)"""

    def __init__(self, principal: str, action: str, queue: str) -> None:
        super().__init__(f"principal {principal!r} may not {action} on queue {clip(queue)!r}")
        self.principal = principal
        self.action = action
        self.queue = queue


@dataclass(frozen=True)
class QueuePage:
    queues: list[QueueInfo]
    more: bool  # another page exists after the last queue of this one


check_config = rules.check_config
check_message = rules.check_message


class QueueCore:
    """The operations of the queue for every front end. One per server, on its event loop."""

    def __init__(self, store: Store, longpoll: LongPoll) -> None:
        self.store = store
        self.longpoll = longpoll
        self._page_tokens: PageTokens | None = None

    @classmethod
    def serving(
        cls, store: Store, *, call_bytes: int = CALL_BYTES, server_bytes: int = SERVER_BYTES
    ) -> QueueCore:
        """The core of a server over store: its long polls, under a byte budget of
        server_bytes, read call_bytes at a time (budget.py)."""
        return cls(store, LongPoll(store, ByteBudget(server_bytes), call_bytes))

    # --- lifecycle --------------------------------------------------------------------------

    def drain(self) -> None:
        """New calls get UNAVAILABLE; follow streams end; waiting long polls answer now."""
        self.longpoll.drain()

    async def settle(self) -> None:
        """Until the leases that ended streams took but did not send are released (the
        server's shutdown awaits this after its calls ended, before the store closes)."""
        await self.longpoll.settle_releases()

    @property
    def draining(self) -> bool:
        return self.longpoll.draining

    @property
    def tokens(self) -> PageTokens:
        """The store's page tokens (page_tokens.py), made on first use: the store's secret
        exists once the store is open."""
        if self._page_tokens is None:
            self._page_tokens = PageTokens(self.store.token_key())
        return self._page_tokens

    # --- shared checks ----------------------------------------------------------------------

    def now(self) -> float:
        return self.store.clock.now()

    def _ready(self) -> None:
        if self.longpoll.draining:
            raise Unavailable("the server is shutting down", retry_after=DRAIN_RETRY_AFTER)

    @staticmethod
    def allows(principal: Principal | None, actions: frozenset[str], queue: str) -> bool:
        return principal is None or principal.allows(actions, queue)

    def _grant(self, principal: Principal | None, actions: frozenset[str], queue: str) -> None:
        if not self.allows(principal, actions, queue):
            assert principal is not None
            what = "any action" if actions == ANY else "/".join(sorted(actions))
            raise PermissionDenied(principal.name, what, queue)

    # --- queues -----------------------------------------------------------------------------

    async def create_queue(
        self, principal: Principal | None, name: str, config: QueueConfig
    ) -> QueueInfo:
        """Create, or return the queue when it exists with an equal config (QueueAlreadyExists
        otherwise: the caller decides whether its dialect is laxer)."""
        self._ready()
        rules.queue_name(name)
        self._grant(principal, _ADMIN, name)
        if config.dead_letter_queue:
            self._grant(principal, _ADMIN, config.dead_letter_queue)
        return await self.store.create_queue(name, check_config(name, config))

    async def get_queue(self, principal: Principal | None, name: str) -> QueueInfo:
        self._ready()
        rules.queue_name(name)
        self._grant(principal, ANY, name)
        return await self.store.get_queue(name)

    async def queue_metadata(
        self, principal: Principal | None, names: list[str]
    ) -> dict[str, dict[str, str]]:
        """The metadata of those named queues that have any and on which the principal holds
        some action (as get_queue); others are left out."""
        self._ready()
        return await self.store.queue_metadata(
            [name for name in names if self.allows(principal, ANY, name)]
        )

    async def set_queue_metadata(
        self, principal: Principal | None, name: str, metadata: dict[str, str]
    ) -> None:
        """Replace the queue's metadata (admin, as other changes of a queue)."""
        self._ready()
        rules.queue_name(name)
        for key, value in metadata.items():
            rules.valid_text(key, "metadata")
            rules.valid_text(value, "metadata")
        self._grant(principal, _ADMIN, name)
        await self.store.set_queue_metadata(name, metadata)

    async def queue_state(
        self, principal: Principal | None, name: str, namespace: str
    ) -> dict[str, str]:
        """A front end's own pairs of the queue in `namespace` (Store.queue_state): any action
        on the queue, as get_queue."""
        self._ready()
        rules.queue_name(name)
        self._grant(principal, ANY, name)
        return await self.store.queue_state(name, namespace)

    async def update_queue_state(
        self,
        principal: Principal | None,
        name: str,
        namespace: str,
        changes: Mapping[str, str | None],
        replace: bool = False,
    ) -> dict[str, str]:
        """Change them (Store.update_queue_state; admin, as other changes of a queue)."""
        self._ready()
        rules.queue_name(name)
        rules.state_changes(namespace, changes)
        self._grant(principal, _ADMIN, name)
        return await self.store.update_queue_state(name, namespace, changes, replace)

    async def settings(self, principal: Principal | None, namespace: str) -> dict[str, str]:
        """A front end's own server-wide pairs (Store.settings): some action on every queue (a
        grant on "*")."""
        self._ready()
        self._grant(principal, ANY, "*")
        return await self.store.settings(namespace)

    async def update_settings(
        self,
        principal: Principal | None,
        namespace: str,
        changes: Mapping[str, str | None],
        replace: bool = False,
    ) -> dict[str, str]:
        """Change them (Store.update_settings): admin on every queue (a grant on "*")."""
        self._ready()
        rules.state_changes(namespace, changes)
        self._grant(principal, _ADMIN, "*")
        return await self.store.update_settings(namespace, changes, replace)

    async def update_queue(
        self, principal: Principal | None, name: str, changes: dict[str, Any]
    ) -> QueueInfo:
        """Change the named config fields; the others keep their value (read-merge-write: of two
        concurrent updates of different fields, the last writer wins)."""
        self._ready()
        rules.queue_name(name)
        self._grant(principal, _ADMIN, name)
        if changes.get("dead_letter_queue"):
            self._grant(principal, _ADMIN, changes["dead_letter_queue"])
        current = await self.store.get_queue(name)
        config = check_config(name, replace(current.config, **changes))
        rules.check_config_change(current.config, config)
        info = await self.store.update_queue(name, config)
        self.longpoll.notify(name)  # e.g. a raised max_in_flight lets waiters deliver
        return info

    async def delete_queue(self, principal: Principal | None, name: str) -> None:
        self._ready()
        rules.queue_name(name)
        self._grant(principal, _ADMIN, name)
        await self.store.delete_queue(name)
        self.longpoll.queue_emptied(name)  # its waiters look again and get QueueNotFound
        self.longpoll.traffic.forget(name)

    async def purge_queue(self, principal: Principal | None, name: str) -> int:
        self._ready()
        rules.queue_name(name)
        self._grant(principal, _ADMIN, name)
        count = await self.store.purge_queue(name)
        self.longpoll.queue_emptied(name)
        return count

    async def stats(self, principal: Principal | None, name: str) -> QueueStats:
        self._ready()
        rules.queue_name(name)
        self._grant(principal, ANY, name)
        return await self.store.stats(name)

    async def list_queues(
        self, principal: Principal | None, prefix: str, after: str | None, limit: int
    ) -> QueuePage:
        """Up to limit queues after `after` whose names start with prefix, only those on which
        the principal holds some action (auth.py's list rule)."""
        self._ready()
        kept: list[QueueInfo] = []
        cursor = after
        while len(kept) <= limit:
            # One more than needed: `more` only when another page really exists.
            want = limit + 1 - len(kept)
            infos = await self.store.list_queues(prefix, cursor, want)
            kept += [i for i in infos if self.allows(principal, ANY, i.name)]
            if len(infos) < want:
                break
            cursor = infos[-1].name
        return QueuePage(kept[:limit], len(kept) > limit)

    async def dead_letter_sources(self, principal: Principal | None, name: str) -> list[str]:
        """Names of the queues whose dead letter queue is `name` (a scan of every queue's
        configuration: the store keeps no reverse index)."""
        await self.get_queue(principal, name)
        sources: list[str] = []
        after: str | None = None
        while True:
            infos = await self.store.list_queues("", after, limits.MAX_PAGE_SIZE)
            sources += [
                i.name
                for i in infos
                if i.config.dead_letter_queue == name and self.allows(principal, ANY, i.name)
            ]
            if len(infos) < limits.MAX_PAGE_SIZE:
                return sources
            after = infos[-1].name

    # --- messages ---------------------------------------------------------------------------

    @overload
    async def send(
        self,
        principal: Principal | None,
        name: str,
        messages: Sequence[NewMessage | InvalidArgument],
        owned_prefix: str = "",
    ) -> list[SendOutcome | InvalidArgument]: ...

    @overload
    async def send(
        self,
        principal: Principal | None,
        name: str,
        messages: BodyBatch,
        owned_prefix: str = "",
    ) -> SentBatch | list[SendOutcome | InvalidArgument]: ...

    async def send(
        self,
        principal: Principal | None,
        name: str,
        messages: Sequence[NewMessage | InvalidArgument] | BodyBatch,
        owned_prefix: str = "",
    ) -> SentBatch | list[SendOutcome | InvalidArgument]:
        """Send a batch (one store call); waiting receivers of the queue are woken, about as many
        as the messages visible now (longpoll.py).

        A list of messages: each one that fails `rules.check_message` gets its error in its
        place and the others are sent (an InvalidArgument in the list is an entry the front end
        found malformed: it stays in its place). A BodyBatch (bodies and perhaps dedup ids,
        column by column: the fast path) is answered column by column (SentBatch) when every
        body passes, as such a batch usually does; else entry by entry, as a list.
        owned_prefix: the reserved attribute names the calling front end writes (the SQS
        dialect's "sqs:", rules.attributes)."""
        self._ready()
        rules.queue_name(name)
        count = len(messages.bodies) if isinstance(messages, BodyBatch) else len(messages)
        rules.batch_size(count, "entries")
        self._grant(principal, _SEND, name)
        config = (await self.store.get_queue(name)).config
        if isinstance(messages, BodyBatch):
            if config.grouped:  # stores write groups on the per-message way only
                messages = messages.messages()
            elif rules.plain_batch_valid(messages.bodies, messages.dedup_ids, config):
                sent = await self.store.send_batch(name, messages)
                fresh = len(sent.message_ids) - len(sent.duplicates)
                self.longpoll.sent_bodies(name, fresh, config.default_delay)
                self.longpoll.traffic.sent(name, len(sent.message_ids))
                return sent
            else:
                messages = messages.messages()
        checked: list[NewMessage | InvalidArgument] = []
        for index, message in enumerate(messages):
            if isinstance(message, InvalidArgument):
                checked.append(message)
                continue
            try:
                checked.append(check_message(message, index, config, owned_prefix))
            except InvalidArgument as error:
                checked.append(error)
        valid = [c for c in checked if isinstance(c, NewMessage)]
        if config.ordering is Ordering.FIFO:
            valid = [replace(m, dedup_id=groups.dedup_key(m, config)) for m in valid]
        sent_outcomes: list[SendOutcome] = []
        if valid:
            sent_outcomes = await self.store.send(name, valid)
            self.longpoll.sent(name, valid, sent_outcomes, config.default_delay)
            self.longpoll.traffic.sent(name, len(sent_outcomes))
        outcomes = iter(sent_outcomes)
        return [c if isinstance(c, InvalidArgument) else next(outcomes) for c in checked]

    async def receive(
        self,
        principal: Principal | None,
        name: str,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        wait_time: float | None = None,
        channel_filter: str = "",
        attempt_id: str = "",
    ) -> list[DeliveredMessage]:
        """A long poll: the first non-empty batch, or [] after wait_time (None: the queue's
        receive_wait_time). visibility_timeout None: the queue's. A batch holds at most one
        chunk (`budget.CALL_BYTES`, 8 MiB, plus one message): fewer messages than asked when
        they are large."""
        self._ready()
        rules.queue_name(name)
        rules.batch_size(max_messages, "max_messages")
        if visibility_timeout is not None:
            rules.visibility_timeout(visibility_timeout)
        if wait_time is not None:
            rules.wait_time(wait_time)
        self._grant(principal, _RECEIVE, name)
        config = (await self.store.get_queue(name)).config
        params = ReceiveParams(
            queue=name,
            max_messages=max_messages,
            visibility_timeout=visibility_timeout,
            wait_time=wait_time,
            channel_filter=rules.channel_filter(channel_filter),
            follow=False,
            max_outstanding=limits.DEFAULT_MAX_OUTSTANDING,
            attempt_id=rules.attempt_id(attempt_id, "attempt_id"),
        )
        return await self.long_poll(params, config)

    async def long_poll(self, params: ReceiveParams, config: QueueConfig) -> list[DeliveredMessage]:
        """A receive whose parameters are checked (the above) against the queue's config: its
        defaults are filled in here."""
        params = resolve_receive(params, config)
        return await self.longpoll.receive_batch(params, config)

    async def get_messages(
        self, principal: Principal | None, params: ReceiveParams
    ) -> AsyncGenerator[list[DeliveredMessage], None]:
        """A receive as a stream of chunks (the gRPC GetMessages): when not following, the
        chunks of one long poll's batch (each read, and leased, only after the previous one was
        taken: budget.py), or one empty chunk after wait_time; when following, every batch until
        the caller stops. The caller closes the stream (aclosing) when it ends early, which
        releases what was leased and not taken."""
        self._ready()
        rules.queue_name(params.queue, "queue")
        self._grant(principal, _RECEIVE, params.queue)
        config = (await self.store.get_queue(params.queue)).config
        params = resolve_receive(params, config)
        stream = (
            self.longpoll.follow(params, config)
            if params.follow
            else self.longpoll.receive(params, config)
        )
        async with aclosing(stream) as chunks:
            async for chunk in chunks:
                yield chunk

    async def peek(
        self,
        principal: Principal | None,
        name: str,
        max_messages: int,
        channel_filter: str = "",
        include_leased: bool = False,
        include_delayed: bool = False,
        after: domain.PeekCursor | None = None,
        max_bytes: int | None = None,
        present: Callable[[domain.PeekPage], T] | None = None,
    ) -> Any:
        """One page of at most max_messages messages, cut after the message that reaches
        max_bytes (None: the server's chunk, `budget.CALL_BYTES`; a page holds at most max_bytes
        plus one message). The page is read under the server's byte budget (budget.py), and
        present(page), when given, runs before the bytes are given back (the gRPC front end
        builds its response there): its result is returned instead of the page."""
        self._ready()
        rules.queue_name(name, "queue")
        rules.batch_size(max_messages, "max_messages")
        rules.channel_filter(channel_filter)
        self._grant(principal, _PEEK, name)
        call_bytes = self.longpoll.call_bytes if max_bytes is None else max_bytes
        estimate = read_estimate(max_messages, limits.LARGEST_MESSAGE_BYTES, call_bytes)
        with await self.longpoll.budget.reserve(estimate) as reservation:
            page = await self.store.peek(
                name,
                max_messages,
                channel_filter,
                include_leased,
                include_delayed,
                after,
                call_bytes,
            )
            reservation.resize(
                sum(
                    rules.message_size(m.body, m.attributes) + MESSAGE_OVERHEAD
                    for m in page.messages
                )
            )
            return page if present is None else present(page)

    async def find_message(
        self, principal: Principal | None, name: str, visible_at: float, key: int
    ) -> domain.PeekedMessage | None:
        """The message `key` of the queue if its visible_at is still `visible_at` (a peeked
        message's position: one indexed read, no scan); None when it moved on since (delivered
        again, released, deleted, expired). Needs peek."""
        # The peek order is (visible_at, key): the page after (visible_at, key - 1) starts at
        # the message itself when it is still there.
        page = await self.peek(
            principal, name, 1, "", True, True, (visible_at, key - 1), max_bytes=1
        )
        found: domain.PeekedMessage | None = page.messages[0] if page.messages else None
        if found is None or found.key != key or found.visible_at != visible_at:
            return None  # (a later position of the same message is another delivery or state)
        return found

    async def admin_release(
        self,
        principal: Principal | None,
        name: str,
        visible_at: float,
        key: int,
        seq: int,
        reason: str = "",
    ) -> domain.LeaseStatus:
        """Release a leased message that someone else holds (the console's "release"): admin
        on the queue. The message is named by what a peek showed of it (position and
        receipt_seq); the store makes the receipt of that delivery (`Store.receipt_of`) and an
        ordinary ChangeVisibility to 0 uses it, so API.md's fencing holds unchanged: after a
        newer delivery the call changes nothing (RECEIPT_SUPERSEDED), after the lease ended
        LEASE_EXPIRED. The consumer's own receipt keeps working as after its own release."""
        receipt = await self._admin_receipt(principal, name, key, seq)
        rules.reason(reason)
        # At once, whatever the queue's retry policy: the administrator asked for it now.
        [result] = await self.change_visibility(
            None, name, [VisibilityChange(receipt, 0.0, reason, backoff=False)]
        )
        return result.status

    async def admin_delete(
        self, principal: Principal | None, name: str, key: int, seq: int
    ) -> domain.LeaseStatus:
        """Delete a message by what a peek showed of it (admin on the queue), with the receipt
        of that delivery (see admin_release): DeleteMessages' rules, so a message delivered
        again since is not deleted (RECEIPT_SUPERSEDED); the consumer's later ack of it gets
        ALREADY_DELETED."""
        receipt = await self._admin_receipt(principal, name, key, seq)
        outcome = await self.delete(None, name, [receipt])
        return outcome.results[0].status

    async def admin_dead_letter(
        self, principal: Principal | None, name: str, key: int, seq: int, reason: str = ""
    ) -> domain.LeaseStatus:
        """Move a message to the queue's dead letter queue now (the console's "dead-letter"),
        by what a peek showed of it (admin on the queue), with the receipt of that delivery (see
        admin_release): DeadLetterMessages' rules, so a message delivered again since does not
        move (RECEIPT_SUPERSEDED). NoDeadLetterQueue when the queue has none."""
        receipt = await self._admin_receipt(principal, name, key, seq)
        outcome = await self.dead_letter(None, name, [receipt], reason)
        return outcome.results[0].status

    async def send_receipt(self, name: str, key: int) -> str:
        """The receipt of a message just sent, before any delivery (receipt_seq 0: its send
        receipt, domain.leases.send_receipt), from the key the store's send gave
        (SendOutcome.key). Deletes and updates accept it until the message is delivered or
        updated. For a front end whose send answers a receipt (Azure's Put Message); the
        caller was granted the send."""
        return await self.store.receipt_of(name, key, 0)

    async def _admin_receipt(
        self, principal: Principal | None, name: str, key: int, seq: int
    ) -> str:
        self._ready()
        rules.queue_name(name, "queue")
        self._grant(principal, _ADMIN, name)
        if not (0 <= key < 2**63 and 0 <= seq < 2**32):
            raise InvalidArgument("message", "no such message handle")
        return await self.store.receipt_of(name, key, seq)

    async def change_visibility(
        self, principal: Principal | None, name: str, changes: list[VisibilityChange]
    ) -> list[LeaseResult]:
        self._ready()
        rules.queue_name(name)
        rules.batch_size(len(changes), "entries")
        for index, change in enumerate(changes):
            rules.visibility_timeout(
                change.visibility_timeout, f"entries[{index}].visibility_timeout"
            )
        self._grant(principal, _ACK, name)
        results = await self.store.change_visibility(name, changes)
        self.longpoll.visibility_changed(name, changes, results)
        return results

    async def delete(
        self,
        principal: Principal | None,
        name: str,
        receipts: list[str],
        attempt_ids: list[str] | None = None,
    ) -> DeleteOutcome:
        """Delete by receipt, and every message still leased under one of attempt_ids."""
        self._ready()
        rules.queue_name(name)
        attempt_ids = attempt_ids or []
        rules.batch_size(len(receipts) + len(attempt_ids), "receipts")
        self._grant(principal, _ACK, name)
        outcome = await self.store.delete(name, receipts, attempt_ids)
        self.longpoll.deleted(name, outcome.deleted_keys)
        self.longpoll.traffic.acked(name, len(outcome.deleted_keys))
        return outcome

    async def dead_letter(
        self, principal: Principal | None, name: str, receipts: list[str], reason: str = ""
    ) -> DeadLetterOutcome:
        """Move leased messages to the queue's dead letter queue now (DeadLetterMessages): the
        permission of a delete; NoDeadLetterQueue when the queue has none."""
        self._ready()
        rules.queue_name(name)
        rules.batch_size(len(receipts), "receipts")
        rules.reason(reason)
        self._grant(principal, _ACK, name)
        outcome = await self.store.dead_letter(name, receipts, reason)
        if outcome.moved_keys:
            # Gone from the queue as by a delete (room under its limits), visible in the other.
            self.longpoll.deleted(name, outcome.moved_keys)
            self.longpoll.became_visible(outcome.dead_letter_queue, len(outcome.moved_keys))
        return outcome

    async def update_message(
        self,
        principal: Principal | None,
        name: str,
        receipt: str,
        *,
        body: bytes | None = None,
        attributes: dict[str, str] | None = None,
        visibility_timeout: float | None = None,
    ) -> UpdatedMessage:
        """Replace body/attributes of a leased message (None: keep) and/or move its lease end
        (0 releases it); LeaseRejected when the receipt holds no live lease."""
        self._ready()
        rules.queue_name(name, "queue")
        if visibility_timeout is not None:
            rules.visibility_timeout(visibility_timeout)
        self._grant(principal, _ACK, name)
        updated = await self.store.update_message(
            name, receipt, body=body, attributes=attributes, visibility_timeout=visibility_timeout
        )
        if visibility_timeout == 0 and updated.visible_at > self.store.clock.now():
            self.longpoll.released_later(name, updated.key, updated.visible_at)
        elif visibility_timeout == 0:
            self.longpoll.lease_released(name, [updated.key])
        elif visibility_timeout is not None:
            # Shorter or longer: a shorter lease must wake a waiter at its new end.
            self.longpoll.lease_moved(name, updated.key, updated.visible_at)
        return updated

    async def redrive(
        self,
        principal: Principal | None,
        name: str,
        destination: str | None = None,
        max_messages: int = 0,
        channel_filter: str = "",
    ) -> int:
        """Move a dead letter queue's visible messages to destination (None: back to their
        source queues); 0 max_messages: all."""
        self._ready()
        rules.queue_name(name, "queue")
        self._grant(principal, _REDRIVE, name)
        if destination is not None:
            rules.queue_name(destination, "destination")
            self._grant(principal, _REDRIVE, destination)
        rules.channel_filter(channel_filter)
        moved = await self.store.redrive(name, destination, max_messages, channel_filter)
        if moved:
            if destination is not None:
                self.longpoll.became_visible(destination, moved)
            else:
                # The messages went back to their source queues, which only the store knows.
                self.longpoll.wake_all()
        return moved
