"""PostgresStore's background upkeep: housekeeping (stale tombstones, dedup and attempt records,
empty channel rows; one replica at a time) and the planner statistics check."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ...domain.limits import TOMBSTONE_SECONDS
from .settings import (
    CLOCK_SYNC_SECONDS,
    HOUSEKEEPING_ROWS,
    HOUSEKEEPING_SECONDS,
    STALE_STATS_ROWS,
)
from .statements import (
    DROP_CHANNEL_ROWS_SQL,
    EMPTY_CHANNELS_SQL,
    LOCK_CHANNELS_SQL,
)
from .transaction import _Tx

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .store import PostgresStore


class Maintenance:
    """The background upkeep of a PostgresStore (its tasks run these loops)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def maintain(self) -> None:
        """Housekeeping (stale tombstones, dedup and attempt records; one replica at a time)
        and the clock offset, every minute."""
        while True:
            await asyncio.sleep(min(HOUSEKEEPING_SECONDS, CLOCK_SYNC_SECONDS))
            try:
                await self.housekeep()
                pool = self.store._pool
                if pool is not None and self.store._injected_clock is None:
                    async with pool.connection() as conn:
                        await self.store._db_clock.sync(conn)
                        await conn.commit()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("PostgreSQL housekeeping failed: %s", error)

    async def watch_statistics(self) -> None:
        while True:
            await asyncio.sleep(self.store.tuning.stats_check_seconds)
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
                {"lock": f"leaseq:analyze:{self.store.schema}"},
            )
            if not got or not got[0]:
                return False
            await tx.conn.execute("ANALYZE messages", prepare=False)
            return True

        return await self.store._run(op)

    async def housekeep(self) -> int:
        """Delete stale tombstone, dedup and attempt rows (their meaning is bounded by a time
        checked on every read, so when this runs is invisible). Returns the rows deleted."""

        async def op(tx: _Tx) -> int:
            got = await tx.row(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(%(lock)b, 0))",
                {"lock": f"leaseq:housekeeping:{self.store.schema}"},
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
            deleted = await self.store._run(op)
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
