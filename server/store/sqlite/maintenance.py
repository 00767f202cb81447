"""SqliteStore's redrive and housekeeping, run by the writer inside an operation's transaction
(`_Tx`): moving a dead letter queue's messages back, and removing rows whose time is past."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...domain import leases as decide
from ...domain.limits import TOMBSTONE_SECONDS
from .groups import Groups
from .schema import _channel_clause, candidates_sql

if TYPE_CHECKING:
    from .transaction import _Queue, _Tx

# Stale tombstone/dedup/attempt rows are removed in slices of HOUSEKEEPING_ROWS, so that one
# slice never stalls the writer.
HOUSEKEEPING_ROWS = 5_000


class Maintenance:
    """The redrive and housekeeping of one operation's transaction."""

    def __init__(self, tx: _Tx) -> None:
        self.tx = tx

    def _redrive_candidates(
        self,
        found: _Queue,
        clause: str,
        clause_params: tuple[Any, ...],
        cursor: tuple[float, int] | None,
        limit: int,
    ) -> list[tuple[int, float, str | None]]:
        """(key, visible_at, source_queue) of a page of visible messages: no bodies, so a page
        holds a few bytes per message whatever the messages' sizes."""
        sql = candidates_sql("key, visible_at, source_queue", clause, after=cursor is not None)
        params = (found.id, self.tx.now, *clause_params, *(cursor or ()), limit)
        return self.tx.conn.execute(sql, params).fetchall()

    # -- redrive -----------------------------------------------------------------------------

    def redrive(
        self, name: str, destination: str | None, max_messages: int, channel_filter: str
    ) -> int:
        found = self.tx.queue(name)
        target = None if destination is None else self.tx.queue(destination)
        limit = max_messages if max_messages > 0 else math.inf
        clause, clause_params = _channel_clause(channel_filter)
        sources: dict[str, _Queue | None] = {}
        moves: list[tuple[_Queue, int]] = []
        cursor: tuple[float, int] | None = None
        page = 1000
        # Like receive, collect first and update after: the keyset cursor needs a still table.
        while len(moves) < limit:
            rows = self._redrive_candidates(found, clause, clause_params, cursor, page)
            for key, _visible_at, source_queue in rows:
                to = target or self._source(source_queue, sources)
                if to is not None:
                    moves.append((to, key))
                    if len(moves) >= limit:
                        break
            if len(rows) < page:
                break
            cursor = (rows[-1][1], rows[-1][0])
        grouped = found.config.grouped or any(to.config.grouped for to, _ in moves)
        if grouped:
            moves, groups_of = Groups(self.tx, found).redrive_plan(moves)
        self.tx._move_counts([(key, found.id, to.id) for to, key in moves])
        # A new expiry from now and the original enqueued_at: no lifetime class (class 0).
        for queue_id in {to.id for to, _ in moves}:
            self.tx._lifetime_classes(queue_id, [0.0])
        self.tx.conn.executemany(
            "UPDATE messages SET queue = ?, delivery_count = 0, visible_at = ?, leased = 0, backoff = 0,"
            " source_queue = NULL, receipt_seq = receipt_seq + 1, expires_at = ?, attempt_id = NULL,"
            " lifetime = 0 WHERE key = ?",
            [
                (to.id, self.tx.now, decide.redrive_expiry(self.tx.now, to.config), key)
                for to, key in moves
            ],
        )
        if grouped:
            Groups(self.tx, found).redriven(moves, groups_of)
        return len(moves)

    def _source(self, name: str | None, cache: dict[str, _Queue | None]) -> _Queue | None:
        if not name:
            return None
        if name not in cache:
            cache[name] = self.tx.find_queue(name)
        return cache[name]

    # -- housekeeping --------------------------------------------------------------------------

    def housekeep(self) -> bool:
        """Delete a slice of rows whose time conditions can no longer hold. True when a table
        had more than a slice, so the next operation should continue."""
        limit = HOUSEKEEPING_ROWS
        statements = (
            (
                "DELETE FROM tombstones WHERE key IN (SELECT key FROM tombstones WHERE deleted_at < ?"
                " LIMIT ?)",
                self.tx.now - TOMBSTONE_SECONDS,
            ),
            (
                "DELETE FROM dedup WHERE (queue, dedup_id) IN (SELECT queue, dedup_id FROM dedup"
                " WHERE until <= ? LIMIT ?)",
                self.tx.now,
            ),
            (
                "DELETE FROM attempts WHERE (queue, attempt_id) IN (SELECT queue, attempt_id FROM"
                " attempts WHERE until <= ? LIMIT ?)",
                self.tx.now,
            ),
        )
        more = False
        for sql, cutoff in statements:
            more |= self.tx.conn.execute(sql, (cutoff, limit)).rowcount >= limit
        # Channels that emptied (one row per channel a queue ever used: few), and lifetime classes
        # no message has any more (at most MAX_LIFETIMES + 1 per queue; a search each).
        self.tx.conn.execute("DELETE FROM channel_counts WHERE total = 0")
        self.tx.conn.execute(
            "DELETE FROM lifetimes WHERE NOT EXISTS (SELECT 1 FROM messages"
            " WHERE messages.queue = lifetimes.queue AND messages.lifetime = lifetimes.lifetime)"
        )
        return more
