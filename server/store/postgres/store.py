"""The Store facade over PostgreSQL: PostgresStore."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import secrets
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.errors import DeadlockDetected, SerializationFailure, UniqueViolation
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from ...clock import Clock
from ...domain import leases as decide
from ...domain.limits import TOMBSTONE_SECONDS
from ...domain.rules import bytes_reached, message_size, new_message_ids
from ...domain.types import (
    AllDeleted,
    BodyBatch,
    CountsByState,
    DeleteOutcome,
    DeliveredMessage,
    LeaseResult,
    LeaseStatus,
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
from ...errors import (
    LeaseqError,
    LeaseRejected,
    OverLimit,
    QueueAlreadyExists,
    QueueInUse,
    QueueNotFound,
    Unavailable,
)
from ...receipts import ReceiptCodec, new_queue_uid
from .. import StoreOpenError
from ..base import send_batch_by_messages
from .connection import DatabaseClock, _check_connection, _one_line, _redacted, _unavailable
from .notifications import ChangeFeed, Listener
from .queue_infos import QueueInfos
from .schema import _migrate
from .settings import (
    _CONFIG_FIELDS,
    _SCHEMA_NAME,
    CLOCK_SYNC_SECONDS,
    DEFAULT_POOL_MAX,
    DEFAULT_POOL_MIN,
    DEFAULT_SCHEMA,
    HOUSEKEEPING_ROWS,
    HOUSEKEEPING_SECONDS,
    IN_FLIGHT_NOTIFY_MARGIN,
    OPEN_TIMEOUT,
    PICK_READ_AHEAD,
    PLANNER_SETTINGS,
    POOL_TIMEOUT,
    QUEUE_INFO_SECONDS,
    RETRIES,
    STALE_STATS_ROWS,
    STATS_CHECK_SECONDS,
    parse_url,
)
from .statements import (
    ATTEMPT_LEASES_SQL,
    CUSTOM_PLAN_SQL,
    DEAD_LETTER_SQL,
    DELETE_ATTEMPT_SQL,
    DELETE_KEYS_SQL,
    DELETE_RECEIPTS_SQL,
    DELIVER_KEYS_SQL,
    DROP_CHANNEL_ROWS_SQL,
    EMPTY_CHANNELS_SQL,
    GENERIC_PLAN_SQL,
    IN_FLIGHT_SQL,
    INSERT_MESSAGES_SQL,
    LOCK_CHANNELS_SQL,
    NEXT_VISIBLE_SQL,
    PEEK_KEYS_SQL,
    PURGE_SQL,
    QUEUE_COLUMNS,
    REDRIVE_SQL,
    SEND_BODIES_SQL,
    SEND_SQL,
    SIZE_SQL,
    SIZED_COLUMNS,
    STATS_SQL,
    SWEEP_SQL,
    _channel_clause,
    _channel_param,
    candidates_sql,
    deliver_sql,
    peek_sql,
    receive_sql,
)
from .transaction import _encode_attributes, _Queue, _Row, _size, _Tx

log = logging.getLogger(__name__)

T = TypeVar("T")

# --- the store --------------------------------------------------------------------------------

class PostgresStore(ChangeFeed):
    """The Store protocol over PostgreSQL (psycopg 3, an async connection pool).

    Also a change feed (`subscribe`): see the module docstring, Notifications.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        clock: Clock | None = None,
        pool_min: int = DEFAULT_POOL_MIN,
        pool_max: int = DEFAULT_POOL_MAX,
        pool_timeout: float = POOL_TIMEOUT,
    ) -> None:
        if not _SCHEMA_NAME.match(schema):
            raise ValueError(f"bad schema name {schema!r}")
        self.conninfo = conninfo
        self.schema = schema
        self.pool_min = pool_min
        self.pool_max = max(pool_max, pool_min, 1)
        self.pool_timeout = pool_timeout
        self._injected_clock = clock
        self._db_clock = DatabaseClock()
        self.clock: Clock = clock if clock is not None else self._db_clock
        self.channel = f"leaseq.{schema}"
        self._origin = secrets.token_hex(8)
        self._pool: AsyncConnectionPool | None = None
        self._codec: ReceiptCodec | None = None
        self._listeners: list[Listener] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[str] = set()
        self._pending_event = asyncio.Event()
        self._check_lock = asyncio.Lock()
        self._closing = False
        # name -> (id, uid) of queues this store has seen: the one-statement ack decodes
        # receipts with uid and checks both in the statement (a queue made again differs).
        self._known: dict[str, tuple[int, int]] = {}
        # get_queue's answers, while the listener hears of changes (queue_infos.py).
        self._queue_infos = QueueInfos(QUEUE_INFO_SECONDS)
        # Pool connections whose session plans generically now (see _plan_mode).
        self._generic: weakref.WeakSet[psycopg.AsyncConnection[Any]] = weakref.WeakSet()
        # Set while the LISTEN connection is up (tests wait for it).
        self.listening = asyncio.Event()

    @classmethod
    def from_url(cls, url: str, clock: Clock | None = None) -> PostgresStore:
        settings = parse_url(url)
        return cls(
            settings.conninfo,
            schema=settings.schema,
            clock=clock,
            pool_min=settings.pool_min,
            pool_max=settings.pool_max,
            pool_timeout=settings.pool_timeout,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def _connect_kwargs(self) -> dict[str, Any]:
        params = psycopg.conninfo.conninfo_to_dict(self.conninfo)
        options = params.get("options") or ""
        settings = {"search_path": self.schema, **PLANNER_SETTINGS}
        kwargs: dict[str, Any] = {
            "options": " ".join([options, *(f"-c {k}={v}" for k, v in settings.items())]).strip(),
        }
        if "application_name" not in params:
            kwargs["application_name"] = "leaseq"
        return kwargs

    async def open(self) -> None:
        if self._pool is not None:
            return
        self._closing = False
        kwargs = self._connect_kwargs()
        # One connection first: a server that is down or a database that does not exist is
        # reported at once, in one line, not as the pool's warnings until OPEN_TIMEOUT.
        await _check_connection(self.conninfo, kwargs)
        pool = AsyncConnectionPool(
            self.conninfo,
            # Autocommit: a one-statement operation is its own transaction (no BEGIN, no COMMIT,
            # and no switching modes per operation); _run's transactions BEGIN explicitly.
            kwargs={**kwargs, "autocommit": True},
            min_size=self.pool_min,
            max_size=self.pool_max,
            timeout=self.pool_timeout,
            open=False,
            name=f"leaseq-{self.schema}",
        )
        try:
            await pool.open(wait=True, timeout=OPEN_TIMEOUT)
        except PoolTimeout as error:
            await pool.close()
            raise StoreOpenError(
                f"cannot connect to PostgreSQL ({_redacted(self.conninfo)}): {error}"
            ) from error
        try:
            async with pool.connection() as conn:
                key = await _migrate(conn, self.schema)
                await self._db_clock.sync(conn)
                await conn.commit()
        except psycopg.Error as error:
            await pool.close()
            raise StoreOpenError(
                f"cannot prepare the PostgreSQL schema {self.schema!r}: {_one_line(error)}"
            ) from error
        except BaseException:
            await pool.close()
            raise
        self._codec = ReceiptCodec(key)
        self._pool = pool
        # Made here, on the loop that runs the store.
        self._pending_event = asyncio.Event()
        self._check_lock = asyncio.Lock()
        self.listening = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._listen(kwargs), name="leaseq-pg-listen"),
            asyncio.create_task(self._publish_loop(), name="leaseq-pg-notify"),
            asyncio.create_task(self._maintain(), name="leaseq-pg-maintenance"),
            asyncio.create_task(self._watch_statistics(), name="leaseq-pg-statistics"),
        ]

    async def close(self) -> None:
        pool = self._pool
        if pool is None or self._closing:
            return
        self._closing = True  # new operations are refused; what is pending is still published
        notifier = [t for t in self._tasks if t.get_name() == "leaseq-pg-notify"]
        others = [t for t in self._tasks if t not in notifier]
        for task in others:
            task.cancel()
        self._pending_event.set()
        for task in others:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        for task in notifier:
            try:
                await asyncio.wait_for(task, 2.0)
            except (asyncio.TimeoutError, Exception):
                pass
        self._tasks = []
        self._pool = None
        await pool.close()

    def token_key(self) -> bytes:
        return self._codec.derive(b"leaseq page tokens")

    async def _maintain(self) -> None:
        """Housekeeping (stale tombstones, dedup and attempt records; one replica at a time)
        and the clock offset, every minute."""
        while True:
            await asyncio.sleep(min(HOUSEKEEPING_SECONDS, CLOCK_SYNC_SECONDS))
            try:
                await self.housekeep()
                pool = self._pool
                if pool is not None and self._injected_clock is None:
                    async with pool.connection() as conn:
                        await self._db_clock.sync(conn)
                        await conn.commit()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("PostgreSQL housekeeping failed: %s", error)

    async def _watch_statistics(self) -> None:
        while True:
            await asyncio.sleep(STATS_CHECK_SECONDS)
            try:
                await self.refresh_statistics()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("PostgreSQL statistics check failed: %s", error)

    async def refresh_statistics(self) -> bool:
        """ANALYZE messages when pg_class counts under a tenth of its live rows (at least
        STALE_STATS_ROWS): a VACUUM of a nearly empty table records "0 rows", and without
        autovacuum nothing corrects it. The planner scales every estimate by that count, so the
        statements written to need no statistics (the receive) are safe anyway, but the others
        (acks by key, ...) get their plans from it. One replica at a time; returns whether it
        ran."""

        async def op(tx: _Tx) -> bool:
            row = await tx.row(
                "SELECT c.reltuples, s.n_live_tup FROM pg_class c"
                " JOIN pg_stat_user_tables s ON s.relid = c.oid"
                " WHERE c.oid = 'messages'::regclass",
                {},
            )
            if row is None:
                return False
            estimated, live = row
            if estimated < 0 or live < STALE_STATS_ROWS or estimated * 10 >= live:
                return False  # never analyzed (the planner sizes it by its pages), or close
            got = await tx.row(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(%(lock)b, 0))",
                {"lock": f"leaseq:analyze:{self.schema}"},
            )
            if not got or not got[0]:
                return False
            await tx.conn.execute("ANALYZE messages", prepare=False)
            return True

        return await self._run(op)

    async def housekeep(self) -> int:
        """Delete stale tombstone, dedup and attempt rows (their meaning is bounded by a time
        checked on every read, so when this runs is invisible). Returns the rows deleted."""

        async def op(tx: _Tx) -> int:
            got = await tx.row(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(%(lock)b, 0))",
                {"lock": f"leaseq:housekeeping:{self.schema}"},
            )
            if not got or not got[0]:
                return 0  # another replica is at it
            now = await tx.clock()
            total = 0
            for table, condition, cutoff in (
                ("tombstones", "deleted_at < %(cutoff)b", now - TOMBSTONE_SECONDS),
                ("dedup", "until <= %(cutoff)b", now),
                ("attempts", "until <= %(cutoff)b", now),
            ):
                total += await tx.run(
                    f"DELETE FROM {table} WHERE ctid IN (SELECT ctid FROM {table}"
                    f" WHERE {condition} LIMIT {HOUSEKEEPING_ROWS})",
                    {"cutoff": cutoff},
                )
            return total + await self._drop_empty_channels(tx)

        total = 0
        while True:
            deleted = await self._run(op)
            total += deleted
            if deleted < HOUSEKEEPING_ROWS:
                return total

    @staticmethod
    async def _drop_empty_channels(tx: _Tx) -> int:
        """Remove the channel_counters rows of channels that hold no message (their slots sum
        to 0), at most HOUSEKEEPING_ROWS channels; returns the rows removed. The rows are
        locked and summed again before they go: a send that committed meanwhile kept its
        channel."""
        empty = await tx.rows(EMPTY_CHANNELS_SQL, {"limit": HOUSEKEEPING_ROWS})
        if not empty:
            return 0
        locked = await tx.rows(
            LOCK_CHANNELS_SQL,
            {"queues": [q for q, _ in empty], "channels": [c for _, c in empty]},
        )
        sums: dict[tuple[int, str], int] = {}
        for queue, channel, _, total in locked:
            sums[queue, channel] = sums.get((queue, channel), 0) + total
        rows = [(q, c, slot) for q, c, slot, _ in locked if sums[q, c] == 0]
        if not rows:
            return 0
        return await tx.run(
            DROP_CHANNEL_ROWS_SQL,
            {
                "queues": [q for q, _, _ in rows],
                "channels": [c for _, c, _ in rows],
                "slots": [slot for _, _, slot in rows],
            },
        )

    # -- running operations ------------------------------------------------------------------

    async def _run(self, fn: Callable[[_Tx], Awaitable[T]], one_read: bool = False) -> T:
        """Run fn in one transaction; publish what it asked to after COMMIT. Connection trouble
        becomes Unavailable, after retries where they are safe (see the module docstring).

        one_read: fn runs one read-only statement, which is a transaction by itself: no BEGIN
        and COMMIT around it (two round trips of three; the service reads the queue's
        configuration so before every send and receive)."""
        failure: BaseException | None = None
        for attempt in range(RETRIES + 1):
            pool, codec = self._pool, self._codec
            if pool is None or codec is None or self._closing:
                raise Unavailable("the PostgreSQL store is not open")
            clock_now = None if self._injected_clock is None else self._injected_clock.now()
            committing = False
            try:
                async with pool.connection() as conn:
                    if one_read:
                        # A read of the queue's row (get_queue): one unique index plan either
                        # way, so the session stays as it is.
                        tx = _Tx(conn, codec, clock_now)
                        result = await fn(tx)
                    else:
                        if conn in self._generic:
                            await self._plan_mode(conn, False)
                        async with conn.transaction():
                            tx = _Tx(conn, codec, clock_now)
                            result = await fn(tx)
                            committing = True
                self._publish(tx.published)
                return result
            except LeaseqError:
                raise
            except (DeadlockDetected, SerializationFailure) as error:
                failure = error  # rolled back by the server: safe to run again
                continue
            except (PoolTimeout, PoolClosed) as error:
                raise _unavailable(error) from error
            except (psycopg.OperationalError, psycopg.InterfaceError) as error:
                failure = error
                if committing:
                    raise _unavailable(error) from error  # it may have committed: no retry
                await self._check_pool()
                continue
        assert failure is not None
        raise _unavailable(failure) from failure

    async def _statement(
        self, query: str, params: dict[str, Any], generic: bool = False
    ) -> list[tuple[Any, ...]]:
        """Run one statement autocommitted (one round trip: no BEGIN, no COMMIT); its rows.

        generic: planned once per connection (force_generic_plan; see GENERIC_PLAN_SQL), for
        the one-statement operations, whose plans need no statistics.

        A failure the server reported (an error with a SQLSTATE: a deadlock, a backend
        terminated while the statement ran or sat in the pool) rolled the statement back, so it
        runs again on another connection. A connection lost without a word from the server may
        have lost the answer to a statement that committed: Unavailable, no retry."""
        failure: BaseException | None = None
        for attempt in range(RETRIES + 1):
            pool = self._pool
            if pool is None or self._closing:
                raise Unavailable("the PostgreSQL store is not open")
            sent = False

            async def work(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
                nonlocal sent
                await self._plan_mode(conn, generic)
                sent = True
                return await self._fetch(conn, query, params)

            try:
                async with pool.connection() as conn:
                    return await work(conn)
            except (DeadlockDetected, SerializationFailure) as error:
                failure = error
                continue
            except (PoolTimeout, PoolClosed) as error:
                raise _unavailable(error) from error
            except (psycopg.OperationalError, psycopg.InterfaceError) as error:
                failure = error
                await self._check_pool()
                if sent and error.sqlstate is None:
                    raise _unavailable(error) from error
                continue
        assert failure is not None
        raise _unavailable(failure) from failure

    @staticmethod
    async def _fetch(
        conn: psycopg.AsyncConnection[Any], query: str, params: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        cur = conn.cursor(binary=True)
        await cur.execute(query, params)
        return await cur.fetchall() if cur.description is not None else []

    async def _plan_mode(self, conn: psycopg.AsyncConnection[Any], generic: bool) -> None:
        """Set conn's session to plan generically (the one-statement operations) or anew on
        every execution (PLANNER_SETTINGS: everything else), when it is not so already. One
        round trip, only when a connection goes from one kind of work to the other: nearly
        every operation is a one-statement one. Called outside a transaction."""
        if (conn in self._generic) == generic:
            return
        await conn.execute(GENERIC_PLAN_SQL if generic else CUSTOM_PLAN_SQL)
        if generic:
            self._generic.add(conn)
        else:
            self._generic.discard(conn)

    async def _sweep(self, queue_id: int, now: float) -> None:
        """The expiry sweep after a one-statement operation that saw expired messages."""
        await self._statement(SWEEP_SQL, {"queue": queue_id, "now": now})

    def _clock_now(self) -> float | None:
        return None if self._injected_clock is None else self._injected_clock.now()

    async def _check_pool(self) -> None:
        """After a connection failed: drop the pool's dead connections (once, for everyone who
        noticed at the same time)."""
        pool = self._pool
        if pool is None:
            return
        if self._check_lock.locked():
            async with self._check_lock:
                return
        async with self._check_lock:
            try:
                await pool.check()
            except Exception as error:  # pragma: no cover - check() logs and replaces
                log.debug("pool check failed: %s", error)

    # -- queues ------------------------------------------------------------------------------

    async def create_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        async def op(tx: _Tx) -> QueueInfo:
            now = await tx.clock()
            existing = await tx.find_queue(name)
            if existing is not None:
                if existing.config == config:
                    return existing.info()
                raise QueueAlreadyExists(name)
            await tx.check_dead_letter_queue(name, config)
            columns = ", ".join(("name", "uid", "create_time", *_CONFIG_FIELDS))
            marks = ", ".join(["%s"] * (3 + len(_CONFIG_FIELDS)))
            cur = await tx.conn.execute(
                f"INSERT INTO queues ({columns}) VALUES ({marks})"
                " ON CONFLICT (name) DO NOTHING RETURNING id",
                (name, new_queue_uid(), now, *dataclasses.astuple(config)),
            )
            if await cur.fetchone() is None:
                # Another replica created it meanwhile (its INSERT committed first).
                raced = await tx.find_queue(name)
                if raced is not None and raced.config == config:
                    return raced.info()
                raise QueueAlreadyExists(name)
            await tx.conn.execute(*self._config_notify_sql(name))
            return QueueInfo(name, config, now)

        return await self._changing_queue(name, op)

    async def get_queue(self, name: str) -> QueueInfo:
        # The service asks before every send and receive: from memory while changes are heard.
        infos = self._queue_infos
        info = infos.get(name)
        if info is not None:
            return info

        async def op(tx: _Tx) -> QueueInfo:
            found = await tx.find_queue(name)
            if found is None:
                raise QueueNotFound(name)
            return found.info()

        started = infos.start_read()
        # The queue's row, no expiry sweep: nothing of QueueInfo depends on expired messages.
        info = await self._run(op, one_read=True)
        infos.keep(info, started)
        return info

    async def _changing_queue(self, name: str, op: Callable[[_Tx], Awaitable[T]]) -> T:
        """Run op, which changes the queue's row and runs _config_notify_sql: then this replica
        forgets its answer at once, the others when they hear of it."""
        try:
            return await self._run(op)
        finally:
            self._queue_infos.forget(name)

    async def list_queues(self, prefix: str, after: str | None, limit: int) -> list[QueueInfo]:
        async def op(tx: _Tx) -> list[QueueInfo]:
            rows = await tx.rows(
                f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name >= %(prefix)b"
                " AND starts_with(name, %(prefix)b) AND name > %(after)b"
                " ORDER BY name LIMIT %(limit)b",
                {"prefix": prefix, "after": after or "", "limit": max(limit, 0)},
            )
            return [_Queue.from_row(row).info() for row in rows]

        return await self._run(op)

    async def update_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        async def op(tx: _Tx) -> QueueInfo:
            found = await tx.queue(name)
            await tx.check_dead_letter_queue(name, config)
            assignments = ", ".join(f"{field} = %s" for field in _CONFIG_FIELDS)
            await tx.conn.execute(
                f"UPDATE queues SET {assignments} WHERE id = %s",
                (*dataclasses.astuple(config), found.id),
            )
            await tx.conn.execute(*self._config_notify_sql(name))
            tx.published.add(name)
            return QueueInfo(name, config, found.create_time)

        return await self._changing_queue(name, op)

    async def queue_metadata(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        async def op(tx: _Tx) -> dict[str, dict[str, str]]:
            rows = await tx.rows(
                "SELECT q.name, m.metadata FROM queues q JOIN queue_metadata m ON m.queue = q.id"
                " WHERE q.name = ANY(%(names)s)",
                {"names": list(names)},
            )
            return {name: dict(metadata) for name, metadata in rows}

        return await self._run(op, one_read=True)

    async def set_queue_metadata(self, name: str, metadata: Mapping[str, str]) -> None:
        async def op(tx: _Tx) -> None:
            found = await tx.find_queue(name, "FOR KEY SHARE")
            if found is None:
                raise QueueNotFound(name)
            if metadata:
                await tx.conn.execute(
                    "INSERT INTO queue_metadata (queue, metadata) VALUES (%s, %s)"
                    " ON CONFLICT (queue) DO UPDATE SET metadata = EXCLUDED.metadata",
                    (found.id, Jsonb(dict(metadata))),
                )
            else:
                await tx.conn.execute("DELETE FROM queue_metadata WHERE queue = %s", (found.id,))

        await self._run(op)

    async def delete_queue(self, name: str) -> None:
        async def op(tx: _Tx) -> None:
            # Deleting the row first waits for the senders holding it (FOR KEY SHARE); then the
            # statements below see what they wrote.
            cur = await tx.conn.execute(
                "DELETE FROM queues WHERE name = %s RETURNING id", (name,)
            )
            row = await cur.fetchone()
            if row is None:
                raise QueueNotFound(name)
            queue_id = row[0]
            cur = await tx.conn.execute(
                "SELECT name FROM queues WHERE dead_letter_queue = %s ORDER BY name LIMIT 1",
                (name,),
            )
            user = await cur.fetchone()
            if user is not None:
                raise QueueInUse(name, user[0])  # rolls the delete back
            for table in (
                "messages", "queue_counters", "channel_counters", "dedup", "attempts",
                "queue_metadata",
            ):
                await tx.conn.execute(f"DELETE FROM {table} WHERE queue = %s", (queue_id,))
            await tx.conn.execute(*self._config_notify_sql(name))
            tx.published.add(name)

        await self._changing_queue(name, op)

    async def purge_queue(self, name: str) -> int:
        async def op(tx: _Tx) -> int:
            found = await tx.queue(name)
            row = await tx.row(PURGE_SQL, tx.p(found))
            assert row is not None
            tx.published.add(name)
            return row[0]

        return await self._run(op)

    async def stats(self, name: str) -> QueueStats:
        async def op(tx: _Tx) -> QueueStats:
            found = await tx.queue(name)
            held: dict[str, int] = {}  # messages by channel, expired ones not swept included
            unavailable: dict[str, tuple[int, int]] = {}  # leased, delayed
            unswept: dict[str, int] = {}  # expired, not removed yet (past SWEEP_LIMIT)
            oldest: float | None = None
            dead_lettered = expired = deleted = 0
            for kind, channel, a, b, c, enqueued_at in await tx.rows(STATS_SQL, tx.p(found)):
                if kind == 0:
                    held[channel] = a
                elif kind == 1:
                    unavailable[channel] = (a, b)
                elif kind == 2:
                    unswept[channel] = a
                elif kind == 3:
                    oldest = enqueued_at
                else:
                    dead_lettered, expired, deleted = a, b, c
            channels = {}
            for channel in sorted(held.keys() | unavailable.keys()):
                leased, delayed = unavailable.get(channel, (0, 0))
                visible = held.get(channel, 0) - unswept.get(channel, 0) - leased - delayed
                if visible < 0:
                    # Counters short of the rows: only if something wrote messages behind the
                    # triggers' back (schema.py, version 4). Never a negative count (the
                    # exactness tests compare the counters with the rows, not this).
                    log.warning(
                        "channel_counters of queue %s, channel %r: %d short of the rows",
                        name, channel, -visible,
                    )
                    visible = 0
                if visible or leased or delayed:  # channels with an unexpired message (base.py)
                    channels[channel] = CountsByState(visible, leased, delayed)
            return QueueStats.from_channels(
                channels,
                oldest,
                tx.now,
                dead_lettered_total=dead_lettered,
                expired_total=expired + sum(unswept.values()),
                deleted_total=deleted,
            )

        return await self._run(op)

    # -- send --------------------------------------------------------------------------------

    async def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        if not any(m.dedup_id for m in messages):
            # Nothing to deduplicate: one statement.
            ids = new_message_ids(len(messages))
            await self._insert(
                name,
                SEND_SQL,
                {
                    "message_ids": ids,
                    "bodies": [m.body for m in messages],
                    "attributes": [_encode_attributes(m.attributes) for m in messages],
                    "channels": [m.channel for m in messages],
                    "ttls": [m.ttl for m in messages],
                    "delays": [m.delay for m in messages],
                },
            )
            return [SendOutcome(message_id) for message_id in ids]

        async def op(tx: _Tx) -> list[SendOutcome]:
            # FOR KEY SHARE: a concurrent DeleteQueue waits for this send, then deletes it too.
            found = await tx.queue(name, lock="FOR KEY SHARE")
            config, now = found.config, tx.now
            # A repeat later in this batch is a duplicate of the first (whatever the window).
            first: dict[str, str] = {}  # dedup_id -> message_id of its first entry
            ids: list[str] = []
            fresh = iter(new_message_ids(len(messages)))
            for m in messages:
                if m.dedup_id and m.dedup_id in first:
                    ids.append(first[m.dedup_id])
                    continue
                message_id = next(fresh)
                ids.append(message_id)
                if m.dedup_id:
                    first[m.dedup_id] = message_id
            known = await self._claim_dedup(tx, found, first) if first else {}
            outcomes: list[SendOutcome] = []
            rows: dict[str, list[Any]] = {
                "message_ids": [], "bodies": [], "attributes": [], "channels": [],
                "expires": [], "visibles": [],
            }
            seen: set[str] = set()
            for m, message_id in zip(messages, ids):
                if m.dedup_id:
                    if m.dedup_id in known:
                        outcomes.append(SendOutcome(known[m.dedup_id], duplicate=True))
                        continue
                    if m.dedup_id in seen:
                        outcomes.append(SendOutcome(message_id, duplicate=True))
                        continue
                    seen.add(m.dedup_id)
                visible_at, expires_at = decide.send_times(now, m.delay, m.ttl, config)
                rows["message_ids"].append(message_id)
                rows["bodies"].append(m.body)
                rows["attributes"].append(_encode_attributes(m.attributes))
                rows["channels"].append(m.channel)
                rows["expires"].append(expires_at)
                rows["visibles"].append(visible_at)
                outcomes.append(SendOutcome(message_id))
            if rows["message_ids"]:
                await tx.run(INSERT_MESSAGES_SQL, tx.p(found, **rows))
                tx.published.add(name)
            return outcomes

        return await self._run(op)

    async def send_batch(self, name: str, batch: BodyBatch) -> SentBatch:
        """Store.send_batch: bodies alone in one statement (send_bodies); with dedup ids,
        through send (its dedup claims)."""
        if batch.dedup_ids is None:
            return SentBatch(await self.send_bodies(name, batch.bodies))
        return await send_batch_by_messages(self, name, batch)

    async def send_bodies(self, name: str, bodies: list[bytes]) -> list[str]:
        """Send messages that are only a body: their ids, one statement, no object per message."""
        ids = new_message_ids(len(bodies))
        await self._insert(name, SEND_BODIES_SQL, {"message_ids": ids, "bodies": bodies})
        return ids

    async def _insert(self, name: str, statement: str, rows: dict[str, list[Any]]) -> None:
        """SEND_SQL or SEND_BODIES_SQL (messages without dedup ids): rows are its arrays."""
        answer = await self._statement(
            statement,
            generic=True,
            params={"name": name, "now": self._clock_now(), **rows},
        )
        if not answer:
            raise QueueNotFound(name)
        now, queue_id, has_expired, count = answer[0]
        if count:
            self._publish([name])
        if has_expired:
            await self._sweep(queue_id, now)

    @staticmethod
    async def _claim_dedup(tx: _Tx, found: _Queue, first: dict[str, str]) -> dict[str, str]:
        """dedup_id -> original message_id for the ids still inside their window; records the
        others (when the window is > 0) as this send's. Claiming by INSERT ... ON CONFLICT makes
        two replicas sending the same dedup_id at once agree on one original."""
        dedup_ids = sorted(first)
        window = found.config.dedup_window
        if window > 0:
            claimed = await tx.rows(
                "INSERT INTO dedup AS d (queue, dedup_id, message_id, until)"
                " SELECT %(queue)b, i, m, %(until)b"
                " FROM unnest(%(ids)b::text[], %(mids)b::text[]) AS x(i, m)"
                " ON CONFLICT (queue, dedup_id) DO UPDATE SET message_id = EXCLUDED.message_id,"
                " until = EXCLUDED.until WHERE d.until <= %(now)b"
                " RETURNING dedup_id",
                tx.p(found, ids=dedup_ids, mids=[first[i] for i in dedup_ids],
                     until=tx.now + window),
            )
            mine = {row[0] for row in claimed}
            others = [i for i in dedup_ids if i not in mine]
            if not others:
                return {}
            rows = await tx.rows(
                "SELECT dedup_id, message_id FROM dedup"
                " WHERE queue = %(queue)b AND dedup_id = ANY(%(ids)b::text[])",
                tx.p(found, ids=others),
            )
            return dict(rows)
        # A zero window leaves no record (now < now + 0 never holds), but older records count.
        rows = await tx.rows(
            "SELECT dedup_id, message_id FROM dedup WHERE queue = %(queue)b"
            " AND dedup_id = ANY(%(ids)b::text[]) AND until > %(now)b",
            tx.p(found, ids=dedup_ids),
        )
        return dict(rows)

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
                    {"lock": f"leaseq:attempt:{self.schema}:{found.id}:{attempt_id}"},
                )
                replay = await self._replay_attempt(tx, found, attempt_id)
                if replay is not None:
                    return await self._outcome(tx, found, replay)
            limit = await self._delivery_limit(tx, found, max_messages, timeout)
            dlq = await self._dead_letter_target(tx, found)
            if dlq is None:
                rows = await self._deliver(
                    tx, found, limit, timeout, channel_filter, attempt_id, max_bytes
                )
            else:
                rows = await self._pick_and_deliver(
                    tx, found, dlq, limit, timeout, channel_filter, attempt_id, max_bytes
                )
            cut = len(rows) < limit and bytes_reached(
                sum(_size(row) for row in rows), max_bytes
            )
            if attempt_id and rows:
                await tx.run(
                    "INSERT INTO attempts AS a (queue, attempt_id, until)"
                    " VALUES (%(queue)b, %(attempt)b, %(until)b)"
                    " ON CONFLICT (queue, attempt_id) DO UPDATE SET until = EXCLUDED.until",
                    tx.p(found, attempt=attempt_id, until=tx.now + timeout),
                )
            return await self._outcome(tx, found, [tx.delivered(found, row) for row in rows])

        outcome = await self._waking_on_rollback(name, self._run(op))
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
        codec = self._codec
        if codec is None:
            raise Unavailable("the PostgreSQL store is not open")
        rows = await self._statement(
            receive_sql(_channel_clause(channel_filter), sized=max_bytes is not None),
            generic=True,
            params={
                "name": name,
                "now": self._clock_now(),
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
        self._known[name] = (queue_id, uid)
        if has_expired:
            await self._sweep(queue_id, now)
        if not fast:
            return None
        picked = sorted((row for row in rows if row[6] is not None), key=lambda row: row[6])
        # The receipts a batch at a time (encode_many: in C when leaseq._native is built).
        receipts = codec.encode_many(uid, [(row[7], row[17]) for row in picked])
        messages = []
        taken = 0
        for receipt, row in zip(receipts, picked):
            (key, message_id, body, attributes, channel, enqueued_at, expires_at, visible_at,
             _, delivery_count, _, last_error, _) = row[7:]
            attributes = dict(attributes) if attributes else {}
            messages.append(
                DeliveredMessage(
                    key, message_id, receipt, body, attributes, channel, enqueued_at,
                    expires_at, visible_at, delivery_count, last_error,
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
        self._fire(queue)
        self._publish([queue])

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
            {"lock": f"leaseq:in-flight:{self.schema}:{found.id}"},
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
        return min(max_messages, limit - count)

    async def _dead_letter_target(self, tx: _Tx, found: _Queue) -> _Queue | None:
        config = found.config
        if not decide.dead_letters(config):
            return None
        return await tx.find_queue(config.dead_letter_queue, "FOR KEY SHARE")

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
                candidates_sql(clause, after=cursor is not None,
                               columns=f"key, visible_at, delivery_count, {SIZE_SQL}"),
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
                tx.p(found, dlq=dlq.id, retention=dlq.config.message_retention,
                     source=found.name, keys=dead),
            )
            tx.published.add(dlq.name)
        if not deliver:
            return []
        rows = await tx.rows(
            DELIVER_KEYS_SQL,
            tx.p(found, keys=deliver, until=tx.now + timeout, leased=timeout > 0,
                 attempt=attempt_id or None),
        )
        order = {key: i for i, key in enumerate(deliver)}
        return sorted((_Row(*row) for row in rows), key=lambda row: order[row.key])

    async def _outcome(
        self, tx: _Tx, found: _Queue, messages: list[DeliveredMessage]
    ) -> ReceiveOutcome:
        if messages:
            return ReceiveOutcome(messages)
        row = await tx.row(NEXT_VISIBLE_SQL, tx.p(found))
        return ReceiveOutcome([], next_visible_at=None if row is None else row[0])

    # -- peek --------------------------------------------------------------------------------

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
        async def op(tx: _Tx) -> PeekPage:
            found = await tx.queue(name)
            params = tx.p(
                found,
                limit=max(max_messages, 0) + 1,
                channel=_channel_param(channel_filter),
                after_visible_at=after[0] if after else None,
                after_key=after[1] if after else None,
            )
            clause = _channel_clause(channel_filter)
            if max_bytes is None:
                sql = peek_sql(include_leased, include_delayed, clause, after=after is not None)
                rows = [_Row(*row) for row in await tx.rows(sql, params)]
                page = rows[: max(max_messages, 0)]
                return PeekPage(
                    messages=[tx.peeked(row) for row in page],
                    next_cursor=(page[-1].visible_at, page[-1].key)
                    if len(rows) > max_messages and page
                    else None,
                )
            # Sizes first, then only the page's rows whole: a page cut by bytes reads no body
            # past its last message.
            sized = await tx.rows(
                peek_sql(
                    include_leased, include_delayed, clause, after=after is not None,
                    columns=SIZED_COLUMNS,
                ),
                params,
            )
            chosen: list[tuple[int, float]] = []
            taken = 0
            for key, visible_at, size in sized[: max(max_messages, 0)]:
                if bytes_reached(taken, max_bytes):
                    break
                chosen.append((key, visible_at))
                taken += size
            more = len(sized) > len(chosen)
            rows = await tx.rows(PEEK_KEYS_SQL, {"keys": [key for key, _ in chosen]})
            # A message that changed between the two statements shows its state now; one deleted
            # in between is left out. The cursor follows the sizes' order, so paging goes on.
            return PeekPage(
                messages=[tx.peeked(_Row(*row)) for row in rows],
                next_cursor=(chosen[-1][1], chosen[-1][0]) if more and chosen else None,
            )

        return await self._run(op)

    # -- change visibility ---------------------------------------------------------------------

    async def receipt_of(self, name: str, key: int, receipt_seq: int) -> str:
        async def op(tx: _Tx) -> str:
            found = await tx.find_queue(name)
            if found is None:
                raise QueueNotFound(name)
            return tx.codec.encode(found.uid, key, receipt_seq)

        return await self._run(op)

    async def change_visibility(
        self, name: str, changes: list[VisibilityChange]
    ) -> list[LeaseResult]:
        async def op(tx: _Tx) -> list[LeaseResult]:
            found = await tx.queue(name)
            decoded = [tx.codec.decode(c.receipt, found.uid) for c in changes]
            leases, tombstones = await tx.lookup(found, decoded)
            results, changed = decide.apply_visibility_changes(
                changes, decoded, leases, tombstones, tx.now
            )
            await tx.write_leases(list(changed.values()))
            if changed:
                # A release, or a lease that now ends sooner: waiters elsewhere look again.
                tx.published.add(name)
            return results

        return await self._run(op)

    # -- delete ------------------------------------------------------------------------------

    async def delete(
        self, name: str, receipts: list[str], attempt_ids: Sequence[str] = ()
    ) -> DeleteOutcome:
        if not attempt_ids:
            outcome = await self._delete_fast(name, receipts)
            if outcome is not None:
                return outcome
        return await self._delete_slow(name, receipts, attempt_ids)

    async def _delete_fast(self, name: str, receipts: list[str]) -> DeleteOutcome | None:
        """Acks in one statement (DELETE_RECEIPTS_SQL) when every receipt verifies against the
        queue as this store knows it and names a message of its own. The receipts it did not
        delete (stale, already deleted, ...) go the transaction way for their statuses. None:
        all of them do."""
        known, codec = self._known.get(name), self._codec
        if known is None or codec is None or not receipts:
            return None
        queue_id, uid = known
        decoded = codec.decode_many(receipts, uid)
        if None in decoded:
            return None
        keys = [d[0] for d in decoded]  # type: ignore[index]  (no None: checked above)
        if len(set(keys)) != len(keys):
            return None  # a repeat sees the first one's delete: base.py's order, entry by entry
        try:
            rows = await self._statement(
                DELETE_RECEIPTS_SQL,
                generic=True,
                params={
                    "name": name,
                    "queue": queue_id,
                    "uid": uid,
                    "now": self._clock_now(),
                    "keys": keys,
                    "seqs": [d[1] for d in decoded if d is not None],
                    "margin": IN_FLIGHT_NOTIFY_MARGIN,
                },
            )
        except UniqueViolation:
            return None  # a tombstone of one of the keys exists (see DELETE_RECEIPTS_SQL)
        if not rows:
            self._known.pop(name, None)  # gone, or made again: learn it anew
            return None
        now, _, has_expired, deleted, near_limit = rows[0]
        if deleted and near_limit:
            self._publish([name])  # in-flight room for waiters held by max_in_flight
        if has_expired:
            await self._sweep(queue_id, now)
        if len(deleted) == len(keys):
            # Every receipt deleted its own message (keys are distinct): all OK, answered from
            # the receipts (AllDeleted: no LeaseResult per receipt, as the SQLite store).
            return DeleteOutcome(AllDeleted(receipts, decoded), [], keys)  # type: ignore[arg-type]
        gone = set(deleted)
        rest = await self._delete_slow(name, [r for r, k in zip(receipts, keys) if k not in gone])
        others = iter(rest.results)
        results = [
            LeaseResult(r, LeaseStatus.OK, key=k) if k in gone else next(others)
            for r, k in zip(receipts, keys)
        ]
        return DeleteOutcome(results, [], [k for k in keys if k in gone] + rest.deleted_keys)

    async def _delete_slow(
        self, name: str, receipts: list[str], attempt_ids: Sequence[str] = ()
    ) -> DeleteOutcome:
        async def op(tx: _Tx) -> DeleteOutcome:
            found = await tx.queue(name)
            self._known[name] = (found.id, found.uid)
            decoded = [tx.codec.decode(r, found.uid) for r in receipts]
            leases, tombstones = await tx.lookup(found, decoded)
            results, deleted = decide.apply_deletes(receipts, decoded, leases, tombstones, tx.now)
            if deleted:
                await tx.rows(DELETE_KEYS_SQL, tx.p(found, keys=deleted))
            attempt_counts = []
            for attempt_id in attempt_ids:
                keys: list[int] = []
                if attempt_id:  # an empty id would match every message delivered without one
                    rows = await tx.rows(DELETE_ATTEMPT_SQL, tx.p(found, attempt=attempt_id))
                    keys = sorted(row[0] for row in rows)
                attempt_counts.append((attempt_id, len(keys)))
                deleted.extend(keys)
            if deleted:
                tx.published.add(name)  # in-flight room for waiters held by max_in_flight
            return DeleteOutcome(results, attempt_counts, deleted)

        return await self._run(op)

    # -- update message ------------------------------------------------------------------------

    async def update_message(
        self,
        name: str,
        receipt: str,
        body: bytes | None = None,
        attributes: dict[str, str] | None = None,
        visibility_timeout: float | None = None,
    ) -> UpdatedMessage:
        async def op(tx: _Tx) -> UpdatedMessage:
            found = await tx.queue(name)
            decoded = tx.codec.decode(receipt, found.uid)
            if decoded is None:
                raise LeaseRejected(LeaseStatus.INVALID_RECEIPT)
            key, seq = decoded
            leases, tombstones = await tx.lookup(found, [decoded])
            lease = leases.get(key)
            stored: tuple[bytes, dict[str, str]] = (b"", {})
            if lease is not None:
                row = await tx.row(
                    "SELECT body, attributes FROM messages WHERE key = %(key)b", {"key": key}
                )
                assert row is not None
                stored = (row[0], dict(row[1] or {}))
            lease, new_body, new_attributes = decide.updated_message(
                lease, tombstones.get(key), seq, tx.now, found.config, stored,
                body, attributes, visibility_timeout,
            )
            if visibility_timeout is not None:
                tx.published.add(name)
            await tx.run(
                "UPDATE messages SET body = %(body)b, attributes = %(attributes)b::jsonb,"
                " visible_at = %(visible_at)b, leased = %(leased)b,"
                " receipt_seq = receipt_seq + 1,"
                " attempt_id = CASE WHEN %(clear)b THEN NULL ELSE attempt_id END"
                " WHERE key = %(key)b",
                {
                    "body": new_body,
                    "attributes": _encode_attributes(new_attributes),
                    "visible_at": lease.visible_at,
                    "leased": lease.leased,
                    "clear": lease.clear_attempt,
                    "key": key,
                },
            )
            return UpdatedMessage(key, tx.codec.encode(found.uid, key, seq + 1), lease.visible_at)

        return await self._run(op)

    # -- redrive -----------------------------------------------------------------------------

    async def redrive(
        self,
        name: str,
        destination: str | None = None,
        max_messages: int = 0,
        channel_filter: str = "",
    ) -> int:
        async def op(tx: _Tx) -> int:
            found = await tx.queue(name)
            target = None
            if destination is not None:
                target = await tx.queue(destination, lock="FOR KEY SHARE")
            limit = max_messages if max_messages > 0 else math.inf
            clause = _channel_clause(channel_filter)
            sources: dict[str, _Queue | None] = {}
            moves: list[tuple[_Queue, int]] = []
            cursor: tuple[float, int] | None = None
            page = 1000
            # Collect first, then move: the keyset cursor walks a table that does not move.
            while len(moves) < limit:
                rows = await tx.rows(
                    candidates_sql(clause, after=cursor is not None,
                                   columns="key, visible_at, source_queue"),
                    tx.p(
                        found,
                        limit=page,
                        channel=_channel_param(channel_filter),
                        after_visible_at=cursor[0] if cursor else None,
                        after_key=cursor[1] if cursor else None,
                    ),
                )
                for key, visible_at, source in rows:
                    cursor = (visible_at, key)
                    to = target
                    if to is None and source:
                        if source not in sources:
                            sources[source] = await tx.find_queue(source, "FOR KEY SHARE")
                        to = sources[source]
                    if to is not None:
                        moves.append((to, key))
                        if len(moves) >= limit:
                            break
                if len(rows) < page:
                    break
            if moves:
                await tx.run(
                    REDRIVE_SQL,
                    tx.p(
                        found,
                        keys=[key for _, key in moves],
                        queues=[to.id for to, _ in moves],
                        expires=[decide.redrive_expiry(tx.now, to.config) for to, _ in moves],
                    ),
                )
                tx.published.update(to.name for to, _ in moves)
            return len(moves)

        return await self._run(op)
