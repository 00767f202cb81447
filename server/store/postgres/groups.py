"""PostgresStore's message groups, inside an operation's transaction (`_Tx`): the `groups` rows
of FIFO and FAIR queues (schema.py, version 6) and the receive's pick over them, by the rules
of domain.groups.

Locks: a receive takes the ready groups' rows FOR UPDATE SKIP LOCKED before it reads their
messages, and every other operation that changes a group's messages (send, ack, lease change,
update, dead-lettering, redrive) locks the group's row first (in name order), then reads the
group's messages again in a later statement (READ COMMITTED: a new snapshot, after the lock)
to write its ready_at. So two replicas never deliver from one group at once, and a group's row
always reflects what committed before it was written. A receive also checks each group's state
from its messages (fifo_ready_at) rather than trusting ready_at alone. The expiry sweep answers
the groups of what it removed, which the operation then reads again (_Tx.open)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ...domain import groups as rules
from ...domain import leases as decide
from ...domain.rules import bytes_reached, channel_matches
from ...domain.types import Ordering
from .statements import SIZE_SQL, _channel_clause, _channel_param

if TYPE_CHECKING:
    from .transaction import _Queue, _Tx

_LOCK_SQL = (
    "SELECT name FROM groups WHERE queue = %(queue)b AND name = ANY(%(names)b::text[])"
    " ORDER BY name FOR UPDATE"
)
_MEMBERS_SQL = (
    "SELECT key, visible_at, leased, delivery_count, channel,"
    f" {SIZE_SQL} FROM messages WHERE queue = %(queue)b AND grp = %(name)b AND key > %(after)b"
    " AND expires_at + 0 > %(now)b"
    " ORDER BY key LIMIT %(limit)b"
)
_FAIR_READY_SQL = (
    "SELECT (SELECT visible_at FROM messages WHERE queue = %(queue)b AND grp = %(name)b"
    " AND expires_at + 0 > %(now)b ORDER BY visible_at LIMIT 1)"
)
_FIFO_GROUPS_SQL = (
    "SELECT name FROM groups WHERE queue = %(queue)b AND ready_at <= %(now)b"
    " ORDER BY ready_at, name LIMIT %(limit)b FOR UPDATE SKIP LOCKED"
)
_FAIR_GROUPS_SQL = (
    "SELECT name FROM groups WHERE queue = %(queue)b AND ready_at <= %(now)b"
    " ORDER BY turn, name LIMIT %(limit)b FOR UPDATE SKIP LOCKED"
)
_PAGE = 256


class Groups:
    """The groups of one queue in one operation."""

    def __init__(self, tx: _Tx, found: _Queue) -> None:
        self.tx = tx
        self.found = found

    @property
    def fifo(self) -> bool:
        return self.found.config.ordering is Ordering.FIFO

    # -- upkeep ------------------------------------------------------------------------------

    async def sent(self, rows: Sequence[tuple[str | None, float]]) -> None:
        """New messages (group, visible_at), in key order: each group's row made or locked."""
        first: dict[str, float] = {}
        for group, visible_at in rows:
            if group is None:
                continue
            if group not in first or not self.fifo:
                first[group] = min(first.get(group, visible_at), visible_at)
        names = sorted(first)
        # FIFO: an existing group keeps its head (the new messages come after it); the update
        # is only its row lock, against a concurrent refresh that would drop it.
        keep = "g.ready_at" if self.fifo else "LEAST(g.ready_at, EXCLUDED.ready_at)"
        await self.tx.run(
            "INSERT INTO groups AS g (queue, name, ready_at)"
            " SELECT %(queue)b, n, r FROM unnest(%(names)b::text[], %(ready)b::float8[]) AS x(n, r)"
            f" ON CONFLICT (queue, name) DO UPDATE SET ready_at = {keep}",
            self.tx.p(self.found, names=names, ready=[first[n] for n in names]),
        )

    async def lock(self, names: Iterable[str | None]) -> list[str]:
        """Lock these groups' rows (name order); the names, sorted."""
        wanted = sorted({n for n in names if n is not None})
        if wanted and self.found.config.grouped:
            await self.tx.rows(_LOCK_SQL, self.tx.p(self.found, names=wanted))
        return wanted

    async def of_keys(self, keys: Iterable[int]) -> set[str]:
        rows = await self.tx.rows(
            "SELECT DISTINCT grp FROM messages WHERE key = ANY(%(keys)b::bigint[])"
            " AND grp IS NOT NULL",
            {"keys": sorted(set(keys))},
        )
        return {row[0] for row in rows}

    async def of_attempt(self, attempt_id: str) -> set[str]:
        rows = await self.tx.rows(
            "SELECT DISTINCT grp FROM messages WHERE queue = %(queue)b"
            " AND attempt_id = %(attempt)b AND grp IS NOT NULL",
            self.tx.p(self.found, attempt=attempt_id),
        )
        return {row[0] for row in rows}

    async def locked_groups_of(self, keys: Iterable[int]) -> list[str]:
        """The groups of these messages, locked: what an operation on them calls first."""
        if not self.found.config.grouped:
            return []
        return await self.lock(await self.of_keys(keys))

    async def members(self, name: str, limit: int) -> list[tuple[Any, ...]]:
        """The group's first messages in key order, as far as fifo_ready_at reads (and at
        least `limit`): (key, visible_at, live lease, delivery_count, channel, size)."""
        found: list[tuple[Any, ...]] = []
        after = 0
        while True:
            page = await self.tx.rows(
                _MEMBERS_SQL,
                self.tx.p(self.found, name=name, after=after, limit=max(limit, _PAGE)),
            )
            found += page
            if len(page) < max(limit, _PAGE):
                return found
            if len(found) >= limit and any(row[3] == 0 for row in found[1:]):
                return found
            after = page[-1][0]

    async def ready_at(self, name: str) -> float | None:
        if self.fifo:
            members = await self.members(name, 1)
            return rules.fifo_ready_at(rules.GroupMember(*row[:4]) for row in members)
        row = await self.tx.row(_FAIR_READY_SQL, self.tx.p(self.found, name=name))
        return None if row is None else row[0]

    async def refresh(self, names: Iterable[str | None], locked: bool = False) -> None:
        """Write each group's ready_at from its messages (rows locked first unless `locked`);
        an empty group's row goes."""
        if not self.found.config.grouped:
            return
        wanted = sorted({n for n in names if n is not None})
        if not wanted:
            return
        if not locked:
            await self.lock(wanted)
        gone: list[str] = []
        ready: dict[str, float] = {}
        for name in wanted:
            at = await self.ready_at(name)
            if at is None:
                gone.append(name)
            else:
                ready[name] = at
        if gone:
            await self.tx.run(
                "DELETE FROM groups WHERE queue = %(queue)b AND name = ANY(%(names)b::text[])",
                self.tx.p(self.found, names=gone),
            )
        if ready:
            names_ready = sorted(ready)
            await self.tx.run(
                "INSERT INTO groups AS g (queue, name, ready_at)"
                " SELECT %(queue)b, n, r FROM unnest(%(names)b::text[], %(ready)b::float8[])"
                " AS x(n, r) ON CONFLICT (queue, name) DO UPDATE SET ready_at = EXCLUDED.ready_at",
                self.tx.p(self.found, names=names_ready, ready=[ready[n] for n in names_ready]),
            )

    async def purge(self) -> None:
        await self.tx.run("DELETE FROM groups WHERE queue = %(queue)b", self.tx.p(self.found))

    # -- receive -----------------------------------------------------------------------------

    async def pick(
        self, limit: int, channel_filter: str, max_bytes: int | None, dead_letters: bool
    ) -> tuple[list[int], list[str], list[int], list[str]]:
        """(keys to deliver in order, groups served, keys to dead-letter, groups visited: all
        locked by this transaction, to refresh after the delivery)."""
        if limit <= 0:
            return [], [], [], []
        if self.fifo:
            return await self._fifo(limit, channel_filter, max_bytes, dead_letters)
        return await self._fair(limit, channel_filter, max_bytes, dead_letters)

    def _exhausted(self, delivery_count: int, dead_letters: bool) -> bool:
        return dead_letters and decide.due_for_dead_letter(delivery_count, self.found.config)

    async def _fifo(
        self, limit: int, channel_filter: str, max_bytes: int | None, dead_letters: bool
    ) -> tuple[list[int], list[str], list[int], list[str]]:
        """As the SQLite store's: the ready groups (locked) oldest first, each giving its run
        as far as the room goes (domain.groups, FIFO)."""
        now = self.tx.now
        chosen = [
            row[0]
            for row in await self.tx.rows(_FIFO_GROUPS_SQL, self.tx.p(self.found, limit=limit))
        ]
        keys: list[int] = []
        served: list[str] = []
        dead: list[int] = []
        size = 0
        for name in chosen:
            after = 0
            while len(keys) < limit and not bytes_reached(size, max_bytes):
                want = limit - len(keys)
                rows = await self.tx.rows(
                    _MEMBERS_SQL, self.tx.p(self.found, name=name, after=after, limit=want)
                )
                ended = len(rows) < want
                for key, visible_at, _, delivery_count, channel, row_size in rows:
                    if visible_at > now or not channel_matches(channel, channel_filter):
                        ended = True  # the run ends here
                        break
                    after = key
                    if name not in served:
                        served.append(name)
                    if self._exhausted(delivery_count, dead_letters):
                        dead.append(key)
                        continue
                    keys.append(key)
                    size += row_size
                    if len(keys) >= limit or bytes_reached(size, max_bytes):
                        break
                if ended:
                    break
            if len(keys) >= limit or bytes_reached(size, max_bytes):
                break
        return keys, served, dead, chosen

    async def _fair(
        self, limit: int, channel_filter: str, max_bytes: int | None, dead_letters: bool
    ) -> tuple[list[int], list[str], list[int], list[str]]:
        clause = _channel_clause(channel_filter)
        sql = (
            f"SELECT key, visible_at, delivery_count, {SIZE_SQL} FROM messages"
            " WHERE queue = %(queue)b AND grp = %(name)b AND visible_at <= %(now)b"
            f" AND expires_at + 0 > %(now)b{clause}"
            " AND (visible_at, key) > (%(after_visible_at)b, %(after_key)b)"
            " ORDER BY visible_at, key LIMIT %(limit)b"
        )
        names = [
            row[0]
            for row in await self.tx.rows(_FAIR_GROUPS_SQL, self.tx.p(self.found, limit=limit))
        ]
        chosen = list(names)
        cursors: dict[str, tuple[float, int]] = dict.fromkeys(chosen, (float("-inf"), -1))
        keys: list[int] = []
        served: list[str] = []
        dead: list[int] = []
        taken = 0
        while len(keys) < limit and chosen and not bytes_reached(taken, max_bytes):
            share = rules.fair_share(limit - len(keys), len(chosen))
            more: list[str] = []
            for name in chosen:
                after_visible_at, after_key = cursors[name]
                rows = await self.tx.rows(
                    sql,
                    self.tx.p(
                        self.found,
                        name=name,
                        channel=_channel_param(channel_filter),
                        after_visible_at=after_visible_at,
                        after_key=after_key,
                        limit=share,
                    ),
                )
                for key, visible_at, delivery_count, size in rows:
                    cursors[name] = (visible_at, key)
                    if self._exhausted(delivery_count, dead_letters):
                        dead.append(key)
                        continue
                    keys.append(key)
                    taken += size
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
        return keys, served, dead, names

    async def delivered(self, served: Sequence[str], visited: Sequence[str]) -> None:
        """After the delivery of a pick: the visited groups' ready_at (their rows are locked),
        and (FAIR) the served groups' turn, behind every other group of the queue."""
        await self.refresh(visited, locked=True)
        if not self.fifo and served:
            row = await self.tx.row(
                "SELECT COALESCE(max(turn), 0) FROM groups WHERE queue = %(queue)b",
                self.tx.p(self.found),
            )
            last = 0 if row is None else row[0]
            await self.tx.run(
                "UPDATE groups g SET turn = x.t FROM unnest(%(names)b::text[], %(turns)b::bigint[])"
                " AS x(n, t) WHERE g.queue = %(queue)b AND g.name = x.n",
                self.tx.p(
                    self.found,
                    names=list(served),
                    turns=[last + 1 + i for i in range(len(served))],
                ),
            )
