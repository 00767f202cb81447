"""One operation's transaction (`_Tx`) and the rows it reads."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg

from ...domain import leases as decide
from ...domain.leases import Lease, Tombstone, message_state
from ...domain.rules import check_dead_letter_pair, message_size
from ...domain.types import DeliveredMessage, PeekedMessage, QueueConfig, QueueInfo
from ...errors import (
    InvalidArgument,
    QueueNotFound,
)
from ...receipts import ReceiptCodec
from ..config_rows import config_from_values
from .groups import Groups
from .settings import _CONFIG_FIELDS
from .statements import (
    BACKOFF_ENDED_SQL,
    END_BACKOFFS_SQL,
    LEASES_BY_KEY_SQL,
    NOW_SQL,
    QUEUE_COLUMNS,
    SWEEP_SQL,
    TOMBSTONES_BY_KEY_SQL,
    WRITE_LEASES_SQL,
    open_queue_sql,
)

# --- rows -------------------------------------------------------------------------------------


class _Row(NamedTuple):
    key: int
    message_id: str
    body: bytes
    attributes: dict[str, str] | None
    channel: str
    enqueued_at: float
    expires_at: float
    visible_at: float
    leased: bool
    delivery_count: int
    receipt_seq: int
    last_error: str
    source_queue: str | None
    grp: str | None


def _size(row: _Row) -> int:
    return message_size(row.body, row.attributes or {})


@dataclass(frozen=True)
class _Queue:
    id: int
    name: str
    uid: int
    create_time: float
    config: QueueConfig
    # The in-flight ceiling's inputs (only read by receive).
    leases_counted: int = 0
    grants_at_count: int = 0
    granted: int = 0

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> _Queue:
        n = len(_CONFIG_FIELDS)
        config = config_from_values(row[4 : 4 + n])
        return cls(row[0], row[1], row[2], row[3], config)

    def info(self) -> QueueInfo:
        return QueueInfo(self.name, self.config, self.create_time)


def _encode_attributes(attributes: dict[str, str]) -> str | None:
    if not attributes:
        return None
    return json.dumps(attributes, separators=(",", ":"), ensure_ascii=False)


# --- one operation: a transaction ------------------------------------------------------------


class _Tx:
    """One operation's transaction: the connection, the receipt codec, and "now" once the first
    statement has read it."""

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        codec: ReceiptCodec,
        clock_now: float | None,
        sweep: str = SWEEP_SQL,
    ) -> None:
        self.conn = conn
        self.sweep = sweep  # the store's SWEEP_SQL (statements.sweep_sql of its tuning)
        self.codec = codec
        self.clock_now = clock_now  # the injected clock's reading; None: the database's now()
        self.now = math.nan
        self.published: set[str] = set()  # queues whose waiters elsewhere should look again

    async def rows(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor(binary=True)
        await cur.execute(query, params)
        return await cur.fetchall()

    async def row(self, query: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        cur = self.conn.cursor(binary=True)
        await cur.execute(query, params)
        return await cur.fetchone()

    async def run(self, query: str, params: dict[str, Any]) -> int:
        cur = await self.conn.execute(query, params)
        return cur.rowcount

    def p(self, found: _Queue | None = None, **params: Any) -> dict[str, Any]:
        """Parameters with "now" (and the queue id) filled in."""
        params["now"] = self.now
        if found is not None:
            params["queue"] = found.id
        return params

    # -- queues ------------------------------------------------------------------------------

    async def clock(self) -> float:
        row = await self.row(f"SELECT {NOW_SQL}", {"now": self.clock_now})
        assert row is not None
        self.now = row[0]
        return self.now

    async def open(self, name: str, lock: str = "", ceiling: bool = False) -> _Queue | None:
        """The queue after its expiry sweep (base.py: before every operation); None if missing."""
        row = await self.row(open_queue_sql(lock, ceiling), {"now": self.clock_now, "name": name})
        if row is None:
            return None
        self.now = row[0]
        n = 1 + 4 + len(_CONFIG_FIELDS)
        found = _Queue.from_row(row[1:n])
        counted, grants_at_count, has_expired = row[n : n + 3]
        if ceiling:
            found = dataclasses.replace(
                found, leases_counted=counted, grants_at_count=grants_at_count, granted=row[n + 3]
            )
        if has_expired:
            swept = await self.rows(self.sweep, self.p(found))
            if swept and found.config.grouped:  # the groups of what expired, read again
                await Groups(self, found).refresh(row[0] for row in swept)
        if found.config.retry_policy is not None:
            await self.end_backoff_leases(found)
        return found

    async def end_backoff_leases(self, found: _Queue) -> None:
        """Leases that ended by now and end with the queue's backoff (base.py: before every
        operation reads the queue): each message becomes a delay until its redelivery."""
        rows = await self.rows(BACKOFF_ENDED_SQL, self.p(found))
        if rows:
            groups = Groups(self, found)
            locked = await groups.locked_groups_of(key for key, _, _ in rows)
            await self.run(
                END_BACKOFFS_SQL,
                {
                    "keys": [key for key, _, _ in rows],
                    "visibles": [
                        decide.redelivery_at(end, count, found.config) for _, end, count in rows
                    ],
                },
            )
            await groups.refresh(locked, locked=True)

    async def queue(self, name: str, lock: str = "", ceiling: bool = False) -> _Queue:
        found = await self.open(name, lock, ceiling)
        if found is None:
            raise QueueNotFound(name)
        return found

    async def find_queue(self, name: str, lock: str = "") -> _Queue | None:
        """A queue's row without the sweep (lock: e.g. FOR KEY SHARE)."""
        row = await self.row(
            f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name = %(name)b {lock}", {"name": name}
        )
        return None if row is None else _Queue.from_row(row)

    async def check_dead_letter_queue(self, name: str, config: QueueConfig) -> None:
        dlq = config.dead_letter_queue
        if not dlq:
            return
        if dlq == name:
            raise InvalidArgument(
                "config.dead_letter_queue", "a queue cannot be its own dead letter queue"
            )
        # FOR KEY SHARE: a concurrent DeleteQueue of the dead letter queue waits for this
        # transaction, then sees this queue using it.
        target = await self.find_queue(dlq, "FOR KEY SHARE")
        if target is None:
            raise InvalidArgument("config.dead_letter_queue", f"queue {dlq!r} does not exist")
        check_dead_letter_pair(config, target.config)

    # -- messages ----------------------------------------------------------------------------

    def delivered(self, found: _Queue, row: _Row) -> DeliveredMessage:
        return DeliveredMessage(
            key=row.key,
            message_id=row.message_id,
            receipt=self.codec.encode(found.uid, row.key, row.receipt_seq),
            body=row.body,
            attributes=dict(row.attributes or {}),
            channel=row.channel,
            enqueued_at=row.enqueued_at,
            expires_at=row.expires_at,
            visible_at=row.visible_at,
            delivery_count=row.delivery_count,
            last_error=row.last_error,
            group=row.grp or "",
            sequence=0 if row.grp is None else row.key,
        )

    def peeked(self, row: _Row) -> PeekedMessage:
        return PeekedMessage(
            key=row.key,
            message_id=row.message_id,
            body=row.body,
            attributes=dict(row.attributes or {}),
            channel=row.channel,
            enqueued_at=row.enqueued_at,
            expires_at=row.expires_at,
            visible_at=row.visible_at,
            delivery_count=row.delivery_count,
            last_error=row.last_error,
            state=message_state(row.visible_at, row.leased, self.now),
            receipt_seq=row.receipt_seq,
            source_queue=row.source_queue,
            group=row.grp or "",
            sequence=0 if row.grp is None else row.key,
        )

    async def leases(self, found: _Queue, keys: Iterable[int]) -> dict[int, Lease]:
        """Fencing state of those keys that are unexpired messages of this queue, locked."""
        keys = sorted(set(keys))
        if not keys:
            return {}
        rows = await self.rows(LEASES_BY_KEY_SQL, self.p(found, keys=keys))
        return {
            key: Lease(key, seq, leased, visible_at, error, False, count, backoff)
            for key, seq, leased, visible_at, error, count, backoff in rows
        }

    async def tombstones(self, found: _Queue, keys: Iterable[int]) -> dict[int, Tombstone]:
        keys = sorted(set(keys))
        if not keys:
            return {}
        rows = await self.rows(TOMBSTONES_BY_KEY_SQL, self.p(found, keys=keys))
        return {key: Tombstone(seq, deleted_at) for key, seq, deleted_at in rows}

    async def lookup(
        self, found: _Queue, decoded: list[tuple[int, int] | None]
    ) -> tuple[dict[int, Lease], dict[int, Tombstone]]:
        keys = {d[0] for d in decoded if d is not None}
        leases = await self.leases(found, keys)
        return leases, await self.tombstones(found, keys - leases.keys())

    async def write_leases(self, leases: Sequence[Lease]) -> None:
        if not leases:
            return
        await self.run(
            WRITE_LEASES_SQL,
            {
                "keys": [lease.key for lease in leases],
                "visibles": [lease.visible_at for lease in leases],
                "leased": [lease.leased for lease in leases],
                "backoffs": [lease.backoff for lease in leases],
                "errors": [lease.last_error for lease in leases],
                "clear": [lease.clear_attempt for lease in leases],
            },
        )
