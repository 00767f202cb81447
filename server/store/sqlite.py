"""The SQLite store: the embedded default backend, one durable file.

Semantics are base.py's, to the letter; this module only decides how to get them from SQLite
fast and durably.

Threading and group commit
--------------------------
sqlite3 calls block, and the store must never block the asyncio event loop, so one dedicated
thread (`_Writer`) owns the only connection. An async method turns its work into a function of
the connection, queues it and awaits a future. The thread takes every operation waiting (up to a
bound), runs them all in ONE transaction, each inside its own SAVEPOINT so that a failing
operation rolls back only itself, COMMITs once and then resolves the futures. With
``synchronous=FULL`` the COMMIT is the fsync, so sixteen concurrent sends cost about one fsync
instead of sixteen, and every future resolves only after its work is on disk. Reads go through
the same thread: every operation on a queue starts with the expiry sweep (a write) anyway, and one
thread means no locking questions at all.

Schema
------
- ``queues``: a small integer id (what the other tables reference: compact index entries; never
  reused thanks to AUTOINCREMENT, so stale rows of a deleted queue can never be mistaken for a
  new queue's), the name, the receipt uid, one column per QueueConfig field and the counters.
- ``messages``: ``key`` is the INTEGER PRIMARY KEY AUTOINCREMENT, i.e. the rowid: "the message of
  this receipt" is a primary key lookup, and keys are never reused, so a receipt of a deleted
  message can never match a newer message. Indexes:
    messages_visible (queue, visible_at, key)     receive / peek / redrive: an index range scan in
                                                  delivery order that stops at visible_at <= now, so
                                                  leased messages at the head are never scanned
    messages_expiry  (queue, expires_at)          the expiry sweep before every operation
    messages_leased  (queue, visible_at) WHERE leased = 1
                                                  live leases (in-flight limit, retry_at)
    messages_attempt (queue, attempt_id) WHERE attempt_id IS NOT NULL
                                                  receive attempts, delete by attempt id
    messages_channel (queue, channel, visible_at) WHERE channel != ''
                                                  exact channel filters; partial, so queues that
                                                  do not use channels pay nothing for it
- ``tombstones`` (key, queue, receipt_seq, deleted_at), ``dedup`` and ``attempts``: rows whose
  meaning is bounded by a time condition checked on every read; a periodic housekeeping step
  deletes the stale ones, so its timing is invisible.
- ``meta``: the schema version and the receipt signing key (kept in the file, so receipts stay
  valid across restarts).

One store per file
------------------
Only this store's writer thread writes the file (other processes may read it, WAL allows that),
which lets the writer keep a little state of its own: an upper bound on each queue's live
leases, so that a receive far below max_in_flight skips counting them (see
`_Tx._delivery_limit`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from ..clock import Clock, SystemClock
from ..errors import (
    InvalidArgument,
    LeaseRejected,
    OverLimit,
    QueueAlreadyExists,
    QueueInUse,
    QueueNotFound,
    Unavailable,
)
from ..receipts import ReceiptCodec, new_queue_uid, new_signing_key
from .base import (
    TOMBSTONE_SECONDS,
    CountsByState,
    DeleteOutcome,
    DeliveredMessage,
    LeaseResult,
    LeaseStatus,
    MessageState,
    NewMessage,
    PeekCursor,
    PeekedMessage,
    PeekPage,
    QueueConfig,
    QueueInfo,
    QueueStats,
    ReceiveOutcome,
    SendOutcome,
    UpdatedMessage,
    VisibilityChange,
    fence,
    message_size,
    message_state,
)

__all__ = ["SqliteStore"]

T = TypeVar("T")

SCHEMA_VERSION = 1

# A group stops growing at this many operations or this much weight (messages or entries), so
# one commit never holds back the callers at the front of the line for too long.
MAX_GROUP_OPS = 512
MAX_GROUP_WEIGHT = 20_000

# Stale tombstone/dedup/attempt rows are removed at most this often (store clock), in slices of
# HOUSEKEEPING_ROWS so that one slice never stalls the writer.
HOUSEKEEPING_SECONDS = 60.0
HOUSEKEEPING_ROWS = 5_000

# Candidates read per statement by a receive on a queue with a dead letter queue (see _pick).
PICK_READ_AHEAD = 64

# Keys per `IN (...)` list: far below SQLite's variable limit, and a handful of distinct
# statement shapes for the statement cache.
IN_CHUNK = 500

# One column per QueueConfig field, in the dataclass's order.
_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(QueueConfig))

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS queues (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    name                TEXT NOT NULL UNIQUE,
    uid                 INTEGER NOT NULL,
    create_time         REAL NOT NULL,
    visibility_timeout  REAL NOT NULL,
    receive_wait_time   REAL NOT NULL,
    message_retention   REAL NOT NULL,
    default_delay       REAL NOT NULL,
    max_message_bytes   INTEGER NOT NULL,
    dead_letter_queue   TEXT,
    max_delivery_count  INTEGER,
    max_in_flight       INTEGER NOT NULL,
    dedup_window        REAL NOT NULL,
    dead_lettered_total INTEGER NOT NULL DEFAULT 0,
    expired_total       INTEGER NOT NULL DEFAULT 0,
    deleted_total       INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS messages (
    key            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue          INTEGER NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    message_id     TEXT NOT NULL,
    body           BLOB NOT NULL,
    attributes     TEXT,              -- compact JSON object, NULL when there are none
    channel        TEXT NOT NULL,
    enqueued_at    REAL NOT NULL,
    expires_at     REAL NOT NULL,
    visible_at     REAL NOT NULL,
    leased         INTEGER NOT NULL DEFAULT 0,
    delivery_count INTEGER NOT NULL DEFAULT 0,
    receipt_seq    INTEGER NOT NULL DEFAULT 0,
    last_error     TEXT NOT NULL DEFAULT '',
    attempt_id     TEXT,
    source_queue   TEXT
);
CREATE INDEX IF NOT EXISTS messages_visible ON messages (queue, visible_at, key);
CREATE INDEX IF NOT EXISTS messages_expiry ON messages (queue, expires_at);
CREATE INDEX IF NOT EXISTS messages_leased ON messages (queue, visible_at) WHERE leased = 1;
CREATE INDEX IF NOT EXISTS messages_attempt ON messages (queue, attempt_id)
    WHERE attempt_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_channel ON messages (queue, channel, visible_at)
    WHERE channel != '';

-- No foreign key: tombstones may outlive their queue by up to TOMBSTONE_SECONDS. Harmless, as
-- queue ids are never reused, and it spares deleting a queue a scan of this table.
CREATE TABLE IF NOT EXISTS tombstones (
    key         INTEGER PRIMARY KEY,
    queue       INTEGER NOT NULL,
    receipt_seq INTEGER NOT NULL,
    deleted_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tombstones_age ON tombstones (deleted_at);

CREATE TABLE IF NOT EXISTS dedup (
    queue      INTEGER NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    dedup_id   TEXT NOT NULL,
    message_id TEXT NOT NULL,
    until      REAL NOT NULL,
    PRIMARY KEY (queue, dedup_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dedup_age ON dedup (until);

CREATE TABLE IF NOT EXISTS attempts (
    queue      INTEGER NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    attempt_id TEXT NOT NULL,
    until      REAL NOT NULL,
    PRIMARY KEY (queue, attempt_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS attempts_age ON attempts (until);
"""

