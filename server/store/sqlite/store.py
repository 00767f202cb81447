"""SqliteStore: the Store protocol's async face over the writer and its transactions."""

from __future__ import annotations

import asyncio
import math
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from ...clock import Clock, SystemClock
from ...domain.types import (
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
from ...errors import QueueNotFound, Unavailable
from ...receipts import ReceiptCodec
from . import state
from .open_errors import cannot_open, check_path, explain
from .reader import _Reader
from .reads import Decoded, finish_delivery, peek_scan, stats_scan
from .schema import _initialize
from .transaction import HOUSEKEEPING_SECONDS, _Tx
from .writer import HEAVY, _Writer

T = TypeVar("T")

# sqlite3 binds int, float, str and bytearray parameters at once, but first offers any other
# value for adaptation (its registry, then PEP 246's __adapt__ and __conform__), and for bytes
# the __adapt__ lookup formats and clears an AttributeError each time, which made a body cost
# three times a str to bind. An adapter registered for bytes is found at the first step (the
# figures: docs/performance.md, "Figures behind the code"). `bytes` returns an exact bytes object as it is, so blobs are stored as before
# (the registry is the process's: every sqlite3 connection gets the same shortcut).
sqlite3.register_adapter(bytes, bytes)

# --- the store ------------------------------------------------------------------------------


BYTES_PER_WEIGHT = 4096
"""A send weighs one per message and one per this many bytes of bodies: a send of a few big
messages is as much work as one of many small ones (writer.INLINE_WEIGHT: where it runs)."""


def _send_weight(bodies: Sequence[bytes]) -> int:
    return len(bodies) + sum(map(len, bodies)) // BYTES_PER_WEIGHT


DURABILITIES = ("full", "relaxed")
"""full: every commit is fsync'd before its callers hear of it. relaxed: sends, queue changes and
every other write still are; leases and acks (receives, visibility changes, deletes) commit
without an fsync of their own and reach the disk with the next one (writer.py says why that is
safe: after an OS crash they may be undone, a redelivery, never a lost message)."""


class SqliteStore:
    """The Store protocol over one SQLite file (WAL, synchronous=FULL, one writer).

    `commit_count` and `operation_count` say how many transactions and operations the writer
    has committed since open: group commit makes the first smaller than the second.
    """

    def __init__(self, path: Path, clock: Clock | None = None, durability: str = "full") -> None:
        if durability not in DURABILITIES:
            raise ValueError(
                f"durability must be one of {', '.join(DURABILITIES)}, not {durability!r}"
            )
        self.path = Path(path)
        self.durability = durability
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._writer: _Writer | None = None
        self._reader: _Reader | None = None
        self._codec: ReceiptCodec | None = None
        # The writer's operations only: when to housekeep next, and per queue id an upper bound
        # on its live leases (see _Tx._delivery_limit). This assumes one store per file at a
        # time, which the single-writer design assumes anyway.
        self._next_housekeeping = -math.inf
        self._lease_ceilings: dict[int, int] = {}
        # Event loop only: queues by name as last created, read or updated. The service reads a
        # queue's configuration before every send and receive; answering from here spares each
        # of those a round trip through the writer. Every change of a
        # queue goes through this object (one store per file, as above), and the operations
        # themselves still look the queue up, so a stale entry can never act on a deleted queue.
        self._queues: dict[str, QueueInfo] = {}
        # Event loop only: each queue's uid as the last receive saw it, to verify receipts on
        # the event loop (_predecode) outside the writer's group; the operation checks the uid.
        self._uids: dict[str, int] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self._writer is not None:
            return
        writer = _Writer(self._connect, relaxed=self.durability == "relaxed")
        self._lease_ceilings.clear()  # the file may have changed while this store was closed
        self._queues.clear()
        self._uids.clear()
        try:
            key = await writer.start(_initialize)
        except (
            sqlite3.Error
        ) as error:  # e.g. a read-only file: "attempt to write a readonly database"
            await writer.stop()
            raise explain(self.path, error) from error
        except BaseException:
            await writer.stop()
            raise
        self._codec = ReceiptCodec(key)
        self._reader = _Reader(self.path)
        self._writer = writer

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        reader, self._reader = self._reader, None
        if reader is not None:
            await asyncio.to_thread(reader.close)
        if writer is not None:
            await writer.stop()

    def token_key(self) -> bytes:
        return self._codec.derive(b"leaseq page tokens")  # type: ignore[union-attr]  # set at open

    @property
    def commit_count(self) -> int:
        return self._writer.commits if self._writer is not None else 0

    @property
    def unsynced_commit_count(self) -> int:
        """Commits made without an fsync of their own (durability relaxed: leases and acks)."""
        return self._writer.unsynced_commits if self._writer is not None else 0

    @property
    def operation_count(self) -> int:
        return self._writer.operations if self._writer is not None else 0

    def _connect(self) -> sqlite3.Connection:
        """Runs on the writer's thread (writer.py says where the connection is used after)."""
        check_path(self.path)
        try:
            # isolation_level=None: the writer issues BEGIN/SAVEPOINT/COMMIT itself.
            # check_same_thread=False: the writer uses it on the event loop and on its thread,
            # never both at once (writer.py).
            conn = sqlite3.connect(
                self.path, isolation_level=None, cached_statements=256, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise explain(self.path, error) from error
        try:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.Error as error:  # the first read: "file is not a database"
                raise explain(self.path, error) from error
            if mode.lower() != "wal":
                raise cannot_open(self.path, f"cannot use WAL journaling (got {mode!r})")
            # FULL: the WAL is synced at every COMMIT, so a message is on disk when send returns.
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            # Another process (a backup, the CLI) may hold the lock for a moment: the writer
            # waits for it on its thread, never on the event loop (writer.BUSY_TIMEOUT_MS).
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA cache_size = -65536")
            # FILE, not MEMORY: every operation runs in a SAVEPOINT, whose journal keeps the
            # original of each page it changes; in memory, a redrive or dead-letter move of
            # 60 x 8 MiB messages held about 1.5 GB there. On file it spills past 64 KiB (to the
            # OS's page cache; no fsync), and the cycle's CPU per message did not change.
            conn.execute("PRAGMA temp_store = FILE")
        except BaseException:
            conn.close()
            raise
        return conn

    async def _call(self, fn: Callable[[_Tx], T], weight: int = 1, durable: bool = True) -> T:
        writer = self._writer
        if writer is None or self._codec is None:
            raise Unavailable("the SQLite store is not open")
        codec = self._codec

        def operation(conn: sqlite3.Connection) -> T:
            tx = _Tx(conn, self.clock.now(), codec, self._lease_ceilings)
            self._maybe_housekeep(tx)
            return fn(tx)

        return await writer.submit(operation, weight, durable)

    def _maybe_housekeep(self, tx: _Tx) -> None:
        if tx.now < self._next_housekeeping:
            return
        more = tx.housekeep()
        self._next_housekeeping = tx.now if more else tx.now + HOUSEKEEPING_SECONDS

    # -- queues ------------------------------------------------------------------------------

    async def create_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        info = await self._call(lambda tx: tx.create_queue(name, config))
        self._queues[name] = info
        return info

    async def get_queue(self, name: str) -> QueueInfo:
        info = self._queues.get(name)
        if info is None:
            info = self._queues[name] = await self._call(lambda tx: tx.get_queue(name))
        return info

    async def list_queues(self, prefix: str, after: str | None, limit: int) -> list[QueueInfo]:
        return await self._call(lambda tx: tx.list_queues(prefix, after, limit))

    async def update_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        self._queues.pop(name, None)
        info = await self._call(lambda tx: tx.update_queue(name, config))
        self._queues[name] = info
        return info

    async def delete_queue(self, name: str) -> None:
        self._queues.pop(name, None)
        self._uids.pop(name, None)
        try:
            # Its messages may be many: off the event loop.
            await self._call(lambda tx: tx.delete_queue(name), weight=HEAVY)
        finally:
            self._queues.pop(name, None)  # a get_queue may have cached it again meanwhile

    async def queue_metadata(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        return await self._call(lambda tx: tx.queue_metadata(names))

    async def set_queue_metadata(self, name: str, metadata: Mapping[str, str]) -> None:
        await self._call(lambda tx: tx.set_queue_metadata(name, metadata))

    async def queue_state(self, name: str, namespace: str) -> dict[str, str]:
        return await self._call(lambda tx: state.queue_state(tx, name, namespace))

    async def update_queue_state(
        self, name: str, namespace: str, changes: Mapping[str, str | None], replace: bool = False
    ) -> dict[str, str]:
        return await self._call(
            lambda tx: state.update_queue_state(tx, name, namespace, changes, replace)
        )

    async def settings(self, namespace: str) -> dict[str, str]:
        return await self._call(lambda tx: state.settings(tx, namespace))

    async def update_settings(
        self, namespace: str, changes: Mapping[str, str | None], replace: bool = False
    ) -> dict[str, str]:
        return await self._call(lambda tx: state.update_settings(tx, namespace, changes, replace))

    async def purge_queue(self, name: str) -> int:
        return await self._call(lambda tx: tx.purge_queue(name), weight=HEAVY)

    async def stats(self, name: str) -> QueueStats:
        counters = await self._call(lambda tx: tx.stats_counters(name))
        return await self._read(lambda conn: stats_scan(conn, counters))

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a query that reads many rows on the read connection (see reader.py)."""
        reader = self._reader
        if reader is None:
            raise Unavailable("the SQLite store is not open")
        return await reader.run(fn)

    # -- messages ----------------------------------------------------------------------------

    async def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        weight = _send_weight([m.body for m in messages])
        return await self._call(lambda tx: tx.send(name, messages), weight)

    async def send_batch(self, name: str, batch: BodyBatch) -> SentBatch:
        """Store.send_batch with no NewMessage or SendOutcome per message."""
        if batch.dedup_ids is None:
            return SentBatch(await self.send_bodies(name, batch.bodies))
        message_ids, duplicates = await self.send_keyed(name, batch.bodies, batch.dedup_ids)
        return SentBatch(message_ids, duplicates)

    async def send_bodies(self, name: str, bodies: list[bytes]) -> list[str]:
        """send() of messages that are only a body, answered with their message ids."""
        weight = _send_weight(bodies)
        return await self._call(lambda tx: tx.send_bodies(name, bodies), weight)

    async def send_keyed(
        self, name: str, bodies: list[bytes], dedup_ids: list[str]
    ) -> tuple[list[str], list[int]]:
        """send() of messages that are only a body and a dedup id ("" for none): their message
        ids and the indexes of the duplicates."""
        weight = _send_weight(bodies)
        return await self._call(lambda tx: tx.send_keyed(name, bodies, dedup_ids), weight)

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: float | None = None,
        channel_filter: str = "",
        attempt_id: str = "",
        max_bytes: int | None = None,
    ) -> ReceiveOutcome:
        delivery = await self._call(
            lambda tx: tx.receive(
                name, max_messages, visibility_timeout, channel_filter, attempt_id, max_bytes
            ),
            weight=max_messages,
            durable=False,
        )
        self._uids[name] = delivery.uid
        assert self._codec is not None  # _call checked
        return finish_delivery(self._codec, delivery)

    def _predecode(self, name: str, receipts: Sequence[str]) -> Decoded | None:
        """Verify receipts here, on the event loop, when the queue's uid is known (see _uids)."""
        uid = self._uids.get(name)
        if uid is None or self._codec is None:
            return None
        return Decoded(uid, self._codec.decode_many(receipts, uid))

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
        queue_id, now = await self._call(lambda tx: tx.peek_start(name))
        return await self._read(
            lambda conn: peek_scan(
                conn,
                queue_id,
                now,
                max_messages,
                channel_filter,
                include_leased,
                include_delayed,
                after,
                max_bytes,
            )
        )

    async def receipt_of(self, name: str, key: int, receipt_seq: int) -> str:
        found = await self._call(lambda tx: tx.find_queue(name))
        if found is None or self._codec is None:
            raise QueueNotFound(name)
        return self._codec.encode(found.uid, key, receipt_seq)

    async def change_visibility(
        self, name: str, changes: list[VisibilityChange]
    ) -> list[LeaseResult]:
        decoded = self._predecode(name, [c.receipt for c in changes])
        return await self._call(
            lambda tx: tx.change_visibility(name, changes, decoded),
            weight=len(changes),
            durable=False,
        )

    async def delete(
        self, name: str, receipts: list[str], attempt_ids: Sequence[str] = ()
    ) -> DeleteOutcome:
        decoded = self._predecode(name, receipts)
        return await self._call(
            lambda tx: tx.delete(name, list(receipts), list(attempt_ids), decoded),
            weight=len(receipts) + len(attempt_ids),
            durable=False,
        )

    async def dead_letter(self, name: str, receipts: list[str], reason: str) -> DeadLetterOutcome:
        decoded = self._predecode(name, receipts)
        return await self._call(
            lambda tx: tx.dead_letter(name, list(receipts), reason, decoded), weight=len(receipts)
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
        # Off the event loop whatever max_messages says: an operator's call that moves messages
        # of any size.
        return await self._call(
            lambda tx: tx.redrive(name, destination, max_messages, channel_filter), weight=HEAVY
        )
