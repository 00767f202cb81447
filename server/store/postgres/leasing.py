"""PostgresStore's lease operations: ChangeVisibility, DeleteMessages (the one-statement ack and
the transaction way), UpdateMessage and redrive; the decisions are domain.leases'."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from psycopg.errors import UniqueViolation

from ...domain import leases as decide
from ...domain.groups import redrive_group
from ...domain.types import (
    AllDeleted,
    DeadLetterOutcome,
    DeleteOutcome,
    LeaseResult,
    LeaseStatus,
    UpdatedMessage,
    VisibilityChange,
)
from ...errors import (
    LeaseRejected,
    NoDeadLetterQueue,
)
from .groups import Groups
from .settings import (
    IN_FLIGHT_NOTIFY_MARGIN,
)
from .statements import (
    DEAD_LETTER_SQL,
    DELETE_ATTEMPT_SQL,
    DELETE_KEYS_SQL,
    DELETE_RECEIPTS_SQL,
    GRANT_ONE_SQL,
    REDRIVE_SQL,
    _channel_clause,
    _channel_param,
    candidates_sql,
)
from .transaction import _encode_attributes, _Queue, _Tx

if TYPE_CHECKING:
    from .store import PostgresStore

T = TypeVar("T")


class LeaseOps:
    """The lease operations of a PostgresStore."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def change_visibility(
        self, name: str, changes: list[VisibilityChange]
    ) -> list[LeaseResult]:
        async def op(tx: _Tx) -> list[LeaseResult]:
            found = await tx.queue(name)
            decoded = [tx.codec.decode(c.receipt, found.uid) for c in changes]
            groups = Groups(tx, found)
            locked = await groups.locked_groups_of(d[0] for d in decoded if d is not None)
            leases, tombstones = await tx.lookup(found, decoded)
            results, changed = decide.apply_visibility_changes(
                changes, decoded, leases, tombstones, tx.now, found.config
            )
            await tx.write_leases(list(changed.values()))
            await groups.refresh(locked, locked=True)
            if changed:
                # A release, or a lease that now ends sooner: waiters elsewhere look again.
                tx.published.add(name)
            return results

        return await self.store._run(op)

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
        known, codec = self.store._known.get(name), self.store._codec
        if known is None or codec is None or not receipts:
            return None
        queue_id, uid = known
        decoded = codec.decode_many(receipts, uid)
        if None in decoded:
            return None
        keys = [d[0] for d in decoded]  # type: ignore[index]  # no None: checked above
        if len(set(keys)) != len(keys):
            return None  # a repeat sees the first one's delete: base.py's order, entry by entry
        try:
            rows = await self.store._statement(
                DELETE_RECEIPTS_SQL,
                generic=True,
                params={
                    "name": name,
                    "queue": queue_id,
                    "uid": uid,
                    "now": self.store._clock_now(),
                    "keys": keys,
                    "seqs": [d[1] for d in decoded if d is not None],
                    "margin": IN_FLIGHT_NOTIFY_MARGIN,
                },
            )
        except UniqueViolation:
            return None  # a tombstone of one of the keys exists (see DELETE_RECEIPTS_SQL)
        if not rows:
            self.store._known.pop(name, None)  # gone, or made again: learn it anew
            return None
        now, _, has_expired, deleted, near_limit = rows[0]
        if deleted and near_limit:
            self.store._publish([name])  # in-flight room for waiters held by max_in_flight
        if has_expired:
            await self.store._sweep(queue_id, now)
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
            self.store._known[name] = (found.id, found.uid)
            decoded = [tx.codec.decode(r, found.uid) for r in receipts]
            groups = Groups(tx, found)
            locked: list[str] = []
            if found.config.grouped:
                touched = await groups.of_keys(d[0] for d in decoded if d is not None)
                for attempt_id in attempt_ids:
                    touched |= await groups.of_attempt(attempt_id) if attempt_id else set()
                locked = await groups.lock(touched)
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
            await groups.refresh(locked, locked=True)
            return DeleteOutcome(results, attempt_counts, deleted)

        return await self.store._run(op)

    # -- dead-lettering on request --------------------------------------------------------------

    async def dead_letter(self, name: str, receipts: list[str], reason: str) -> DeadLetterOutcome:
        async def op(tx: _Tx) -> DeadLetterOutcome:
            found = await tx.queue(name)
            dlq = await self.store._receiving._dead_letter_target(tx, found)
            if dlq is None:
                raise NoDeadLetterQueue(name)
            decoded = [tx.codec.decode(r, found.uid) for r in receipts]
            leases, tombstones = await tx.lookup(found, decoded)
            results, moved = decide.apply_dead_letters(
                receipts, decoded, leases, tombstones, tx.now
            )
            source, target = Groups(tx, found), Groups(tx, dlq)
            locked = await source.locked_groups_of(moved) if moved else []
            if locked and dlq.config.grouped:
                await target.lock(locked)
            if moved:
                await tx.run(
                    DEAD_LETTER_SQL,
                    tx.p(
                        found,
                        dlq=dlq.id,
                        retention=dlq.config.message_retention,
                        source=found.name,
                        keys=moved,
                        reason=reason or None,
                    ),
                )
                # Room under the source's limits; new messages in the dead letter queue.
                tx.published.update((name, dlq.name))
                await source.refresh(locked, locked=True)
                await target.refresh(locked, locked=True)
            return DeadLetterOutcome(results, moved, dlq.name)

        return await self.store._run(op)

    async def _redrive_grouped(
        self, tx: _Tx, found: _Queue, moves: list[tuple[_Queue, int]]
    ) -> list[tuple[_Queue, int]]:
        """A redrive from or to a grouped queue: the moves domain.groups.redrive_group allows,
        each message's group in its destination, the groups of both sides locked and read
        again."""
        rows = await tx.rows(
            "SELECT key, grp FROM messages WHERE key = ANY(%(keys)b::bigint[])",
            {"keys": [key for _, key in moves]},
        )
        groups_of: dict[int, str | None] = dict(rows)
        kept = [(to, k) for to, k in moves if redrive_group(groups_of[k], to.config)[0]]
        source = Groups(tx, found)
        locked = await source.lock(groups_of[k] for _, k in kept)
        targets: dict[int, tuple[_Queue, set[str | None]]] = {}
        for to, key in kept:
            targets.setdefault(to.id, (to, set()))[1].add(
                redrive_group(groups_of[key], to.config)[1]
            )
        for to, names in targets.values():
            await Groups(tx, to).lock(names)
        if kept:
            await tx.run(
                REDRIVE_SQL.replace("attempt_id = NULL", "attempt_id = NULL, grp = v.grp")
                .replace("%(expires)b::float8[])", "%(expires)b::float8[], %(groups)b::text[])")
                .replace("AS v(key, queue, expires_at)", "AS v(key, queue, expires_at, grp)"),
                tx.p(
                    found,
                    keys=[key for _, key in kept],
                    queues=[to.id for to, _ in kept],
                    expires=[decide.redrive_expiry(tx.now, to.config) for to, _ in kept],
                    groups=[redrive_group(groups_of[key], to.config)[1] for to, key in kept],
                ),
            )
        await source.refresh(locked, locked=True)
        for to, names in targets.values():
            await Groups(tx, to).refresh(names, locked=True)
        tx.published.update(to.name for to, _ in kept)
        return kept

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
            groups = Groups(tx, found)
            locked = await groups.locked_groups_of([key])
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
                lease,
                tombstones.get(key),
                seq,
                tx.now,
                found.config,
                stored,
                body,
                attributes,
                visibility_timeout,
            )
            if visibility_timeout is not None:
                tx.published.add(name)
            await tx.run(
                "UPDATE messages SET body = %(body)b, attributes = %(attributes)b::jsonb,"
                " visible_at = %(visible_at)b, leased = %(leased)b, backoff = %(backoff)b,"
                " receipt_seq = receipt_seq + 1,"
                " attempt_id = CASE WHEN %(clear)b THEN NULL ELSE attempt_id END"
                " WHERE key = %(key)b",
                {
                    "body": new_body,
                    "attributes": _encode_attributes(new_attributes),
                    "visible_at": lease.visible_at,
                    "leased": lease.leased,
                    "backoff": lease.backoff,
                    "clear": lease.clear_attempt,
                    "key": key,
                },
            )
            if decide.update_leases(seq, visibility_timeout):
                await tx.run(GRANT_ONE_SQL, tx.p(found))
            await groups.refresh(locked, locked=True)
            return UpdatedMessage(key, tx.codec.encode(found.uid, key, seq + 1), lease.visible_at)

        return await self.store._run(op)

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
                    candidates_sql(
                        clause, after=cursor is not None, columns="key, visible_at, source_queue"
                    ),
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
            grouped = found.config.grouped or any(to.config.grouped for to, _ in moves)
            if moves and grouped:
                moves = await self._redrive_grouped(tx, found, moves)
            elif moves:
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

        return await self.store._run(op)
