"""SqliteStore's message groups, inside an operation's transaction (`_Tx`): the `groups` rows
of FIFO and FAIR queues (schema._GROUPS) and the receive's pick over them, by the rules of
domain.groups. Every operation that adds, removes, leases or releases messages of a grouped
queue names the groups it touched (`refresh`), whose ready_at is then read again from their
messages: one short index range per group."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ...domain import groups as rules
from ...domain import leases as decide
from ...domain.rules import bytes_reached, channel_matches
from ...domain.types import Ordering
from .schema import CANDIDATE_COLUMNS, _Candidate, _channel_clause, _chunks

if TYPE_CHECKING:
    from .transaction import _Queue, _Tx

# A FIFO group's messages in key order, with what fifo_ready_at reads.
_MEMBERS_SQL = (
    "SELECT key, visible_at, leased, delivery_count FROM messages"
    " INDEXED BY messages_group WHERE queue = ?1 AND grp = ?2 ORDER BY key"
)
# A FAIR group's earliest visible_at.
_FAIR_READY_SQL = (
    "SELECT MIN(visible_at) FROM messages INDEXED BY messages_group_visible"
    " WHERE queue = ? AND grp = ?"
)
# The first _MEMBERS_AHEAD messages of each group of a JSON array, in one statement (a
# statement per group cost more than the rows): (position, key, visible_at, leased,
# delivery_count), in key order per group.
_MEMBERS_AHEAD = 2
_MANY_MEMBERS_SQL = (
    "SELECT g.key, m.key, m.visible_at, m.leased, m.delivery_count FROM json_each(?2) AS g"
    " JOIN messages AS m ON m.key IN (SELECT key FROM messages INDEXED BY messages_group"
    f" WHERE queue = ?1 AND grp = g.value ORDER BY key LIMIT {_MEMBERS_AHEAD})"
    " ORDER BY g.key, m.key"
)
_SET_READY_SQL = (
    "INSERT INTO groups (queue, name, ready_at) VALUES (?, ?, ?)"
    " ON CONFLICT (queue, name) DO UPDATE SET ready_at = excluded.ready_at"
)
# FIFO: the ready groups, oldest first.
_FIFO_GROUPS_SQL = (
    "SELECT name, ready_at FROM groups INDEXED BY groups_ready"
    " WHERE queue = ? AND ready_at <= ? ORDER BY ready_at, name LIMIT ?"
)
# A FIFO group's messages after a key, for its run.
_RUN_SQL = (
    f"SELECT {CANDIDATE_COLUMNS}, channel FROM messages INDEXED BY messages_group"
    " WHERE queue = ? AND grp = ? AND key > ? ORDER BY key LIMIT ?"
)
# FAIR: the ready groups, least recently served first.
_FAIR_GROUPS_SQL = (
    "SELECT name FROM groups INDEXED BY groups_turn WHERE queue = ? AND ready_at <= ?"
    " ORDER BY turn, name LIMIT ?"
)


class Groups:
    """The groups of one queue in one operation."""

    def __init__(self, tx: _Tx, found: _Queue) -> None:
        self.tx = tx
        self.found = found
        self._delivered_groups: set[str] = set()  # FIFO: the last pick's groups that deliver

    # -- upkeep ------------------------------------------------------------------------------

    def sent(self, rows: Sequence[tuple[str | None, float]]) -> None:
        """New messages (group, visible_at), in key order: a group new to the queue is ready
        when its first message is visible (FIFO), or when its first visible one is (FAIR)."""
        first: dict[str, float] = {}
        for group, visible_at in rows:
            if group is None:
                continue
            if group not in first:
                first[group] = visible_at
            elif self.found.config.ordering is Ordering.FAIR:
                first[group] = min(first[group], visible_at)
        if self.found.config.ordering is Ordering.FIFO:
            # An existing group keeps its head (the new messages come after it).
            sql = "INSERT OR IGNORE INTO groups (queue, name, ready_at) VALUES (?, ?, ?)"
        else:
            sql = (
                "INSERT INTO groups (queue, name, ready_at) VALUES (?, ?, ?)"
                " ON CONFLICT (queue, name) DO UPDATE SET"
                " ready_at = min(ready_at, excluded.ready_at)"
            )
        self.tx.conn.executemany(sql, [(self.found.id, g, at) for g, at in first.items()])

    def of_keys(self, keys: Iterable[int]) -> set[str]:
        """The groups of these messages (before they change)."""
        found: set[str] = set()
        for chunk in _chunks(list(keys)):
            found.update(
                group
                for (group,) in self.tx.conn.execute(
                    "SELECT DISTINCT grp FROM messages WHERE key IN (SELECT value FROM json_each(?))"
                    " AND grp IS NOT NULL",
                    (json.dumps(list(chunk)),),
                )
            )
        return found

    def of_attempt(self, attempt_id: str) -> set[str]:
        """The groups of the messages a delete by this attempt id would delete."""
        return {
            group
            for (group,) in self.tx.conn.execute(
                "SELECT DISTINCT grp FROM messages WHERE queue = ? AND attempt_id = ?"
                " AND grp IS NOT NULL",
                (self.found.id, attempt_id),
            )
        }

    def refresh(self, names: Iterable[str | None]) -> None:
        """Read each named group's ready_at again from its messages; an empty group's row goes."""
        if not self.found.config.grouped:
            return
        conn, queue_id = self.tx.conn, self.found.id
        gone: list[tuple[int, str]] = []
        ready: list[tuple[int, str, float]] = []
        wanted = sorted({name for name in names if name is not None})
        for name, at in self._ready_ats(wanted):
            if at is None:
                gone.append((queue_id, name))
            else:
                ready.append((queue_id, name, at))
        if gone:
            conn.executemany("DELETE FROM groups WHERE queue = ? AND name = ?", gone)
        if ready:
            conn.executemany(_SET_READY_SQL, ready)

    def _ready_ats(self, names: list[str]) -> list[tuple[str, float | None]]:
        """Each group's ready_at from its messages: FIFO from the first _MEMBERS_AHEAD of each,
        in one statement (a group that needs more is read whole, alone)."""
        conn, queue_id = self.tx.conn, self.found.id
        if self.found.config.ordering is not Ordering.FIFO:
            return [
                (name, conn.execute(_FAIR_READY_SQL, (queue_id, name)).fetchone()[0])
                for name in names
            ]
        found: list[tuple[str, float | None]] = []
        for chunk in _chunks(names):
            members: dict[int, list[rules.GroupMember]] = {}
            for position, *row in conn.execute(_MANY_MEMBERS_SQL, (queue_id, json.dumps(chunk))):
                members.setdefault(position, []).append(rules.GroupMember(*row))
            for position, name in enumerate(chunk):
                rows = members.get(position, [])
                if len(rows) == _MEMBERS_AHEAD and all(r.delivery_count for r in rows[1:]):
                    rows = [
                        rules.GroupMember(*row)
                        for row in conn.execute(_MEMBERS_SQL, (queue_id, name))
                    ]
                found.append((name, rules.fifo_ready_at(rows)))
        return found

    def redrive_plan(
        self, moves: list[tuple[_Queue, int]]
    ) -> tuple[list[tuple[_Queue, int]], dict[int, str | None]]:
        """A redrive's moves that domain.groups.redrive_group allows, and each moved message's
        group now."""
        groups_of: dict[int, str | None] = {}
        for chunk in _chunks([key for _, key in moves]):
            groups_of.update(
                self.tx.conn.execute(
                    "SELECT key, grp FROM messages WHERE key IN (SELECT value FROM json_each(?))",
                    (json.dumps(list(chunk)),),
                ).fetchall()
            )
        kept = [(to, key) for to, key in moves if rules.redrive_group(groups_of[key], to.config)[0]]
        return kept, groups_of

    def redriven(self, moves: list[tuple[_Queue, int]], groups_of: dict[int, str | None]) -> None:
        """After a redrive's moves: the messages' groups in their destinations, and the groups
        of both sides read again."""
        self.refresh(groups_of[key] for _, key in moves)
        by_queue: dict[int, tuple[_Queue, set[str | None]]] = {}
        renamed: list[tuple[str | None, int]] = []
        for to, key in moves:
            _, group = rules.redrive_group(groups_of[key], to.config)
            if group != groups_of[key]:
                renamed.append((group, key))
            by_queue.setdefault(to.id, (to, set()))[1].add(group)
        self.tx.conn.executemany("UPDATE messages SET grp = ? WHERE key = ?", renamed)
        for to, names in by_queue.values():
            Groups(self.tx, to).refresh(names)

    def purge(self) -> None:
        self.tx.conn.execute("DELETE FROM groups WHERE queue = ?", (self.found.id,))

    # -- receive -----------------------------------------------------------------------------

    def pick(
        self, limit: int, channel_filter: str, max_bytes: int | None
    ) -> tuple[list[int], list[str]]:
        """The keys a receive delivers, in order, and the groups it served (dead-lettering the
        exhausted candidates it meets on the way, as _Tx._pick does)."""
        if limit <= 0:
            return [], []
        dlq = self.tx._dead_letter_target(self.found)
        if self.found.config.ordering is Ordering.FIFO:
            keys, served, dead = self._fifo(limit, channel_filter, max_bytes, dlq is not None)
        else:
            keys, served, dead = self._fair(limit, channel_filter, max_bytes, dlq is not None)
        if dead:
            assert dlq is not None
            moved = self.of_keys(row.key for row in dead)
            from .retries import Retries  # here: retries.py imports this module

            Retries(self.tx).move_to_dead_letter_queue(self.found, dlq, dead)
            Groups(self.tx, dlq).refresh(moved)
            self.refresh(moved - set(served))
        return keys, served

    def _exhausted(self, row: _Candidate, dead_letters: bool) -> bool:
        return dead_letters and decide.due_for_dead_letter(row.delivery_count, self.found.config)

    def _fifo(
        self, limit: int, channel_filter: str, max_bytes: int | None, dead_letters: bool
    ) -> tuple[list[int], list[str], list[_Candidate]]:
        """The ready groups oldest first, each giving its run as far as the room goes
        (domain.groups, FIFO)."""
        conn, queue_id, now = self.tx.conn, self.found.id, self.tx.now
        chosen = [name for name, _ in conn.execute(_FIFO_GROUPS_SQL, (queue_id, now, limit))]
        keys: list[int] = []
        served: list[str] = []
        dead: list[_Candidate] = []
        size = 0
        self._delivered_groups = set()
        for name in chosen:
            after = 0
            while len(keys) < limit and not bytes_reached(size, max_bytes):
                want = limit - len(keys)
                rows = conn.execute(_RUN_SQL, (queue_id, name, after, want)).fetchall()
                ended = len(rows) < want
                for row in rows:
                    candidate = _Candidate(*row[:5])
                    if candidate.visible_at > now or not channel_matches(row[5], channel_filter):
                        ended = True  # the run ends here
                        break
                    after = candidate.key
                    if name not in served:
                        served.append(name)
                    if self._exhausted(candidate, dead_letters):
                        dead.append(candidate)
                        continue
                    keys.append(candidate.key)
                    self._delivered_groups.add(name)
                    size += candidate.size
                    if len(keys) >= limit or bytes_reached(size, max_bytes):
                        break
                if ended:
                    break
            if len(keys) >= limit or bytes_reached(size, max_bytes):
                break
        return keys, served, dead

    def _fair(
        self, limit: int, channel_filter: str, max_bytes: int | None, dead_letters: bool
    ) -> tuple[list[int], list[str], list[_Candidate]]:
        conn, queue_id, now = self.tx.conn, self.found.id, self.tx.now
        clause, clause_params = _channel_clause(channel_filter)
        sql = (
            f"SELECT {CANDIDATE_COLUMNS} FROM messages INDEXED BY messages_group_visible"
            f" WHERE queue = ? AND grp = ? AND visible_at <= ?{clause}"
            " AND (visible_at, key) > (?, ?) ORDER BY visible_at, key LIMIT ?"
        )
        chosen = [name for (name,) in conn.execute(_FAIR_GROUPS_SQL, (queue_id, now, limit))]
        cursors: dict[str, tuple[float, int]] = dict.fromkeys(chosen, (float("-inf"), -1))
        keys: list[int] = []
        served: list[str] = []
        dead: list[_Candidate] = []
        taken = 0
        while len(keys) < limit and chosen and not bytes_reached(taken, max_bytes):
            share = rules.fair_share(limit - len(keys), len(chosen))
            more: list[str] = []
            for name in chosen:
                params: list[Any] = [queue_id, name, now, *clause_params, *cursors[name], share]
                rows = [_Candidate(*row) for row in conn.execute(sql, params)]
                for row in rows:
                    cursors[name] = (row.visible_at, row.key)
                    if self._exhausted(row, dead_letters):
                        dead.append(row)
                        continue
                    keys.append(row.key)
                    taken += row.size
                    if len(keys) >= limit or bytes_reached(taken, max_bytes):
                        break
                if rows:  # to the back, in the order groups were last served
                    if name in served:
                        served.remove(name)
                    served.append(name)
                if len(keys) >= limit or bytes_reached(taken, max_bytes):
                    break
                if len(rows) == share:
                    more.append(name)
            chosen = more
        return keys, served, dead

    def delivered(self, served: Sequence[str], timeout: float) -> None:
        """After the delivery of a pick: the served groups' ready_at, and (FAIR) their turn,
        behind every other group of the queue. A FIFO group that delivered is ready when the
        lease (at now + timeout) ends: its run's first message is its head."""
        if self.found.config.ordering is Ordering.FIFO:
            leased = self._delivered_groups
            self.tx.conn.executemany(
                "UPDATE groups SET ready_at = ? WHERE queue = ? AND name = ?",
                [(self.tx.now + timeout, self.found.id, name) for name in served if name in leased],
            )
            self.refresh(name for name in served if name not in leased)
            return
        self.refresh(served)
        if self.found.config.ordering is Ordering.FAIR and served:
            (last,) = self.tx.conn.execute(
                "SELECT COALESCE(MAX(turn), 0) FROM groups WHERE queue = ?", (self.found.id,)
            ).fetchone()
            self.tx.conn.executemany(
                "UPDATE groups SET turn = ? WHERE queue = ? AND name = ?",
                [(last + 1 + i, self.found.id, name) for i, name in enumerate(served)],
            )
