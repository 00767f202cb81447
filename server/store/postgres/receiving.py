"""PostgresStore's receives: the one-statement receive, the transaction way (attempts, dead letter
moves, the in-flight limit), the wake-up after a rolled-back delivery."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from ...domain import leases as decide
from ...domain.rules import bytes_reached, message_size
from ...domain.types import (
    DeliveredMessage,
    ReceiveOutcome,
)
from ...errors import (
    LeaseqError,
    OverLimit,
    QueueNotFound,
    Unavailable,
)
from .groups import Groups
from .settings import (
    PICK_READ_AHEAD,
)
from .statements import (
    ATTEMPT_LEASES_SQL,
    DEAD_LETTER_SQL,
    DELIVER_KEYS_SQL,
    IN_FLIGHT_SQL,
    MARK_BACKOFF_SQL,
    NEXT_VISIBLE_SQL,
    SIZE_SQL,
    _channel_clause,
    _channel_param,
    candidates_sql,
    deliver_sql,
    receive_sql,
)
from .transaction import _Queue, _Row, _size, _Tx

if TYPE_CHECKING:
    from .store import PostgresStore

T = TypeVar("T")


class Receives:
    """The receives of a PostgresStore."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    # -- receive -----------------------------------------------------------------------------

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: float | None = None,
        channel_filter: str = "",
        attempt_id: str = "",
        max_bytes: int | None = None,
    ) -> ReceiveOutcome:
        cut = False  # the byte limit ended the pick: candidates were locked and let go
        if not attempt_id and max_messages > 0:
            fast = await self._waking_on_rollback(
                name,
                self._receive_fast(
                    name, max_messages, visibility_timeout, channel_filter, max_bytes
                ),
            )
            if fast is not None:
                return fast

        async def op(tx: _Tx) -> ReceiveOutcome:
            nonlocal cut
            found = await tx.queue(name, ceiling=True)
            timeout = (
                found.config.visibility_timeout
                if visibility_timeout is None
                else visibility_timeout
            )
            if attempt_id:
                # Two receives with one attempt id take turns (the second one replays).
                await tx.run(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%(lock)b, 0))",
                    {"lock": f"leaseq:attempt:{self.store.schema}:{found.id}:{attempt_id}"},
                )
                replay = await self._replay_attempt(tx, found, attempt_id)
                if replay is not None:
                    return await self._outcome(tx, found, replay)
            limit = await self._delivery_limit(tx, found, max_messages, timeout)
            dlq = await self._dead_letter_target(tx, found)
            if found.config.grouped:
                rows = await self._grouped(
                    tx, found, dlq, limit, timeout, channel_filter, attempt_id, max_bytes
                )
            elif dlq is None:
                rows = await self._deliver(
                    tx, found, limit, timeout, channel_filter, attempt_id, max_bytes
                )
            else:
                rows = await self._pick_and_deliver(
                    tx, found, dlq, limit, timeout, channel_filter, attempt_id, max_bytes
                )
            if rows and decide.delivery_backs_off(timeout, found.config):
                await tx.run(MARK_BACKOFF_SQL, {"keys": [row.key for row in rows]})
            cut = len(rows) < limit and bytes_reached(sum(_size(row) for row in rows), max_bytes)
            if attempt_id and rows:
                await tx.run(
                    "INSERT INTO attempts AS a (queue, attempt_id, until)"
                    " VALUES (%(queue)b, %(attempt)b, %(until)b)"
                    " ON CONFLICT (queue, attempt_id) DO UPDATE SET until = EXCLUDED.until",
                    tx.p(found, attempt=attempt_id, until=tx.now + timeout),
                )
            return await self._outcome(tx, found, [tx.delivered(found, row) for row in rows])

        outcome = await self._waking_on_rollback(name, self.store._run(op))
        if cut:
            # Receivers that skipped the candidates past the cut may have gone to sleep on them.
            self._wake_after_rollback(name)
        return outcome

    async def _receive_fast(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: float | None,
        channel_filter: str,
        max_bytes: int | None,
    ) -> ReceiveOutcome | None:
        """A receive in one statement (receive_sql); None when the queue needs the transaction
        way (a dead letter queue, or the in-flight limit near: nothing was delivered then)."""
        codec = self.store._codec
        if codec is None:
            raise Unavailable("the PostgreSQL store is not open")
        rows = await self.store._statement(
            receive_sql(_channel_clause(channel_filter), sized=max_bytes is not None),
            generic=True,
            params={
                "name": name,
                "now": self.store._clock_now(),
                "timeout": visibility_timeout,
                "limit": max_messages,
                "channel": _channel_param(channel_filter),
                "attempt": None,
                "max_bytes": max_bytes,
            },
        )
        if not rows:
            raise QueueNotFound(name)
        now, queue_id, uid, fast, has_expired, next_visible = rows[0][:6]
        self.store._known[name] = (queue_id, uid)
        if not fast:
            return None  # the transaction way sweeps (and reads a grouped queue's groups again)
        if has_expired:
            await self.store._sweep(queue_id, now)
        picked = sorted((row for row in rows if row[6] is not None), key=lambda row: row[6])
        # The receipts a batch at a time (encode_many: in C when leaseq._native is built).
        receipts = codec.encode_many(uid, [(row[7], row[17]) for row in picked])
        messages = []
        taken = 0
        for receipt, row in zip(receipts, picked):
            (
                key,
                message_id,
                body,
                attributes,
                channel,
                enqueued_at,
                expires_at,
                visible_at,
                _,
                delivery_count,
                _,
                last_error,
                _,
                group,
            ) = row[7:]
            attributes = dict(attributes) if attributes else {}
            messages.append(
                DeliveredMessage(
                    key,
                    message_id,
                    receipt,
                    body,
                    attributes,
                    channel,
                    enqueued_at,
                    expires_at,
                    visible_at,
                    delivery_count,
                    last_error,
                    group or "",
                    0 if group is None else key,
                )
            )
            taken += message_size(body, attributes)
        if len(messages) < max_messages and bytes_reached(taken, max_bytes):
            # Receivers that skipped the candidates past the cut may have gone to sleep on them.
            self._wake_after_rollback(name)
        if messages:
            return ReceiveOutcome(messages)
        return ReceiveOutcome([], next_visible_at=next_visible)

    async def _waking_on_rollback(self, queue: str, receive: Awaitable[T]) -> T:
        """Await a receive's transaction; when it rolled back (the store failed, or the caller
        was cancelled), wake the queue's receivers (_wake_after_rollback). A refusal such as
        QueueNotFound locked nothing and wakes nobody."""
        try:
            return await receive
        except LeaseqError as error:
            if isinstance(error, Unavailable):
                self._wake_after_rollback(queue)
            raise
        except BaseException:  # cancelled
            self._wake_after_rollback(queue)
            raise

    def _wake_after_rollback(self, queue: str) -> None:
        """A receive rolled back: receivers that skipped the messages it had locked may have gone
        to sleep on them. They look again, here and on the other replicas."""
        self.store._fire(queue)
        self.store._publish([queue])

    async def _replay_attempt(
        self, tx: _Tx, found: _Queue, attempt_id: str
    ) -> list[DeliveredMessage] | None:
        """base.py's attempt cases a (the live leases again) and b (nothing); None for c."""
        rows = await tx.rows(ATTEMPT_LEASES_SQL, tx.p(found, attempt=attempt_id))
        if rows:
            rows.sort(key=lambda row: row[0])  # key order
            return [tx.delivered(found, _Row(*row)) for row in rows]
        record = await tx.row(
            "SELECT 1 FROM attempts WHERE queue = %(queue)b AND attempt_id = %(attempt)b"
            " AND until > %(now)b",
            tx.p(found, attempt=attempt_id),
        )
        return [] if record is not None else None

    async def _delivery_limit(
        self, tx: _Tx, found: _Queue, max_messages: int, timeout: float
    ) -> int:
        """How many messages this receive may lease (see the module docstring, in-flight)."""
        if timeout <= 0:
            return max_messages  # no lease, no limit
        limit = found.config.max_in_flight
        ceiling = found.leases_counted + (found.granted - found.grants_at_count)
        if ceiling + max_messages <= limit:
            return max_messages
        # Near the limit: count exactly, one receiver of this queue at a time.
        await tx.run(
            "SELECT pg_advisory_xact_lock(hashtextextended(%(lock)b, 0))",
            {"lock": f"leaseq:in-flight:{self.store.schema}:{found.id}"},
        )
        row = await tx.row(IN_FLIGHT_SQL, tx.p(found))
        assert row is not None
        count, earliest_end, granted = row
        await tx.run(
            "UPDATE queues SET leases_counted = %(count)b, grants_at_count = %(granted)b"
            " WHERE id = %(queue)b",
            tx.p(found, count=count, granted=granted),
        )
        if count >= limit:
            raise OverLimit(found.name, limit, retry_at=earliest_end)
        return min(max_messages, limit - count)  # type: ignore[no-any-return]

    async def _dead_letter_target(self, tx: _Tx, found: _Queue) -> _Queue | None:
        config = found.config
        if not decide.dead_letters(config):
            return None
        return await tx.find_queue(config.dead_letter_queue, "FOR KEY SHARE")  # type: ignore[arg-type]  # set: dead_letters

    async def _deliver(
        self,
        tx: _Tx,
        found: _Queue,
        limit: int,
        timeout: float,
        channel_filter: str,
        attempt_id: str,
        max_bytes: int | None,
    ) -> list[_Row]:
        if limit <= 0:
            return []
        rows = await tx.rows(
            deliver_sql(_channel_clause(channel_filter), sized=max_bytes is not None),
            tx.p(
                found,
                limit=limit,
                channel=_channel_param(channel_filter),
                until=tx.now + timeout,
                leased=timeout > 0,
                attempt=attempt_id or None,
                max_bytes=max_bytes,
            ),
        )
        rows.sort(key=lambda row: row[0])  # delivery order: the pick order
        return [_Row(*row[1:]) for row in rows]

    async def _pick_and_deliver(
        self,
        tx: _Tx,
        found: _Queue,
        dlq: _Queue,
        limit: int,
        timeout: float,
        channel_filter: str,
        attempt_id: str,
        max_bytes: int | None,
    ) -> list[_Row]:
        """Like _deliver, for a queue with a dead letter queue: candidates that reached
        max_delivery_count move there instead and do not count towards the limit (nor towards
        max_bytes)."""
        max_count = found.config.max_delivery_count
        assert max_count is not None
        clause = _channel_clause(channel_filter)
        deliver: list[int] = []
        dead: list[int] = []
        taken = 0
        cursor: tuple[float, int] | None = None
        while len(deliver) < limit and not bytes_reached(taken, max_bytes):
            want = limit - len(deliver)
            page = max(want, PICK_READ_AHEAD)
            rows = await tx.rows(
                candidates_sql(
                    clause,
                    after=cursor is not None,
                    columns=f"key, visible_at, delivery_count, {SIZE_SQL}",
                ),
                tx.p(
                    found,
                    limit=page,
                    channel=_channel_param(channel_filter),
                    after_visible_at=cursor[0] if cursor else None,
                    after_key=cursor[1] if cursor else None,
                ),
            )
            for key, visible_at, delivery_count, size in rows:
                if len(deliver) == limit or bytes_reached(taken, max_bytes):
                    break
                if delivery_count >= max_count:
                    dead.append(key)
                else:
                    deliver.append(key)
                    taken += size
                cursor = (visible_at, key)
            if len(rows) < page:
                break
        if dead:
            await tx.run(
                DEAD_LETTER_SQL,
                tx.p(
                    found,
                    dlq=dlq.id,
                    retention=dlq.config.message_retention,
                    source=found.name,
                    keys=dead,
                    reason=None,
                ),
            )
            tx.published.add(dlq.name)
        if not deliver:
            return []
        rows = await tx.rows(
            DELIVER_KEYS_SQL,
            tx.p(
                found,
                keys=deliver,
                until=tx.now + timeout,
                leased=timeout > 0,
                attempt=attempt_id or None,
            ),
        )
        order = {key: i for i, key in enumerate(deliver)}
        return sorted((_Row(*row) for row in rows), key=lambda row: order[row.key])

    async def _grouped(
        self,
        tx: _Tx,
        found: _Queue,
        dlq: _Queue | None,
        limit: int,
        timeout: float,
        channel_filter: str,
        attempt_id: str,
        max_bytes: int | None,
    ) -> list[_Row]:
        """A receive of a FIFO or FAIR queue (groups.py picks; exhausted candidates move to
        the dead letter queue as in _pick_and_deliver)."""
        groups = Groups(tx, found)
        deliver, served, dead, visited = await groups.pick(
            limit, channel_filter, max_bytes, dlq is not None
        )
        if dead:
            assert dlq is not None
            moved = await groups.of_keys(dead)
            moved_to = Groups(tx, dlq)
            await moved_to.lock(moved)
            await tx.run(
                DEAD_LETTER_SQL,
                tx.p(
                    found,
                    dlq=dlq.id,
                    retention=dlq.config.message_retention,
                    source=found.name,
                    keys=dead,
                    reason=None,
                ),
            )
            await moved_to.refresh(moved, locked=True)
            tx.published.add(dlq.name)
        rows: list[_Row] = []
        if deliver:
            delivered = await tx.rows(
                DELIVER_KEYS_SQL,
                tx.p(
                    found,
                    keys=deliver,
                    until=tx.now + timeout,
                    leased=timeout > 0,
                    attempt=attempt_id or None,
                ),
            )
            order = {key: i for i, key in enumerate(deliver)}
            rows = sorted((_Row(*row) for row in delivered), key=lambda row: order[row.key])
        await groups.delivered(served, visited)
        return rows

    async def _outcome(
        self, tx: _Tx, found: _Queue, messages: list[DeliveredMessage]
    ) -> ReceiveOutcome:
        if messages:
            return ReceiveOutcome(messages)
        row = await tx.row(NEXT_VISIBLE_SQL, tx.p(found))
        return ReceiveOutcome([], next_visible_at=None if row is None else row[0])
