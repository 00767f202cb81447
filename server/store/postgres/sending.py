"""PostgresStore's sends: the one-statement send, dedup claims in a transaction (see the package
docstring, One statement per RPC)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...domain import leases as decide
from ...domain.groups import stored_group
from ...domain.rules import new_message_ids
from ...domain.types import (
    BodyBatch,
    NewMessage,
    Ordering,
    SendOutcome,
    SentBatch,
)
from ...errors import (
    QueueNotFound,
)
from ..base import send_batch_by_messages
from .groups import Groups
from .statements import (
    INSERT_MESSAGES_SQL,
    SEND_BODIES_SQL,
    SEND_SQL,
)
from .transaction import _encode_attributes, _Queue, _Tx

if TYPE_CHECKING:
    from .store import PostgresStore


class Sends:
    """The sends of a PostgresStore (its pool, its statements, its notifications)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    # -- send --------------------------------------------------------------------------------

    async def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        if not any(m.dedup_id or m.group for m in messages):
            # Nothing to deduplicate: one statement (which writes nothing to a grouped queue:
            # that takes the transaction way).
            ids = new_message_ids(len(messages))
            keys = await self._insert(
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
            if keys is not None:
                return [SendOutcome(message_id, key=keys.get(message_id)) for message_id in ids]

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
                "message_ids": [],
                "bodies": [],
                "attributes": [],
                "channels": [],
                "expires": [],
                "visibles": [],
                "groups": [],
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
                rows["groups"].append(stored_group(m.group, config))
                outcomes.append(SendOutcome(message_id))
            if rows["message_ids"]:
                keys = dict(await tx.rows(INSERT_MESSAGES_SQL, tx.p(found, **rows)))
                for outcome in outcomes:
                    if not outcome.duplicate:
                        outcome.key = keys[outcome.message_id]
                tx.published.add(name)
                if config.grouped:
                    await Groups(tx, found).sent(list(zip(rows["groups"], rows["visibles"])))
            return outcomes

        return await self.store._run(op)

    async def send_batch(self, name: str, batch: BodyBatch) -> SentBatch:
        """Store.send_batch: bodies alone in one statement (send_bodies); with dedup ids,
        through send (its dedup claims)."""
        if batch.dedup_ids is None:
            return SentBatch(await self.send_bodies(name, batch.bodies))
        return await send_batch_by_messages(self, name, batch)  # type: ignore[arg-type]  # a part of the store

    async def send_bodies(self, name: str, bodies: list[bytes]) -> list[str]:
        """Send messages that are only a body: their ids, one statement, no object per message."""
        ids = new_message_ids(len(bodies))
        if (
            await self._insert(name, SEND_BODIES_SQL, {"message_ids": ids, "bodies": bodies})
            is None
        ):
            return [o.message_id for o in await self.send(name, [NewMessage(b) for b in bodies])]
        return ids

    async def _insert(
        self, name: str, statement: str, rows: dict[str, list[Any]]
    ) -> dict[str, int] | None:
        """SEND_SQL or SEND_BODIES_SQL (messages without dedup ids): rows are its arrays. The
        keys of the rows by message id (SEND_SQL's; none for SEND_BODIES_SQL); None when the
        queue is grouped: nothing was written (the caller goes the transaction way)."""
        answer = await self.store._statement(
            statement,
            generic=True,
            params={"name": name, "now": self.store._clock_now(), **rows},
        )
        if not answer:
            raise QueueNotFound(name)
        now, queue_id, has_expired, count, ordering, *sent = answer[0]
        if count:
            self.store._publish([name])
        if ordering != Ordering.NONE:
            return None  # the transaction way sweeps, and reads the groups again
        if has_expired:
            await self.store._sweep(queue_id, now)
        return dict(zip(*sent)) if sent and count else {}

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
                tx.p(
                    found, ids=dedup_ids, mids=[first[i] for i in dedup_ids], until=tx.now + window
                ),
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
