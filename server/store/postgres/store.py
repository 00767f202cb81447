"""The Store facade over PostgreSQL: PostgresStore."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.errors import DeadlockDetected, SerializationFailure
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from ...clock import Clock
from ...domain.rules import bytes_reached
from ...domain.types import (
    BodyBatch,
    CountsByState,
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
from ...errors import (
    LeaseqError,
    QueueAlreadyExists,
    QueueInUse,
    QueueNotFound,
    Unavailable,
)
from ...receipts import ReceiptCodec, new_queue_uid
from .. import StoreOpenError
from ..config_rows import config_values
from .connection import (
    DatabaseClock,
    _check_connection,
    _one_line,
    _redacted,
    _unavailable,
)
from .groups import Groups
from .leasing import LeaseOps
from .maintenance import Maintenance
from .notifications import Listener, Notifier
from .queue_infos import QueueInfos
from .receiving import Receives
from .schema import MIGRATIONS, _migrate
from .sending import Sends
from .settings import (
    _CONFIG_FIELDS,
    _SCHEMA_NAME,
    DEFAULT_POOL_MAX,
    DEFAULT_POOL_MIN,
    DEFAULT_SCHEMA,
    DEFAULT_TUNING,
    OPEN_TIMEOUT,
    PLANNER_SETTINGS,
    POOL_TIMEOUT,
    QUEUE_INFO_SECONDS,
    RETRIES,
    Tuning,
    parse_url,
)
from .state import DialectState
from .statements import (
    CUSTOM_PLAN_SQL,
    GENERIC_PLAN_SQL,
    PEEK_KEYS_SQL,
    PURGE_SQL,
    QUEUE_COLUMNS,
    SIZED_COLUMNS,
    STATS_SQL,
    _channel_clause,
    _channel_param,
    peek_sql,
    sweep_sql,
)
from .transaction import _Queue, _Row, _Tx

log = logging.getLogger(__name__)

T = TypeVar("T")

# --- the store --------------------------------------------------------------------------------


class PostgresStore:
    """The Store protocol over PostgreSQL (psycopg 3, an async connection pool).

    Also a change feed (`subscribe`, through the Notifier it owns): see the package docstring,
    Notifications.
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
        tuning: Tuning = DEFAULT_TUNING,
    ) -> None:
        """tuning: the module's constants as this store uses them (tests shorten them)."""
        if not _SCHEMA_NAME.match(schema):
            raise ValueError(f"bad schema name {schema!r}")
        self.conninfo = conninfo
        self.schema = schema
        self.tuning = tuning
        self.sweep_sql = sweep_sql(tuning.sweep_limit)
        self.pool_min = pool_min
        self.pool_max = max(pool_max, pool_min, 1)
        self.pool_timeout = pool_timeout
        self._injected_clock = clock
        self._db_clock = DatabaseClock()
        self.clock: Clock = clock if clock is not None else self._db_clock
        self._pool: AsyncConnectionPool | None = None
        self._codec: ReceiptCodec | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._check_lock = asyncio.Lock()
        self._closing = False
        # name -> (id, uid) of queues this store has seen: the one-statement ack decodes
        # receipts with uid and checks both in the statement (a queue made again differs).
        self._known: dict[str, tuple[int, int]] = {}
        # get_queue's answers, while the listener hears of changes (queue_infos.py).
        self._queue_infos = QueueInfos(QUEUE_INFO_SECONDS)
        self._notifier = Notifier(
            f"leaseq.{schema}", self._queue_infos, lambda: self._pool, self._check_pool, conninfo
        )
        # Pool connections whose session plans generically now (see _plan_mode).
        self._generic: weakref.WeakSet[psycopg.AsyncConnection[Any]] = weakref.WeakSet()
        # The operations on messages, each kind in its module, over this store's pool.
        self._sending = Sends(self)
        self._receiving = Receives(self)
        self._leasing = LeaseOps(self)
        self._maintenance = Maintenance(self)
        self._state = DialectState(self._run)

    @classmethod
    def from_url(
        cls, url: str, clock: Clock | None = None, tuning: Tuning = DEFAULT_TUNING
    ) -> PostgresStore:
        settings = parse_url(url)
        return cls(
            settings.conninfo,
            schema=settings.schema,
            clock=clock,
            pool_min=settings.pool_min,
            pool_max=settings.pool_max,
            pool_timeout=settings.pool_timeout,
            tuning=tuning,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def _connect_kwargs(self) -> dict[str, Any]:
        params = psycopg.conninfo.conninfo_to_dict(self.conninfo)
        options = params.get("options") or ""
        settings = {"search_path": self.schema, **PLANNER_SETTINGS}
        kwargs: dict[str, Any] = {
            "options": " ".join([options, *(f"-c {k}={v}" for k, v in settings.items())]).strip(),  # type: ignore[list-item]
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
                key = await _migrate(conn, self.schema, self.tuning.migrations or MIGRATIONS)
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
        self._check_lock = asyncio.Lock()
        self._tasks = [
            *self._notifier.start(kwargs),
            asyncio.create_task(self._maintenance.maintain(), name="leaseq-pg-maintenance"),
            asyncio.create_task(self._maintenance.watch_statistics(), name="leaseq-pg-statistics"),
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
        self._notifier.closing()
        for task in others:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        for task in notifier:
            try:
                await asyncio.wait_for(task, 2.0)
            except (TimeoutError, Exception):
                pass
        self._tasks = []
        self._pool = None
        await pool.close()

    @property
    def channel(self) -> str:
        return self._notifier.channel

    @property
    def listening(self) -> asyncio.Event:
        """Set while the LISTEN connection is up (tests wait for it)."""
        return self._notifier.listening

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """The store's change feed (base.ChangeFeed): listener(queue) when another replica
        changed queue so that a waiting receiver may make progress, listener(None) when changes
        may have been missed; on the loop that opened the store. Returns the unsubscribe."""
        return self._notifier.subscribe(listener)

    def _publish(self, queues: Iterable[str]) -> None:
        self._notifier.publish(queues)

    def _fire(self, queue: str | None) -> None:
        self._notifier.fire(queue)

    def token_key(self) -> bytes:
        return self._codec.derive(b"leaseq page tokens")  # type: ignore[union-attr]  # set at open

    # -- maintenance.py ----------------------------------------------------------------------

    async def refresh_statistics(self) -> bool:
        return await self._maintenance.refresh_statistics()

    async def housekeep(self) -> int:
        return await self._maintenance.housekeep()

    # -- running operations ------------------------------------------------------------------

    async def _run(self, fn: Callable[[_Tx], Awaitable[T]], one_read: bool = False) -> T:
        """Run fn in one transaction; publish what it asked to after COMMIT. Connection trouble
        becomes Unavailable, after retries where they are safe (see the module docstring).

        one_read: fn runs one read-only statement, which is a transaction by itself: no BEGIN
        and COMMIT around it (two round trips of three; the service reads the queue's
        configuration so before every send and receive)."""
        failure: BaseException | None = None
        for _attempt in range(RETRIES + 1):
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
                        tx = _Tx(conn, codec, clock_now, self.sweep_sql)
                        result = await fn(tx)
                    else:
                        if conn in self._generic:
                            await self._plan_mode(conn, False)
                        async with conn.transaction():
                            tx = _Tx(conn, codec, clock_now, self.sweep_sql)
                            result = await fn(tx)
                            committing = True
                self._notifier.publish(tx.published)
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
        for _attempt in range(RETRIES + 1):
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
        await self._statement(self.sweep_sql, {"queue": queue_id, "now": now})

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
                (name, new_queue_uid(), now, *config_values(config)),
            )
            if await cur.fetchone() is None:
                # Another replica created it meanwhile (its INSERT committed first).
                raced = await tx.find_queue(name)
                if raced is not None and raced.config == config:
                    return raced.info()
                raise QueueAlreadyExists(name)
            await tx.conn.execute(*self._notifier.config_notify_sql(name))
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
                (*config_values(config), found.id),
            )
            await tx.conn.execute(*self._notifier.config_notify_sql(name))
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

    async def queue_state(self, name: str, namespace: str) -> dict[str, str]:
        return await self._state.queue_state(name, namespace)

    async def update_queue_state(
        self, name: str, namespace: str, changes: Mapping[str, str | None], replace: bool = False
    ) -> dict[str, str]:
        return await self._state.update_queue_state(name, namespace, changes, replace)

    async def settings(self, namespace: str) -> dict[str, str]:
        return await self._state.settings(namespace)

    async def update_settings(
        self, namespace: str, changes: Mapping[str, str | None], replace: bool = False
    ) -> dict[str, str]:
        return await self._state.update_settings(namespace, changes, replace)

    async def delete_queue(self, name: str) -> None:
        async def op(tx: _Tx) -> None:
            # Deleting the row first waits for the senders holding it (FOR KEY SHARE); then the
            # statements below see what they wrote.
            cur = await tx.conn.execute("DELETE FROM queues WHERE name = %s RETURNING id", (name,))
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
                "messages",
                "queue_counters",
                "channel_counters",
                "dedup",
                "attempts",
                "queue_metadata",
                "queue_state",
            ):
                await tx.conn.execute(f"DELETE FROM {table} WHERE queue = %s", (queue_id,))
            await tx.conn.execute(*self._notifier.config_notify_sql(name))
            tx.published.add(name)

        await self._changing_queue(name, op)

    async def purge_queue(self, name: str) -> int:
        async def op(tx: _Tx) -> int:
            found = await tx.queue(name)
            await Groups(tx, found).purge()
            row = await tx.row(PURGE_SQL, tx.p(found))
            assert row is not None
            tx.published.add(name)
            return row[0]  # type: ignore[no-any-return]

        return await self._run(op)

    async def stats(self, name: str) -> QueueStats:
        async def op(tx: _Tx) -> QueueStats:
            found = await tx.queue(name)
            held: dict[str, int] = {}  # messages by channel, expired ones not swept included
            unavailable: dict[str, tuple[int, int]] = {}  # leased, delayed
            unswept: dict[str, int] = {}  # expired, not removed yet (past SWEEP_LIMIT)
            oldest: float | None = None
            dead_lettered = expired = deleted = groups = blocked = 0
            for kind, channel, a, b, c, enqueued_at in await tx.rows(STATS_SQL, tx.p(found)):
                if kind == 0:
                    held[channel] = a
                elif kind == 1:
                    unavailable[channel] = (a, b)
                elif kind == 2:
                    unswept[channel] = a
                elif kind == 3:
                    oldest = enqueued_at
                elif kind == 5:
                    groups, blocked = a, b
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
                        name,
                        channel,
                        -visible,
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
                groups=groups,
                blocked_groups=blocked,
            )

        return await self._run(op)

    # -- sending.py ----------------------------------------------------------------------

    async def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        return await self._sending.send(name, messages)

    async def send_batch(self, name: str, batch: BodyBatch) -> SentBatch:
        return await self._sending.send_batch(name, batch)

    async def send_bodies(self, name: str, bodies: list[bytes]) -> list[str]:
        return await self._sending.send_bodies(name, bodies)

    # -- receiving.py ----------------------------------------------------------------------

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: float | None = None,
        channel_filter: str = "",
        attempt_id: str = "",
        max_bytes: int | None = None,
    ) -> ReceiveOutcome:
        return await self._receiving.receive(
            name, max_messages, visibility_timeout, channel_filter, attempt_id, max_bytes
        )

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
                    include_leased,
                    include_delayed,
                    clause,
                    after=after is not None,
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
            rows = await tx.rows(PEEK_KEYS_SQL, {"keys": [key for key, _ in chosen]})  # type: ignore[assignment]
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

    # -- leasing.py ----------------------------------------------------------------------

    async def change_visibility(
        self, name: str, changes: list[VisibilityChange]
    ) -> list[LeaseResult]:
        return await self._leasing.change_visibility(name, changes)

    async def delete(
        self, name: str, receipts: list[str], attempt_ids: Sequence[str] = ()
    ) -> DeleteOutcome:
        return await self._leasing.delete(name, receipts, attempt_ids)

    async def dead_letter(self, name: str, receipts: list[str], reason: str) -> DeadLetterOutcome:
        return await self._leasing.dead_letter(name, receipts, reason)

    async def update_message(
        self,
        name: str,
        receipt: str,
        body: bytes | None = None,
        attributes: dict[str, str] | None = None,
        visibility_timeout: float | None = None,
    ) -> UpdatedMessage:
        return await self._leasing.update_message(
            name, receipt, body, attributes, visibility_timeout
        )

    async def redrive(
        self,
        name: str,
        destination: str | None = None,
        max_messages: int = 0,
        channel_filter: str = "",
    ) -> int:
        return await self._leasing.redrive(name, destination, max_messages, channel_filter)