# --- statements used on hot paths (module constants so the query-plan tests check these) ------

QUEUE_COLUMNS = (
    "id, name, uid, create_time, "
    + ", ".join(_CONFIG_FIELDS)
    + ", dead_lettered_total, expired_total, deleted_total"
)
QUEUE_BY_NAME_SQL = f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name = ?"

SWEEP_SQL = "DELETE FROM messages WHERE queue = ? AND expires_at <= ?"

INSERT_MESSAGE_SQL = (
    "INSERT INTO messages (queue, message_id, body, attributes, channel, enqueued_at,"
    " expires_at, visible_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)

# Live leases of a queue, read from the partial index only.
IN_FLIGHT_SQL = (
    "SELECT COUNT(*), MIN(visible_at) FROM messages"
    " WHERE queue = ? AND leased = 1 AND visible_at > ?"
)

NEXT_VISIBLE_SQL = "SELECT MIN(visible_at) FROM messages WHERE queue = ? AND visible_at > ?"

DELIVER_SQL = (
    "UPDATE messages SET delivery_count = delivery_count + 1, receipt_seq = receipt_seq + 1,"
    " visible_at = ?, leased = ?, attempt_id = ? WHERE key = ?"
)


class _Row(NamedTuple):
    """A message as the read paths select it."""

    key: int
    message_id: str
    body: bytes
    attributes: str | None
    channel: str
    enqueued_at: float
    expires_at: float
    visible_at: float
    leased: int
    delivery_count: int
    receipt_seq: int
    last_error: str
    source_queue: str | None


ROW_COLUMNS = ", ".join(_Row._fields)

# The unary + keeps the planner off messages_leased (which would scan every live lease of the
# queue) and on messages_attempt (only this attempt's messages).
ATTEMPT_LEASES_SQL = (
    f"SELECT {ROW_COLUMNS} FROM messages WHERE queue = ? AND attempt_id = ?"
    " AND +leased = 1 AND +visible_at > ? ORDER BY key"
)


def candidates_sql(columns: str, channel_clause: str = "", after: bool = False) -> str:
    """Visible messages of a queue in delivery order: an index range scan on messages_visible
    (or messages_channel for an exact channel), ending at visible_at <= now. `after` adds the
    keyset cursor of the previous page."""
    cursor = " AND (visible_at, key) > (?, ?)" if after else ""
    return (
        f"SELECT {columns} FROM messages WHERE queue = ? AND visible_at <= ?{channel_clause}"
        f"{cursor} ORDER BY visible_at, key LIMIT ?"
    )


def leases_by_key_sql(count: int) -> str:
    """Lease state of messages by key: primary key lookups. The queue is checked in Python, as a
    `queue = ?` term tempts the planner into scanning an index of the whole queue instead."""
    marks = ", ".join("?" * count)
    return (
        "SELECT key, queue, receipt_seq, leased, visible_at, last_error FROM messages"
        f" WHERE key IN ({marks})"
    )


def _channel_clause(channel_filter: str) -> tuple[str, tuple[Any, ...]]:
    """SQL and parameters for base.channel_matches. An exact channel repeats `channel != ''` so
    that the planner may use the partial messages_channel index (it cannot see that the bound
    value is not empty)."""
    if not channel_filter or channel_filter == "*":
        return "", ()
    if channel_filter.endswith("*"):
        prefix = channel_filter[:-1]
        return " AND substr(channel, 1, ?) = ?", (len(prefix), prefix)
    return " AND channel = ? AND channel != ''", (channel_filter,)


def _chunks(items: Sequence[T], size: int = IN_CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _encode_attributes(attributes: dict[str, str]) -> str | None:
    if not attributes:
        return None
    return json.dumps(attributes, separators=(",", ":"), ensure_ascii=False)


def _decode_attributes(text: str | None) -> dict[str, str]:
    return json.loads(text) if text else {}


# --- the writer thread: one connection, group commit ----------------------------------------


@dataclass(eq=False)
class _Op:
    fn: Callable[[sqlite3.Connection], Any] | None  # None: the stop marker
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    weight: int = 1


_Outcome = tuple[_Op, Any, BaseException | None]


class _TransactionLost(Exception):
    """SQLite rolled the whole transaction back by itself (I/O error, disk full...)."""


def _unavailable(error: BaseException) -> Unavailable:
    failure = Unavailable(f"SQLite store failed: {error}")
    failure.__cause__ = error
    return failure


def _settle(items: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    """Runs on the event loop: hand each caller its result. A caller that gave up (cancelled)
    has a done future and is skipped."""
    for future, result, error in items:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


class _Writer:
    """The one thread that owns the SQLite connection and commits queued operations in groups.

    Operations run in submission order. Their futures resolve only after the COMMIT of their
    group, i.e. once the work is durable.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._inbox: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        # Guards `_accepting` together with the put, so that nothing can be queued after the
        # thread's final drain (such an operation would wait forever).
        self._lock = threading.Lock()
        self._accepting = False
        self._thread = threading.Thread(target=self._main, name="leaseq-sqlite-writer", daemon=True)
        self.commits = 0
        self.operations = 0

    # -- event loop side ---------------------------------------------------------------------

    async def start(self, setup: Callable[[sqlite3.Connection], T]) -> T:
        """Start the thread with `setup` as its first operation. Queued before the thread runs,
        so that a failure to open the file reaches this caller as it is."""
        self._accepting = True
        setup_done = self._enqueue(setup, 1)
        self._thread.start()
        return await setup_done

    async def submit(self, fn: Callable[[sqlite3.Connection], T], weight: int = 1) -> T:
        return await self._enqueue(fn, weight)

    def _enqueue(self, fn: Callable[[sqlite3.Connection], T], weight: int) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if not self._accepting:
                raise Unavailable("the SQLite store is closed")
            self._inbox.put(_Op(fn, future, loop, max(1, weight)))
        return future

    async def stop(self) -> None:
        """Finish every operation queued so far, close the connection, end the thread."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if not self._accepting:
                return
            self._accepting = False
            self._inbox.put(_Op(None, done, loop))
        await done
        # The thread resolved `done` as its very last action: this join does not wait.
        self._thread.join()

    # -- writer thread side ------------------------------------------------------------------

    def _main(self) -> None:
        stop: _Op | None = None
        error: BaseException = Unavailable("the SQLite store is closed")
        try:
            conn = self._connect()
        except Exception as exc:  # e.g. unwritable path: every waiting caller learns why
            error = exc
        else:
            try:
                stop = self._serve(conn)
            except BaseException as exc:  # a bug here: fail the callers rather than hang them
                error = _unavailable(exc)
            finally:
                conn.close()
        self._shut_down(error)
        if stop is not None:
            self._resolve([(stop, None, None)])

    def _shut_down(self, error: BaseException) -> None:
        with self._lock:
            self._accepting = False
            leftovers: list[_Outcome] = []
            while True:
                try:
                    op = self._inbox.get_nowait()
                except queue.Empty:
                    break
                leftovers.append((op, None, None if op.fn is None else error))
        self._resolve(leftovers)

    def _serve(self, conn: sqlite3.Connection) -> _Op:
        while True:
            group, stop = self._collect()
            if group:
                self._resolve(self._run_group(conn, group))
            if stop is not None:
                return stop

    def _collect(self) -> tuple[list[_Op], _Op | None]:
        """Block for one operation, then take whatever else is already waiting."""
        first = self._inbox.get()
        if first.fn is None:
            return [], first
        group, weight = [first], first.weight
        while len(group) < MAX_GROUP_OPS and weight < MAX_GROUP_WEIGHT:
            try:
                op = self._inbox.get_nowait()
            except queue.Empty:
                break
            if op.fn is None:
                return group, op
            group.append(op)
            weight += op.weight
        return group, None

    def _run_group(self, conn: sqlite3.Connection, group: list[_Op]) -> list[_Outcome]:
        # A caller cancelled before its turn does not want the side effects (e.g. leases that
        # nobody would receive). Reading the flag from this thread is a plain attribute read.
        ops = [op for op in group if not op.future.cancelled()]
        if not ops:
            return []
        try:
            conn.execute("BEGIN IMMEDIATE")
            outcomes = [self._run_one(conn, op) for op in ops]
            conn.execute("COMMIT")
        except (sqlite3.Error, _TransactionLost) as exc:
            # Nothing of this group reached the disk, including the operations that had
            # succeeded: every caller hears so (one exception object each: they get raised in
            # different tasks, and raising mutates the traceback).
            self._abandon(conn)
            cause = exc.__cause__ if isinstance(exc, _TransactionLost) and exc.__cause__ else exc
            return [(op, None, _unavailable(cause)) for op in ops]
        self.commits += 1
        self.operations += sum(1 for _, _, error in outcomes if error is None)
        return outcomes

    @staticmethod
    def _run_one(conn: sqlite3.Connection, op: _Op) -> _Outcome:
        assert op.fn is not None
        conn.execute("SAVEPOINT op")
        try:
            result = op.fn(conn)
        except Exception as exc:
            _Writer._roll_back_one(conn, exc)
            # OperationalError is the file's trouble (full, I/O, locked), not the caller's:
            # UNAVAILABLE tells a client that a retry later may work.
            error = _unavailable(exc) if isinstance(exc, sqlite3.OperationalError) else exc
            return (op, None, error)
        conn.execute("RELEASE op")
        return (op, result, None)

    @staticmethod
    def _roll_back_one(conn: sqlite3.Connection, cause: Exception) -> None:
        """Undo one failed operation and nothing else: its neighbours in the group keep their
        work. Some SQLite errors (I/O, disk full) roll back the whole transaction by themselves;
        then there is no savepoint left to return to and the group is lost."""
        try:
            conn.execute("ROLLBACK TO op")
            conn.execute("RELEASE op")
        except sqlite3.Error:
            raise _TransactionLost() from cause  # the error that cost the transaction
        if not conn.in_transaction:
            raise _TransactionLost() from cause

    @staticmethod
    def _abandon(conn: sqlite3.Connection) -> None:
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the next BEGIN reports whatever is wrong with the file

    @staticmethod
    def _resolve(outcomes: Iterable[_Outcome]) -> None:
        """One call_soon_threadsafe per event loop and group, not one per operation."""
        by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        for op, result, error in outcomes:
            by_loop.setdefault(op.loop, []).append((op.future, result, error))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, items)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                pass


# --- one operation's view of the database ---------------------------------------------------


@dataclass(frozen=True)
class _Queue:
    id: int
    name: str
    uid: int
    create_time: float
    config: QueueConfig
    dead_lettered_total: int
    expired_total: int
    deleted_total: int

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> _Queue:
        n = len(_CONFIG_FIELDS)
        config = QueueConfig(**dict(zip(_CONFIG_FIELDS, row[4 : 4 + n])))
        dead_lettered, expired, deleted = row[4 + n : 7 + n]
        return cls(row[0], row[1], row[2], row[3], config, dead_lettered, expired, deleted)

    def info(self) -> QueueInfo:
        return QueueInfo(self.name, self.config, self.create_time)


@dataclass
class _Lease:
    """The fencing-relevant state of one message, updated as a request's entries are applied in
    order (so two entries for the same message see each other's effect)."""

    key: int
    receipt_seq: int
    leased: bool
    visible_at: float
    last_error: str
    clear_attempt: bool = False

    def live(self, now: float) -> bool:
        return self.leased and self.visible_at > now


@dataclass(frozen=True)
class _Tombstone:
    receipt_seq: int
    deleted_at: float


def _fence(
    lease: _Lease | None, tombstone: _Tombstone | None, seq: int, now: float
) -> LeaseStatus | None:
    """base.fence over this module's rows."""
    return fence(
        seq,
        None if lease is None else lease.receipt_seq,
        None if tombstone is None else (tombstone.receipt_seq, tombstone.deleted_at),
        now,
    )


def _lease_result(receipt: str, status: LeaseStatus, key: int) -> LeaseResult:
    """A result naming the message's key, except for a receipt that proved not to be a real one."""
    return LeaseResult(receipt, status, key=None if status is LeaseStatus.INVALID_RECEIPT else key)


def _state(row: _Row, now: float) -> MessageState:
    return message_state(row.visible_at, row.leased, now)


class _Tx:
    """One operation: the connection (inside the group's transaction, inside this operation's
    savepoint), the instant `now` read once, the receipt codec and the store's lease ceilings
    (see `_delivery_limit`). Runs on the writer thread."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        now: float,
        codec: ReceiptCodec,
        lease_ceilings: dict[int, int],
    ) -> None:
        self.conn = conn
        self.now = now
        self.codec = codec
        self.lease_ceilings = lease_ceilings

    # -- queues ------------------------------------------------------------------------------

    def find_queue(self, name: str) -> _Queue | None:
        row = self.conn.execute(QUEUE_BY_NAME_SQL, (name,)).fetchone()
        return None if row is None else _Queue.from_row(row)

    def queue(self, name: str) -> _Queue:
        """The queue, after removing its expired messages (base.py: before every operation)."""
        found = self.find_queue(name)
        if found is None:
            raise QueueNotFound(name)
        expired = self.conn.execute(SWEEP_SQL, (found.id, self.now)).rowcount
        if expired <= 0:
            return found
        self.conn.execute(
            "UPDATE queues SET expired_total = expired_total + ? WHERE id = ?", (expired, found.id)
        )
        return dataclasses.replace(found, expired_total=found.expired_total + expired)

    def _check_dead_letter_queue(self, name: str, config: QueueConfig) -> None:
        dlq = config.dead_letter_queue
        if not dlq:
            return
        if dlq == name:
            raise InvalidArgument(
                "config.dead_letter_queue", "a queue cannot be its own dead letter queue"
            )
        if self.find_queue(dlq) is None:
            raise InvalidArgument("config.dead_letter_queue", f"queue {dlq!r} does not exist")

    def create_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        existing = self.find_queue(name)
        if existing is not None:
            if existing.config == config:
                return existing.info()
            raise QueueAlreadyExists(name)
        self._check_dead_letter_queue(name, config)
        columns = ", ".join(("name", "uid", "create_time", *_CONFIG_FIELDS))
        marks = ", ".join("?" * (3 + len(_CONFIG_FIELDS)))
        values = (name, new_queue_uid(), self.now, *dataclasses.astuple(config))
        self.conn.execute(f"INSERT INTO queues ({columns}) VALUES ({marks})", values)
        return QueueInfo(name, config, self.now)

    def get_queue(self, name: str) -> QueueInfo:
        found = self.find_queue(name)
        if found is None:
            raise QueueNotFound(name)
        return found.info()

    def list_queues(self, prefix: str, after: str | None, limit: int) -> list[QueueInfo]:
        rows = self.conn.execute(
            f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name >= ? AND substr(name, 1, ?) = ?"
            " AND name > ? ORDER BY name LIMIT ?",
            (prefix, len(prefix), prefix, after or "", max(limit, 0)),
        ).fetchall()
        return [_Queue.from_row(row).info() for row in rows]

    def update_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        found = self.queue(name)
        self._check_dead_letter_queue(name, config)
        assignments = ", ".join(f"{field} = ?" for field in _CONFIG_FIELDS)
        values = (*dataclasses.astuple(config), found.id)
        self.conn.execute(f"UPDATE queues SET {assignments} WHERE id = ?", values)
        return QueueInfo(name, config, found.create_time)

    def delete_queue(self, name: str) -> None:
        found = self.find_queue(name)
        if found is None:
            raise QueueNotFound(name)
        user = self.conn.execute(
            "SELECT name FROM queues WHERE dead_letter_queue = ? AND id != ? ORDER BY name LIMIT 1",
            (name, found.id),
        ).fetchone()
        if user is not None:
            raise QueueInUse(name, user[0])
        # ON DELETE CASCADE removes its messages, dedup and attempt rows in the same statement.
        self.conn.execute("DELETE FROM queues WHERE id = ?", (found.id,))

    def purge_queue(self, name: str) -> int:
        found = self.queue(name)
        return self.conn.execute("DELETE FROM messages WHERE queue = ?", (found.id,)).rowcount

    def stats(self, name: str) -> QueueStats:
        found = self.queue(name)
        now = self.now
        rows = self.conn.execute(
            "SELECT channel, SUM(visible_at <= ?), SUM(visible_at > ? AND leased = 1),"
            " SUM(visible_at > ? AND leased = 0),"
            " MIN(CASE WHEN visible_at <= ? THEN enqueued_at END)"
            " FROM messages WHERE queue = ? GROUP BY channel",
            (now, now, now, now, found.id),
        ).fetchall()
        channels = {ch: CountsByState(v, l, d) for ch, v, l, d, _ in rows}
        oldest = min((enq for *_, enq in rows if enq is not None), default=None)
        return QueueStats.from_channels(
            channels,
            oldest,
            now,
            dead_lettered_total=found.dead_lettered_total,
            expired_total=found.expired_total,
            deleted_total=found.deleted_total,
        )

    # -- send --------------------------------------------------------------------------------

    def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        found = self.queue(name)
        config, now = found.config, self.now
        known = self._live_dedup(found, {m.dedup_id for m in messages if m.dedup_id})
        outcomes: list[SendOutcome] = []
        rows: list[tuple[Any, ...]] = []
        records: list[tuple[Any, ...]] = []
        for m in messages:
            if m.dedup_id and m.dedup_id in known:
                outcomes.append(SendOutcome(known[m.dedup_id], duplicate=True))
                continue
            message_id = os.urandom(16).hex()
            delay = config.default_delay if m.delay is None else m.delay
            ttl = config.message_retention if m.ttl is None else m.ttl
            rows.append(
                (found.id, message_id, m.body, _encode_attributes(m.attributes), m.channel,
                 now, now + ttl, now + delay)
            )
            outcomes.append(SendOutcome(message_id))
            if m.dedup_id:
                # A repeat later in this batch is a duplicate whatever the window (base.py)...
                known[m.dedup_id] = message_id
                # ...but a zero window leaves no record: now < now + 0 never holds.
                if config.dedup_window > 0:
                    records.append((found.id, m.dedup_id, message_id, now + config.dedup_window))
        self.conn.executemany(INSERT_MESSAGE_SQL, rows)
        if records:
            self.conn.executemany(
                "INSERT OR REPLACE INTO dedup (queue, dedup_id, message_id, until)"
                " VALUES (?, ?, ?, ?)",
                records,
            )
        return outcomes

    def _live_dedup(self, found: _Queue, dedup_ids: set[str]) -> dict[str, str]:
        """dedup_id -> original message_id, for the ids still inside their window."""
        known: dict[str, str] = {}
        for chunk in _chunks(sorted(dedup_ids)):
            marks = ", ".join("?" * len(chunk))
            known.update(
                self.conn.execute(
                    "SELECT dedup_id, message_id FROM dedup"
                    f" WHERE queue = ? AND dedup_id IN ({marks}) AND until > ?",
                    (found.id, *chunk, self.now),
                ).fetchall()
            )
        return known

    # -- receive -----------------------------------------------------------------------------

    def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: float | None,
        channel_filter: str,
        attempt_id: str,
    ) -> ReceiveOutcome:
        found = self.queue(name)
        timeout = (
            found.config.visibility_timeout if visibility_timeout is None else visibility_timeout
        )
        if attempt_id:
            replay = self._replay_attempt(found, attempt_id)
            if replay is not None:
                return self._outcome(found, replay)
        limit = self._delivery_limit(found, max_messages, timeout)
        picked = self._pick(found, limit, channel_filter)
        delivered = self._deliver(found, picked, timeout, attempt_id)
        if timeout > 0:
            self.lease_ceilings[found.id] += len(delivered)
        if attempt_id and delivered:
            self.conn.execute(
                "INSERT OR REPLACE INTO attempts (queue, attempt_id, until) VALUES (?, ?, ?)",
                (found.id, attempt_id, self.now + timeout),
            )
        return self._outcome(found, delivered)

    def _replay_attempt(self, found: _Queue, attempt_id: str) -> list[DeliveredMessage] | None:
        """base.py's attempt cases a (the live leases again) and b (nothing); None for c."""
        rows = self.conn.execute(ATTEMPT_LEASES_SQL, (found.id, attempt_id, self.now)).fetchall()
        if rows:
            return [self._delivered(found, _Row(*row)) for row in rows]
        record = self.conn.execute(
            "SELECT 1 FROM attempts WHERE queue = ? AND attempt_id = ? AND until > ?",
            (found.id, attempt_id, self.now),
        ).fetchone()
        return [] if record is not None else None

    def _delivery_limit(self, found: _Queue, max_messages: int, timeout: float) -> int:
        """How many messages this receive may lease (base.py's in-flight limit).

        Counting live leases walks the partial index over every one of them: about 15 ms at
        120,000. So the store keeps a ceiling per queue: the last exact count plus every lease
        granted since. Only a delivery makes a new lease, and leases only end, so the ceiling
        never falls below the true count (a rolled-back receive leaves it too high, which is
        merely cautious). While ceiling + max_messages fits under max_in_flight, no count is
        needed; near the limit the count is exact, as base.py requires.
        """
        if timeout <= 0:
            return max_messages  # no lease, no limit
        limit = found.config.max_in_flight
        ceiling = self.lease_ceilings.get(found.id)
        if ceiling is None or ceiling + max_messages > limit:
            in_flight = self.conn.execute(IN_FLIGHT_SQL, (found.id, self.now))
            ceiling, earliest_end = in_flight.fetchone()
            if ceiling >= limit:
                raise OverLimit(found.name, limit, retry_at=earliest_end)
            self.lease_ceilings[found.id] = ceiling
        return min(max_messages, limit - ceiling)

    def _pick(self, found: _Queue, limit: int, channel_filter: str) -> list[_Row]:
        """Up to `limit` messages to deliver, in delivery order, moving the ones that reached
        max_delivery_count to the dead letter queue on the way. Nothing is updated until the
        scan is over, so the keyset cursor sees a table that does not move under it."""
        dead_letter_queue = self._dead_letter_target(found)
        clause, clause_params = _channel_clause(channel_filter)
        deliver: list[_Row] = []
        dead: list[_Row] = []
        cursor: tuple[float, int] | None = None
        while len(deliver) < limit:
            want = limit - len(deliver)
            # With a DLQ some candidates may be moved rather than delivered: read ahead, so a
            # run of exhausted messages costs a few statements, not one each.
            page = want if dead_letter_queue is None else max(want, PICK_READ_AHEAD)
            rows = self._candidates(found, clause, clause_params, cursor, page)
            for row in rows:
                if len(deliver) == limit:
                    break
                if dead_letter_queue is not None and self._exhausted(found, row):
                    dead.append(row)
                else:
                    deliver.append(row)
                cursor = (row.visible_at, row.key)
            if len(rows) < page:
                break
        if dead:
            assert dead_letter_queue is not None
            self._move_to_dead_letter_queue(found, dead_letter_queue, dead)
        return deliver

    def _candidates(
        self,
        found: _Queue,
        clause: str,
        clause_params: tuple[Any, ...],
        cursor: tuple[float, int] | None,
        limit: int,
    ) -> list[_Row]:
        sql = candidates_sql(ROW_COLUMNS, clause, after=cursor is not None)
        params = (found.id, self.now, *clause_params, *(cursor or ()), limit)
        return [_Row(*row) for row in self.conn.execute(sql, params)]

    @staticmethod
    def _exhausted(found: _Queue, row: _Row) -> bool:
        limit = found.config.max_delivery_count
        return limit is not None and row.delivery_count >= limit

    def _dead_letter_target(self, found: _Queue) -> _Queue | None:
        config = found.config
        if not config.dead_letter_queue or config.max_delivery_count is None:
            return None
        # delete_queue refuses to delete a queue in use as a DLQ, so this exists.
        return self.find_queue(config.dead_letter_queue)

    def _move_to_dead_letter_queue(self, found: _Queue, dlq: _Queue, rows: list[_Row]) -> None:
        retention = dlq.config.message_retention
        self.conn.executemany(
            "UPDATE messages SET queue = ?, visible_at = ?, leased = 0, expires_at = ?,"
            " receipt_seq = receipt_seq + 1, source_queue = ?, attempt_id = NULL WHERE key = ?",
            [(dlq.id, self.now, row.enqueued_at + retention, found.name, row.key) for row in rows],
        )
        self.conn.execute(
            "UPDATE queues SET dead_lettered_total = dead_lettered_total + ? WHERE id = ?",
            (len(rows), found.id),
        )

    def _deliver(
        self, found: _Queue, rows: list[_Row], timeout: float, attempt_id: str
    ) -> list[DeliveredMessage]:
        visible_at = self.now + timeout
        leased = 1 if timeout > 0 else 0
        attempt = attempt_id or None
        self.conn.executemany(DELIVER_SQL, [(visible_at, leased, attempt, row.key) for row in rows])
        return [
            self._delivered(
                found,
                row._replace(
                    visible_at=visible_at,
                    delivery_count=row.delivery_count + 1,
                    receipt_seq=row.receipt_seq + 1,
                ),
            )
            for row in rows
        ]

    def _delivered(self, found: _Queue, row: _Row) -> DeliveredMessage:
        return DeliveredMessage(
            key=row.key,
            message_id=row.message_id,
            receipt=self.codec.encode(found.uid, row.key, row.receipt_seq),
            body=row.body,
            attributes=_decode_attributes(row.attributes),
            channel=row.channel,
            enqueued_at=row.enqueued_at,
            expires_at=row.expires_at,
            visible_at=row.visible_at,
            delivery_count=row.delivery_count,
            last_error=row.last_error,
        )

    def _outcome(self, found: _Queue, messages: list[DeliveredMessage]) -> ReceiveOutcome:
        if messages:
            return ReceiveOutcome(messages)
        (next_visible_at,) = self.conn.execute(NEXT_VISIBLE_SQL, (found.id, self.now)).fetchone()
        return ReceiveOutcome([], next_visible_at=next_visible_at)

    # -- peek --------------------------------------------------------------------------------

    def peek(
        self,
        name: str,
        max_messages: int,
        channel_filter: str,
        include_leased: bool,
        include_delayed: bool,
        after: PeekCursor | None,
    ) -> PeekPage:
        found = self.queue(name)
        state_clause, state_params = self._peek_states(include_leased, include_delayed)
        clause, clause_params = _channel_clause(channel_filter)
        cursor = " AND (visible_at, key) > (?, ?)" if after is not None else ""
        sql = (
            f"SELECT {ROW_COLUMNS} FROM messages WHERE queue = ?{state_clause}{clause}{cursor}"
            " ORDER BY visible_at, key LIMIT ?"
        )
        params = (found.id, *state_params, *clause_params, *(after or ()), max_messages + 1)
        rows = [_Row(*row) for row in self.conn.execute(sql, params)]
        page = rows[:max_messages]
        more = len(rows) > max_messages
        return PeekPage(
            messages=[self._peeked(row) for row in page],
            next_cursor=(page[-1].visible_at, page[-1].key) if more and page else None,
        )

    def _peek_states(
        self, include_leased: bool, include_delayed: bool
    ) -> tuple[str, tuple[Any, ...]]:
        if include_leased and include_delayed:
            return "", ()
        if include_leased:
            return " AND (visible_at <= ? OR leased = 1)", (self.now,)
        if include_delayed:
            return " AND (visible_at <= ? OR leased = 0)", (self.now,)
        return " AND visible_at <= ?", (self.now,)

    def _peeked(self, row: _Row) -> PeekedMessage:
        return PeekedMessage(
            key=row.key,
            message_id=row.message_id,
            body=row.body,
            attributes=_decode_attributes(row.attributes),
            channel=row.channel,
            enqueued_at=row.enqueued_at,
            expires_at=row.expires_at,
            visible_at=row.visible_at,
            delivery_count=row.delivery_count,
            last_error=row.last_error,
            state=_state(row, self.now),
        )

    # -- leases: shared lookups ----------------------------------------------------------------

    def _decode(self, found: _Queue, receipts: Sequence[str]) -> list[tuple[int, int] | None]:
        return [self.codec.decode(receipt, found.uid) for receipt in receipts]

    def _leases(self, found: _Queue, keys: set[int]) -> dict[int, _Lease]:
        """Lease state of those keys that are messages of this queue."""
        leases: dict[int, _Lease] = {}
        for chunk in _chunks(sorted(keys)):
            for key, queue_id, seq, leased, visible_at, last_error in self.conn.execute(
                leases_by_key_sql(len(chunk)), chunk
            ):
                if queue_id == found.id:
                    leases[key] = _Lease(key, seq, bool(leased), visible_at, last_error)
        return leases

    def _tombstones(self, found: _Queue, keys: Iterable[int]) -> dict[int, _Tombstone]:
        tombstones: dict[int, _Tombstone] = {}
        for chunk in _chunks(sorted(keys)):
            marks = ", ".join("?" * len(chunk))
            for key, seq, deleted_at in self.conn.execute(
                f"SELECT key, receipt_seq, deleted_at FROM tombstones WHERE key IN ({marks})"
                " AND queue = ?",
                (*chunk, found.id),
            ):
                tombstones[key] = _Tombstone(seq, deleted_at)
        return tombstones

    def _lookup(
        self, found: _Queue, decoded: list[tuple[int, int] | None]
    ) -> tuple[dict[int, _Lease], dict[int, _Tombstone]]:
        keys = {d[0] for d in decoded if d is not None}
        leases = self._leases(found, keys)
        return leases, self._tombstones(found, keys - leases.keys())

    # -- change visibility ---------------------------------------------------------------------

    def change_visibility(self, name: str, changes: list[VisibilityChange]) -> list[LeaseResult]:
        found = self.queue(name)
        decoded = self._decode(found, [c.receipt for c in changes])
        leases, tombstones = self._lookup(found, decoded)
        changed: dict[int, _Lease] = {}
        results = []
        for change, receipt in zip(changes, decoded):
            if receipt is None:
                results.append(LeaseResult(change.receipt, LeaseStatus.INVALID_RECEIPT))
                continue
            key, seq = receipt
            lease = leases.get(key)
            status = _fence(lease, tombstones.get(key), seq, self.now)
            if status is None and lease is not None and not lease.live(self.now):
                status = LeaseStatus.LEASE_EXPIRED
            if status is not None:
                results.append(_lease_result(change.receipt, status, key))
                continue
            assert lease is not None  # _fence returns a status for a missing message
            self._set_visibility(lease, change.visibility_timeout, change.reason)
            changed[key] = lease
            results.append(LeaseResult(change.receipt, LeaseStatus.OK, lease.visible_at, key))
        self._write_leases(changed.values())
        return results

    def _set_visibility(self, lease: _Lease, timeout: float, reason: str = "") -> None:
        lease.visible_at = self.now + timeout
        if timeout <= 0:
            # A release: visible now, no longer leased, and no longer part of its receive attempt.
            lease.leased = False
            lease.clear_attempt = True
        if reason:
            lease.last_error = reason

    def _write_leases(self, leases: Iterable[_Lease]) -> None:
        self.conn.executemany(
            "UPDATE messages SET visible_at = ?, leased = ?, last_error = ?,"
            " attempt_id = CASE WHEN ? THEN NULL ELSE attempt_id END WHERE key = ?",
            [(l.visible_at, int(l.leased), l.last_error, l.clear_attempt, l.key) for l in leases],
        )

    # -- delete ------------------------------------------------------------------------------

    def delete(self, name: str, receipts: list[str], attempt_ids: Sequence[str]) -> DeleteOutcome:
        found = self.queue(name)
        decoded = self._decode(found, receipts)
        leases, tombstones = self._lookup(found, decoded)
        results: list[LeaseResult] = []
        deleted: list[tuple[int, int]] = []  # (key, receipt_seq)
        for text, receipt in zip(receipts, decoded):
            if receipt is None:
                results.append(LeaseResult(text, LeaseStatus.INVALID_RECEIPT))
                continue
            key, seq = receipt
            status = _fence(leases.get(key), tombstones.get(key), seq, self.now)
            if status is None:
                # Later entries of this request see the message as deleted, like a retried ack.
                del leases[key]
                tombstones[key] = _Tombstone(seq, self.now)
                deleted.append((key, seq))
            results.append(_lease_result(text, status or LeaseStatus.OK, key))
        self._remove(found, deleted)
        attempt_counts = []
        for attempt_id in attempt_ids:
            by_attempt = self._remove_attempt(found, attempt_id)
            attempt_counts.append((attempt_id, len(by_attempt)))
            deleted.extend(by_attempt)
        return DeleteOutcome(results, attempt_counts, [key for key, _ in deleted])

    def _remove_attempt(self, found: _Queue, attempt_id: str) -> list[tuple[int, int]]:
        """Messages whose latest delivery was made under attempt_id and not released since
        (release and redelivery overwrite the column), deleted with tombstones."""
        if not attempt_id:
            return []
        rows = self.conn.execute(
            "SELECT key, receipt_seq FROM messages WHERE queue = ? AND attempt_id = ?",
            (found.id, attempt_id),
        ).fetchall()
        self._remove(found, rows)
        return rows

    def _remove(self, found: _Queue, deleted: Sequence[tuple[int, int]]) -> None:
        if not deleted:
            return
        # Tombstones first: inserting them into pages that the message delete has just freed,
        # inside the operation's savepoint, is over ten times slower in SQLite (measured: 0.6 s
        # instead of 0.04 s for 10,000 messages of 1 KiB).
        self.conn.executemany(
            "INSERT OR REPLACE INTO tombstones (key, queue, receipt_seq, deleted_at)"
            " VALUES (?, ?, ?, ?)",
            [(key, found.id, seq, self.now) for key, seq in deleted],
        )
        self.conn.executemany("DELETE FROM messages WHERE key = ?", [(key,) for key, _ in deleted])
        self.conn.execute(
            "UPDATE queues SET deleted_total = deleted_total + ? WHERE id = ?",
            (len(deleted), found.id),
        )

    # -- update message ------------------------------------------------------------------------

    def update_message(
        self,
        name: str,
        receipt: str,
        body: bytes | None,
        attributes: dict[str, str] | None,
        visibility_timeout: float | None,
    ) -> UpdatedMessage:
        found = self.queue(name)
        decoded = self.codec.decode(receipt, found.uid)
        if decoded is None:
            raise LeaseRejected(LeaseStatus.INVALID_RECEIPT)
        key, seq = decoded
        lease = self._held_lease(found, key, seq)
        row = self.conn.execute(
            "SELECT body, attributes FROM messages WHERE key = ?", (key,)
        ).fetchone()
        new_body = row[0] if body is None else body
        new_attributes = _decode_attributes(row[1]) if attributes is None else attributes
        if message_size(new_body, new_attributes) > found.config.max_message_bytes:
            raise InvalidArgument(
                "body",
                f"body and attributes exceed max_message_bytes ({found.config.max_message_bytes})",
            )
        if visibility_timeout is not None:
            self._set_visibility(lease, visibility_timeout)
        self.conn.execute(
            "UPDATE messages SET body = ?, attributes = ?, visible_at = ?, leased = ?,"
            " receipt_seq = receipt_seq + 1,"
            " attempt_id = CASE WHEN ? THEN NULL ELSE attempt_id END WHERE key = ?",
            (new_body, _encode_attributes(new_attributes), lease.visible_at, int(lease.leased),
             lease.clear_attempt, key),
        )
        return UpdatedMessage(key, self.codec.encode(found.uid, key, seq + 1), lease.visible_at)

    def _held_lease(self, found: _Queue, key: int, seq: int) -> _Lease:
        """The message's lease when this receipt holds it live; else LeaseRejected."""
        lease = self._leases(found, {key}).get(key)
        tombstone = None if lease is not None else self._tombstones(found, [key]).get(key)
        status = _fence(lease, tombstone, seq, self.now)
        if status is None and lease is not None and not lease.live(self.now):
            status = LeaseStatus.LEASE_EXPIRED
        if status is not None:
            raise LeaseRejected(status)
        assert lease is not None
        return lease

    # -- redrive -----------------------------------------------------------------------------

    def redrive(
        self, name: str, destination: str | None, max_messages: int, channel_filter: str
    ) -> int:
        found = self.queue(name)
        target = None if destination is None else self.queue(destination)
        limit = max_messages if max_messages > 0 else math.inf
        clause, clause_params = _channel_clause(channel_filter)
        sources: dict[str, _Queue | None] = {}
        moves: list[tuple[_Queue, int]] = []
        cursor: tuple[float, int] | None = None
        page = 1000
        # Like receive, collect first and update after: the keyset cursor needs a still table.
        while len(moves) < limit:
            rows = self._candidates(found, clause, clause_params, cursor, page)
            for row in rows:
                to = target or self._source(row.source_queue, sources)
                if to is not None:
                    moves.append((to, row.key))
                    if len(moves) >= limit:
                        break
            if len(rows) < page:
                break
            cursor = (rows[-1].visible_at, rows[-1].key)
        self.conn.executemany(
            "UPDATE messages SET queue = ?, delivery_count = 0, visible_at = ?, leased = 0,"
            " source_queue = NULL, receipt_seq = receipt_seq + 1, expires_at = ?, attempt_id = NULL"
            " WHERE key = ?",
            [(to.id, self.now, self.now + to.config.message_retention, key) for to, key in moves],
        )
        return len(moves)

    def _source(self, name: str | None, cache: dict[str, _Queue | None]) -> _Queue | None:
        if not name:
            return None
        if name not in cache:
            cache[name] = self.find_queue(name)
        return cache[name]

    # -- housekeeping --------------------------------------------------------------------------

    def housekeep(self) -> bool:
        """Delete a slice of rows whose time conditions can no longer hold. True when a table
        had more than a slice, so the next operation should continue."""
        limit = HOUSEKEEPING_ROWS
        statements = (
            ("DELETE FROM tombstones WHERE key IN (SELECT key FROM tombstones WHERE deleted_at < ?"
             " LIMIT ?)", self.now - TOMBSTONE_SECONDS),
            ("DELETE FROM dedup WHERE (queue, dedup_id) IN (SELECT queue, dedup_id FROM dedup"
             " WHERE until <= ? LIMIT ?)", self.now),
            ("DELETE FROM attempts WHERE (queue, attempt_id) IN (SELECT queue, attempt_id FROM"
             " attempts WHERE until <= ? LIMIT ?)", self.now),
        )
        more = False
        for sql, cutoff in statements:
            more |= self.conn.execute(sql, (cutoff, limit)).rowcount >= limit
        return more


# --- the store ------------------------------------------------------------------------------


class SqliteStore:
    """The Store protocol over one SQLite file (WAL, synchronous=FULL, one writer thread).

    `commit_count` and `operation_count` say how many transactions and operations the writer
    thread has committed since open: group commit makes the first smaller than the second.
    """

    def __init__(self, path: Path, clock: Clock | None = None) -> None:
        self.path = Path(path)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._writer: _Writer | None = None
        self._codec: ReceiptCodec | None = None
        # Writer thread only: when to housekeep next, and per queue id an upper bound on its
        # live leases (see _Tx._delivery_limit). This assumes one store per file at a time,
        # which the single-writer design assumes anyway.
        self._next_housekeeping = -math.inf
        self._lease_ceilings: dict[int, int] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self._writer is not None:
            return
        writer = _Writer(self._connect)
        self._lease_ceilings.clear()  # the file may have changed while this store was closed
        try:
            key = await writer.start(_initialize)
        except BaseException:
            await writer.stop()
            raise
        self._codec = ReceiptCodec(key)
        self._writer = writer

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.stop()

    @property
    def commit_count(self) -> int:
        return self._writer.commits if self._writer is not None else 0

    @property
    def operation_count(self) -> int:
        return self._writer.operations if self._writer is not None else 0

    def _connect(self) -> sqlite3.Connection:
        """Runs on the writer thread, which then owns the connection."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: the writer issues BEGIN/SAVEPOINT/COMMIT itself.
        conn = sqlite3.connect(self.path, isolation_level=None, cached_statements=256)
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise RuntimeError(f"{self.path}: cannot use WAL journaling (got {mode!r})")
            # FULL: the WAL is synced at every COMMIT, so a message is on disk when send returns.
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            # Another process (a backup, the CLI) may hold the lock for a moment.
            conn.execute("PRAGMA busy_timeout = 5000")
            conn.execute("PRAGMA cache_size = -65536")
            conn.execute("PRAGMA temp_store = MEMORY")
        except BaseException:
            conn.close()
            raise
        return conn

    async def _call(self, fn: Callable[[_Tx], T], weight: int = 1) -> T:
        writer = self._writer
        if writer is None or self._codec is None:
            raise Unavailable("the SQLite store is not open")
        codec = self._codec

        def operation(conn: sqlite3.Connection) -> T:
            tx = _Tx(conn, self.clock.now(), codec, self._lease_ceilings)
            self._maybe_housekeep(tx)
            return fn(tx)

        return await writer.submit(operation, weight)

    def _maybe_housekeep(self, tx: _Tx) -> None:
        if tx.now < self._next_housekeeping:
            return
        more = tx.housekeep()
        self._next_housekeeping = tx.now if more else tx.now + HOUSEKEEPING_SECONDS

    # -- queues ------------------------------------------------------------------------------

    async def create_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        return await self._call(lambda tx: tx.create_queue(name, config))

    async def get_queue(self, name: str) -> QueueInfo:
        return await self._call(lambda tx: tx.get_queue(name))

    async def list_queues(self, prefix: str, after: str | None, limit: int) -> list[QueueInfo]:
        return await self._call(lambda tx: tx.list_queues(prefix, after, limit))

    async def update_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        return await self._call(lambda tx: tx.update_queue(name, config))

    async def delete_queue(self, name: str) -> None:
        await self._call(lambda tx: tx.delete_queue(name))

    async def purge_queue(self, name: str) -> int:
        return await self._call(lambda tx: tx.purge_queue(name))

    async def stats(self, name: str) -> QueueStats:
        return await self._call(lambda tx: tx.stats(name))

    # -- messages ----------------------------------------------------------------------------

    async def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        return await self._call(lambda tx: tx.send(name, messages), weight=len(messages))

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: float | None = None,
        channel_filter: str = "",
        attempt_id: str = "",
    ) -> ReceiveOutcome:
        return await self._call(
            lambda tx: tx.receive(
                name, max_messages, visibility_timeout, channel_filter, attempt_id
            ),
            weight=max_messages,
        )

    async def peek(
        self,
        name: str,
        max_messages: int,
        channel_filter: str = "",
        include_leased: bool = False,
        include_delayed: bool = False,
        after: PeekCursor | None = None,
    ) -> PeekPage:
        return await self._call(
            lambda tx: tx.peek(
                name, max_messages, channel_filter, include_leased, include_delayed, after
            ),
            weight=max_messages,
        )

    async def change_visibility(
        self, name: str, changes: list[VisibilityChange]
    ) -> list[LeaseResult]:
        return await self._call(lambda tx: tx.change_visibility(name, changes), weight=len(changes))

    async def delete(
        self, name: str, receipts: list[str], attempt_ids: Sequence[str] = ()
    ) -> DeleteOutcome:
        return await self._call(
            lambda tx: tx.delete(name, list(receipts), list(attempt_ids)),
            weight=len(receipts) + len(attempt_ids),
        )

    async def update_message(
        self,
        name: str,
        receipt: str,
        body: bytes | None = None,
        attributes: dict[str, str] | None = None,
        visibility_timeout: float | None = None,
    ) -> UpdatedMessage:
        return await self._call(
            lambda tx: tx.update_message(name, receipt, body, attributes, visibility_timeout)
        )

    async def redrive(
        self,
        name: str,
        destination: str | None = None,
        max_messages: int = 0,
        channel_filter: str = "",
    ) -> int:
        return await self._call(
            lambda tx: tx.redrive(name, destination, max_messages, channel_filter),
            weight=max_messages or MAX_GROUP_WEIGHT,
        )


def _schema_statements() -> list[str]:
    # Not executescript(): it COMMITs first, and this runs inside the writer's transaction
    # (DDL is transactional in SQLite). The schema text has no ';' inside comments.
    return [statement.strip() for statement in _SCHEMA.split(";") if statement.strip()]


def _initialize(conn: sqlite3.Connection) -> bytes:
    """Create the schema if needed and return the receipt signing key (made once per file)."""
    for statement in _schema_statements():
        conn.execute(statement)
    version = _meta(conn, "schema_version")
    if version is None:
        conn.execute(
            "INSERT INTO meta (name, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,)
        )
    elif int(version) != SCHEMA_VERSION:
        raise RuntimeError(
            f"the store file has schema version {version};"
            f" this leaseq reads version {SCHEMA_VERSION}"
        )
    key = _meta(conn, "receipt_signing_key")
    if key is None:
        key = new_signing_key()
        conn.execute("INSERT INTO meta (name, value) VALUES ('receipt_signing_key', ?)", (key,))
    return bytes(key)


def _meta(conn: sqlite3.Connection, name: str) -> Any:
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
    return None if row is None else row[0]
