"""One operation's view of the database: the SQL behind each Store method, run by the writer."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, TypeVar

from ...domain import leases as decide
from ...domain.leases import Lease, Tombstone, fence, fence_lease, lease_result
from ...domain.rules import bytes_reached, check_dead_letter_pair
from ...domain.types import (
    AllDeleted,
    DeadLetterOutcome,
    DeleteOutcome,
    LeaseResult,
    LeaseStatus,
    NewMessage,
    QueueConfig,
    QueueInfo,
    SendOutcome,
    UpdatedMessage,
    VisibilityChange,
)
from ...errors import (
    InvalidArgument,
    LeaseRejected,
    OverLimit,
    QueueAlreadyExists,
    QueueInUse,
    QueueNotFound,
)
from ...receipts import ReceiptCodec, new_queue_uid
from ..config_rows import config_from_values, config_values
from .groups import Groups
from .maintenance import Maintenance
from .reads import Decoded, Delivery, StatsCounters
from .retries import Retries
from .schema import (
    _CONFIG_FIELDS,
    ADD_LIFETIME_SQL,
    ATTEMPT_LEASES_SQL,
    CANDIDATE_COLUMNS,
    COUNT_CHANNEL_SQL,
    DELETE_CURRENT_SQL,
    DELIVER_SQL,
    IN_FLIGHT_SQL,
    INSERT_TOMBSTONES_SQL,
    MARK_BACKOFF_SQL,
    MAX_LIFETIMES,
    NEXT_VISIBLE_SQL,
    QUEUE_BY_NAME_SQL,
    QUEUE_COLUMNS,
    SIZE_SQL,
    SWEEP_SQL,
    TOMBSTONE_RUN_SQL,
    _Candidate,
    _channel_clause,
    _chunks,
    _decode_attributes,
    _encode_attributes,
    _runs,
    candidates_sql,
    leases_by_key_sql,
    picked_sql,
)
from .sending import Sends

T = TypeVar("T")

# Stale tombstone/dedup/attempt rows are removed at most this often (store clock), in slices
# (maintenance.HOUSEKEEPING_ROWS) so that one slice never stalls the writer.
HOUSEKEEPING_SECONDS = 60.0

# Candidates read per statement by a receive on a queue with a dead letter queue (see _pick).
PICK_READ_AHEAD = 64


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
        config = config_from_values(row[4 : 4 + n])
        dead_lettered, expired, deleted = row[4 + n : 7 + n]
        return cls(row[0], row[1], row[2], row[3], config, dead_lettered, expired, deleted)

    def info(self) -> QueueInfo:
        return QueueInfo(self.name, self.config, self.create_time)


class _Tx:
    """One operation: the connection (inside the group's transaction, inside this operation's
    savepoint), the instant `now` read once, the receipt codec and the store's lease ceilings
    (see `_delivery_limit`). Run by the writer (on the event loop or its thread, writer.py)."""

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

    def _count(self, queue_id: int, channels: Iterable[str], sign: int) -> None:
        """Add (sign 1) or take away (-1) one message per channel named in the queue's
        channel_counts: every operation that adds or removes messages calls this."""
        self.conn.executemany(
            COUNT_CHANNEL_SQL,
            [(queue_id, channel, sign * n) for channel, n in Counter(channels).items()],
        )

    def _move_counts(self, moves: Sequence[tuple[int, int, int]]) -> None:
        """channel_counts for messages about to change queue: (key, from queue id, to queue id)
        each. Reads their channels (only dead-lettering and redrive move messages)."""
        deltas: Counter[tuple[int, str]] = Counter()
        for chunk in _chunks(moves):
            channels = dict(
                self.conn.execute(
                    f"SELECT key, channel FROM messages WHERE key IN ({', '.join('?' * len(chunk))})",
                    [key for key, _, _ in chunk],
                ).fetchall()
            )
            for key, source, target in chunk:
                deltas[(source, channels[key])] -= 1
                deltas[(target, channels[key])] += 1
        self.conn.executemany(
            COUNT_CHANNEL_SQL, [(queue, channel, n) for (queue, channel), n in deltas.items() if n]
        )

    def _lifetime_classes(self, queue_id: int, lifetimes: Iterable[float]) -> dict[float, float]:
        """The class each of these lifetimes gets in this queue (schema._LIFETIMES), recorded in
        `lifetimes`: the lifetime itself, or 0 when it is no positive number or would be a new
        class past MAX_LIFETIMES. Callers then write expires_at as exactly enqueued_at + L for
        a message of class L > 0."""
        classes: dict[float, float] = {}
        for lifetime in set(lifetimes):
            if lifetime > 0 and self.conn.execute(ADD_LIFETIME_SQL, (queue_id, lifetime)).rowcount:
                # A new class: keep it unless the queue has too many.
                (count,) = self.conn.execute(
                    "SELECT COUNT(*) FROM lifetimes WHERE queue = ? AND lifetime > 0", (queue_id,)
                ).fetchone()
                if count > MAX_LIFETIMES:
                    self.conn.execute(
                        "DELETE FROM lifetimes WHERE queue = ? AND lifetime = ?",
                        (queue_id, lifetime),
                    )
                    lifetime_class = 0.0
                else:
                    lifetime_class = lifetime
            else:
                lifetime_class = lifetime if lifetime > 0 else 0.0
            if lifetime_class == 0.0:
                self.conn.execute(ADD_LIFETIME_SQL, (queue_id, 0.0))
            classes[lifetime] = lifetime_class
        return classes

    def queue(self, name: str) -> _Queue:
        """The queue, after removing its expired messages (base.py: before every operation)."""
        found = self.find_queue(name)
        if found is None:
            raise QueueNotFound(name)
        swept = self.conn.execute(SWEEP_SQL, (found.id, self.now)).fetchall()
        if found.config.retry_policy is not None:
            Retries(self).end_backoff_leases(found)
        if not swept:
            return found
        channels = [channel for channel, _ in swept]
        if found.config.grouped:
            Groups(self, found).refresh(group for _, group in swept)
        expired = len(channels)
        self._count(found.id, channels, -1)
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
        target = self.find_queue(dlq)
        if target is None:
            raise InvalidArgument("config.dead_letter_queue", f"queue {dlq!r} does not exist")
        check_dead_letter_pair(config, target.config)

    def create_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        existing = self.find_queue(name)
        if existing is not None:
            if existing.config == config:
                return existing.info()
            raise QueueAlreadyExists(name)
        self._check_dead_letter_queue(name, config)
        columns = ", ".join(("name", "uid", "create_time", *_CONFIG_FIELDS))
        marks = ", ".join("?" * (3 + len(_CONFIG_FIELDS)))
        values = (name, new_queue_uid(), self.now, *config_values(config))
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
        values = (*config_values(config), found.id)
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

    def queue_metadata(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for chunk in _chunks(list(names)):
            found.update(
                (name, json.loads(text))
                for name, text in self.conn.execute(
                    "SELECT q.name, m.metadata FROM queues q JOIN queue_metadata m ON m.queue = q.id"
                    f" WHERE q.name IN ({', '.join('?' * len(chunk))})",
                    list(chunk),
                )
            )
        return found

    def set_queue_metadata(self, name: str, metadata: Mapping[str, str]) -> None:
        found = self.find_queue(name)
        if found is None:
            raise QueueNotFound(name)
        if metadata:
            self.conn.execute(
                "INSERT OR REPLACE INTO queue_metadata (queue, metadata) VALUES (?, ?)",
                (found.id, json.dumps(dict(metadata), separators=(",", ":"), ensure_ascii=False)),
            )
        else:
            self.conn.execute("DELETE FROM queue_metadata WHERE queue = ?", (found.id,))

    def purge_queue(self, name: str) -> int:
        found = self.queue(name)
        self.conn.execute("DELETE FROM channel_counts WHERE queue = ?", (found.id,))
        self.conn.execute("DELETE FROM lifetimes WHERE queue = ?", (found.id,))
        Groups(self, found).purge()
        return self.conn.execute("DELETE FROM messages WHERE queue = ?", (found.id,)).rowcount

    def stats_counters(self, name: str) -> StatsCounters:
        """The writer's part of stats: the sweep (base.py: before every operation) and the
        queue's counters. The scan of the queue's messages runs on a read connection
        (`stats_scan`)."""
        found = self.queue(name)
        return StatsCounters(
            found.id, self.now, found.dead_lettered_total, found.expired_total, found.deleted_total
        )

    # -- send (sending.py) ------------------------------------------------------------------

    def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        return Sends(self).send(name, messages)

    def send_bodies(self, name: str, bodies: list[bytes]) -> list[str]:
        """send() of messages that are only a body: their message ids."""
        return Sends(self).send_bodies(name, bodies)

    def send_keyed(
        self, name: str, bodies: list[bytes], dedup_ids: list[str]
    ) -> tuple[list[str], list[int]]:
        """send() of messages that are only a body and a dedup id ("" for none)."""
        return Sends(self).send_keyed(name, bodies, dedup_ids)

    # -- receive -----------------------------------------------------------------------------

    def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: float | None,
        channel_filter: str,
        attempt_id: str,
        max_bytes: int | None = None,
    ) -> Delivery:
        found = self.queue(name)
        timeout = (
            found.config.visibility_timeout if visibility_timeout is None else visibility_timeout
        )
        if attempt_id:
            replay = self._replay_attempt(found, attempt_id)
            if replay is not None:
                return self._delivery(found, replay)
        limit = self._delivery_limit(found, max_messages, timeout)
        if found.config.grouped:
            groups = Groups(self, found)
            keys, served = groups.pick(limit, channel_filter, max_bytes)
            delivered = self._deliver(found, keys, timeout, attempt_id)
            groups.delivered(served, timeout)
        else:
            keys, keys_json = self._pick(found, limit, channel_filter, max_bytes)
            delivered = self._deliver(found, keys, timeout, attempt_id, keys_json)
        if timeout > 0:
            self.lease_ceilings[found.id] += len(delivered)
        if attempt_id and delivered:
            self.conn.execute(
                "INSERT OR REPLACE INTO attempts (queue, attempt_id, until) VALUES (?, ?, ?)",
                (found.id, attempt_id, self.now + timeout),
            )
        return self._delivery(found, delivered, self.now + timeout)

    def _replay_attempt(self, found: _Queue, attempt_id: str) -> list[tuple[Any, ...]] | None:
        """base.py's attempt cases a (the live leases again) and b (nothing); None for c."""
        rows = self.conn.execute(ATTEMPT_LEASES_SQL, (found.id, attempt_id, self.now)).fetchall()
        if rows:
            return rows
        record = self.conn.execute(
            "SELECT 1 FROM attempts WHERE queue = ? AND attempt_id = ? AND until > ?",
            (found.id, attempt_id, self.now),
        ).fetchone()
        return [] if record is not None else None

    def _delivery_limit(self, found: _Queue, max_messages: int, timeout: float) -> int:
        """How many messages this receive may lease (base.py's in-flight limit).

        Counting live leases walks the partial index over every one of them, milliseconds at
        a hundred thousand. So the store keeps a ceiling per queue: the last exact count plus every lease
        granted since. Only a delivery (or an update through a send receipt) makes a new lease, and leases only end, so the ceiling
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

    def _pick(
        self, found: _Queue, limit: int, channel_filter: str, max_bytes: int | None
    ) -> tuple[list[int], str | None]:
        """The keys of up to `limit` messages to deliver, in delivery order, ending after the
        message that reaches max_bytes (base.py), moving the ones that reached max_delivery_count
        to the dead letter queue on the way; and the keys as a JSON array when SQLite wrote it
        (else None). Nothing is updated until the scan is over, so the keyset cursor sees a
        table that does not move under it. The scan reads sizes, never bodies: only the
        delivery reads those, of the messages delivered."""
        dead_letter_queue = self._dead_letter_target(found)
        clause, clause_params = _channel_clause(channel_filter)
        if dead_letter_queue is None:
            # Nothing can be dead-lettered: the keys of one index range scan are the answer, cut
            # after the message that reaches max_bytes. Usually they are all taken (their total
            # size is under max_bytes): then one row holds them all (picked_sql).
            params = (found.id, self.now, *clause_params, limit)
            keys_json, total = self.conn.execute(picked_sql(clause), params).fetchone()
            if total is None:
                return [], None  # no candidate
            if max_bytes is None or total < max_bytes:
                return json.loads(keys_json), keys_json
            # A bare loop over (key, size): making a _Candidate per message cost a microsecond
            # each.
            keys: list[int] = []
            taken = 0
            for key, size in self.conn.execute(candidates_sql(f"key, {SIZE_SQL}", clause), params):
                if taken >= max_bytes:  # base.bytes_reached
                    break
                keys.append(key)
                taken += size
            return keys, None
        deliver: list[int] = []
        dead: list[_Candidate] = []
        taken = 0
        cursor: tuple[float, int] | None = None
        while len(deliver) < limit and not bytes_reached(taken, max_bytes):
            # Some candidates may be moved rather than delivered: read ahead, so a run of
            # exhausted messages costs a few statements, not one each. The rows are small.
            page = max(limit - len(deliver), PICK_READ_AHEAD)
            sql = candidates_sql(CANDIDATE_COLUMNS, clause, after=cursor is not None)
            params = (found.id, self.now, *clause_params, *(cursor or ()), page)
            rows = [_Candidate(*row) for row in self.conn.execute(sql, params)]
            for row in rows:
                if len(deliver) == limit or bytes_reached(taken, max_bytes):
                    break
                if dead_letter_queue is not None and self._exhausted(found, row):
                    dead.append(row)
                else:
                    deliver.append(row.key)
                    taken += row.size
                cursor = (row.visible_at, row.key)
            if len(rows) < page:
                break
        if dead:
            assert dead_letter_queue is not None
            Retries(self).move_to_dead_letter_queue(found, dead_letter_queue, dead)
        return deliver, None

    @staticmethod
    def _exhausted(found: _Queue, row: _Candidate) -> bool:
        return decide.due_for_dead_letter(row.delivery_count, found.config)

    def _dead_letter_target(self, found: _Queue) -> _Queue | None:
        config = found.config
        if not decide.dead_letters(config):
            return None
        # delete_queue refuses to delete a queue in use as a DLQ, so this exists.
        return self.find_queue(config.dead_letter_queue)  # type: ignore[arg-type]  # set: dead_letters

    def _deliver(
        self,
        found: _Queue,
        keys: list[int],
        timeout: float,
        attempt_id: str,
        keys_json: str | None = None,
    ) -> list[tuple[Any, ...]]:
        """Lease the messages of `keys` (keys_json: the same as a JSON array, when at hand):
        their rows after the update (DELIVERED_COLUMNS), in the order of `keys`."""
        if not keys:
            return []
        keys_json = keys_json or json.dumps(keys)
        rows = self.conn.execute(
            DELIVER_SQL,
            (self.now + timeout, 1 if timeout > 0 else 0, attempt_id or None, keys_json),
        ).fetchall()
        if decide.delivery_backs_off(timeout, found.config):
            self.conn.execute(MARK_BACKOFF_SQL, (keys_json,))
        if [row[0] for row in rows] == keys:
            return rows  # usually so already: a check costs a tenth of the sort
        position = {key: index for index, key in enumerate(keys)}
        rows.sort(key=lambda row: position[row[0]])  # RETURNING has no order
        return rows

    def _delivery(
        self, found: _Queue, rows: list[tuple[Any, ...]], visible_at: float | None = None
    ) -> Delivery:
        """visible_at: the one every row got, None for a replay's rows (each has its own)."""
        if rows:
            return Delivery(found.uid, rows, None, visible_at)
        (next_visible_at,) = self.conn.execute(NEXT_VISIBLE_SQL, (found.id, self.now)).fetchone()
        return Delivery(found.uid, [], next_visible_at)

    # -- peek --------------------------------------------------------------------------------

    def peek_start(self, name: str) -> tuple[int, float]:
        """The writer's part of peek: the sweep (base.py: before every operation). The page is
        read on the read connection (`peek_scan`): (queue id, now)."""
        return self.queue(name).id, self.now

    # -- leases: shared lookups ----------------------------------------------------------------

    def _decode(
        self, found: _Queue, receipts: Sequence[str], decoded: Decoded | None = None
    ) -> list[tuple[int, int] | None]:
        """The receipts verified against this queue's uid: `decoded` when the event loop already
        did so with the right uid (see SqliteStore._predecode), else here."""
        if decoded is not None and decoded.uid == found.uid:
            return decoded.receipts
        return self.codec.decode_many(receipts, found.uid)

    def _leases(self, found: _Queue, keys: set[int]) -> dict[int, Lease]:
        """Lease state of those keys that are messages of this queue."""
        leases: dict[int, Lease] = {}
        for chunk in _chunks(sorted(keys)):
            for key, queue_id, seq, leased, visible_at, error, count, backoff in self.conn.execute(
                leases_by_key_sql(len(chunk)), chunk
            ):
                if queue_id == found.id:
                    leases[key] = Lease(
                        key, seq, bool(leased), visible_at, error, False, count, bool(backoff)
                    )
        return leases

    def _tombstones(self, found: _Queue, keys: Iterable[int]) -> dict[int, Tombstone]:
        """Tombstones of those keys in this queue: one primary key search per key (only receipts
        that touched no message come here)."""
        tombstones: dict[int, Tombstone] = {}
        for key in keys:
            run = self.conn.execute(TOMBSTONE_RUN_SQL, (key,)).fetchone()
            if run is not None:
                _, last_key, queue_id, seq, deleted_at = run
                if key <= last_key and queue_id == found.id:
                    tombstones[key] = Tombstone(seq, deleted_at)
        return tombstones

    def _lookup(
        self, found: _Queue, decoded: list[tuple[int, int] | None]
    ) -> tuple[dict[int, Lease], dict[int, Tombstone]]:
        keys = {d[0] for d in decoded if d is not None}
        leases = self._leases(found, keys)
        return leases, self._tombstones(found, keys - leases.keys())

    # -- change visibility ---------------------------------------------------------------------

    def change_visibility(
        self, name: str, changes: list[VisibilityChange], predecoded: Decoded | None = None
    ) -> list[LeaseResult]:
        found = self.queue(name)
        decoded = self._decode(found, [c.receipt for c in changes], predecoded)
        leases, tombstones = self._lookup(found, decoded)
        results, changed = decide.apply_visibility_changes(
            changes, decoded, leases, tombstones, self.now, found.config
        )
        self._write_leases(changed.values())
        if found.config.grouped and changed:
            groups = Groups(self, found)
            groups.refresh(groups.of_keys(changed))
        return results

    def _write_leases(self, leases: Iterable[Lease]) -> None:
        self.conn.executemany(
            "UPDATE messages SET visible_at = ?, leased = ?, backoff = ?, last_error = ?,"
            " attempt_id = CASE WHEN ? THEN NULL ELSE attempt_id END WHERE key = ?",
            [
                (
                    lease.visible_at,
                    int(lease.leased),
                    int(lease.backoff),
                    lease.last_error,
                    lease.clear_attempt,
                    lease.key,
                )
                for lease in leases
            ],
        )

    # -- delete ------------------------------------------------------------------------------

    def delete(
        self,
        name: str,
        receipts: list[str],
        attempt_ids: Sequence[str],
        predecoded: Decoded | None = None,
    ) -> DeleteOutcome:
        found = self.queue(name)
        decoded = self._decode(found, receipts, predecoded)
        if found.config.grouped:
            return self._grouped_delete(found, receipts, attempt_ids, decoded)
        return self._delete(found, receipts, attempt_ids, decoded)

    def _grouped_delete(
        self,
        found: _Queue,
        receipts: list[str],
        attempt_ids: Sequence[str],
        decoded: list[tuple[int, int] | None],
    ) -> DeleteOutcome:
        """_delete, then the groups of what it deleted read again."""
        groups = Groups(self, found)
        touched = groups.of_keys(d[0] for d in decoded if d is not None)
        for attempt_id in attempt_ids:
            touched |= groups.of_attempt(attempt_id)
        outcome = self._delete(found, receipts, attempt_ids, decoded)
        groups.refresh(touched)
        return outcome

    def _delete(
        self,
        found: _Queue,
        receipts: list[str],
        attempt_ids: Sequence[str],
        decoded: list[tuple[int, int] | None],
    ) -> DeleteOutcome:
        # The common case first, in one statement: every receipt that is its message's current
        # one deletes it (fence's step 3 passes exactly when receipt_seq matches in this queue).
        deleted = self._delete_current(found, {d for d in decoded if d is not None})
        if len(deleted) == len(receipts) and not attempt_ids:
            # Every receipt deleted its own message (deleted holds distinct keys, one per
            # receipt that was current): all OK, in order, with no lookups (the common ack).
            self._after_removal(found, list(deleted.items()))
            return DeleteOutcome(AllDeleted(receipts, decoded), [], list(deleted))  # type: ignore[arg-type]
        # Only the receipts that deleted nothing need the lookups that tell why.
        leases, tombstones = self._lookup(
            found, [d for d in decoded if d is not None and d[0] not in deleted]
        )
        answered: set[int] = set()  # deleted keys whose OK was given
        results: list[LeaseResult] = []
        for text, receipt in zip(receipts, decoded):
            if receipt is None:
                results.append(LeaseResult(text, LeaseStatus.INVALID_RECEIPT))
                continue
            key, seq = receipt
            current = deleted.get(key)
            if current is None:
                status = fence_lease(leases.get(key), tombstones.get(key), seq, self.now)
                # Never None: a current receipt of this queue's message was deleted above.
                assert status is not None
            elif key not in answered:
                # Entries apply in order: until its OK, the message is still there.
                status = fence(seq, current, None, self.now)
                if status is None:
                    answered.add(key)
            else:
                status = fence(seq, None, (current, self.now), self.now)
            results.append(lease_result(text, status or LeaseStatus.OK, key))
        self._after_removal(found, list(deleted.items()))
        all_deleted = list(deleted)
        attempt_counts = []
        for attempt_id in attempt_ids:
            by_attempt = self._remove_attempt(found, attempt_id)
            attempt_counts.append((attempt_id, len(by_attempt)))
            all_deleted.extend(key for key, _ in by_attempt)
        return DeleteOutcome(results, attempt_counts, all_deleted)

    def _delete_current(self, found: _Queue, pairs: set[tuple[int, int]]) -> dict[int, int]:
        """Delete the messages of this queue whose receipt_seq is the pair's: key -> seq. One
        statement per distinct seq (a batch of first deliveries has one). Counts them out of
        channel_counts; _after_removal does the rest."""
        by_seq: dict[int, list[int]] = {}
        if pairs:
            keys, seqs = zip(*pairs)
            if len(set(seqs)) == 1:  # the usual ack: one seq, no Python loop per receipt
                by_seq[seqs[0]] = list(keys)
            else:
                for key, seq in pairs:
                    by_seq.setdefault(seq, []).append(key)
        deleted: dict[int, int] = {}
        channels: list[str] = []
        for seq, keys in by_seq.items():  # type: ignore[assignment]
            rows = self.conn.execute(
                DELETE_CURRENT_SQL, (json.dumps(keys), found.id, seq)
            ).fetchall()
            if rows:
                removed, removed_channels = zip(*rows)
                deleted.update(zip(removed, repeat(seq)))
                channels += removed_channels
        self._count(found.id, channels, -1)
        return deleted

    def _remove_attempt(self, found: _Queue, attempt_id: str) -> list[tuple[int, int]]:
        """Messages whose latest delivery was made under attempt_id and not released since
        (release and redelivery overwrite the column), deleted with tombstones."""
        if not attempt_id:
            return []
        rows = self.conn.execute(
            "DELETE FROM messages WHERE queue = ? AND attempt_id = ?"
            " RETURNING key, receipt_seq, channel",
            (found.id, attempt_id),
        ).fetchall()
        self._count(found.id, [channel for _, _, channel in rows], -1)
        removed = [(key, seq) for key, seq, _ in rows]
        self._after_removal(found, removed)
        return removed

    def _after_removal(self, found: _Queue, deleted: Sequence[tuple[int, int]]) -> None:
        """Tombstones and the deleted counter for messages just deleted: (key, receipt_seq)."""
        if not deleted:
            return
        self.conn.executemany(
            INSERT_TOMBSTONES_SQL,
            [(first, last, found.id, seq, self.now) for first, last, seq in _runs(deleted)],
        )
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
        lease = self._leases(found, {key}).get(key)
        tombstone = None if lease is not None else self._tombstones(found, [key]).get(key)
        stored = None
        if lease is not None:
            row = self.conn.execute(
                "SELECT body, attributes FROM messages WHERE key = ?", (key,)
            ).fetchone()
            stored = (row[0], _decode_attributes(row[1]))
        lease, new_body, new_attributes = decide.updated_message(
            lease,
            tombstone,
            seq,
            self.now,
            found.config,
            stored or (b"", {}),
            body,
            attributes,
            visibility_timeout,
        )
        self.conn.execute(
            "UPDATE messages SET body = ?, attributes = ?, visible_at = ?, leased = ?,"
            " backoff = ?, receipt_seq = receipt_seq + 1,"
            " attempt_id = CASE WHEN ? THEN NULL ELSE attempt_id END WHERE key = ?",
            (
                new_body,
                _encode_attributes(new_attributes),
                lease.visible_at,
                int(lease.leased),
                int(lease.backoff),
                lease.clear_attempt,
                key,
            ),
        )
        if decide.update_leases(seq, visibility_timeout) and found.id in self.lease_ceilings:
            self.lease_ceilings[found.id] += 1  # a lease not made by a delivery (_delivery_limit)
        if found.config.grouped:
            groups = Groups(self, found)
            groups.refresh(groups.of_keys([key]))
        return UpdatedMessage(key, self.codec.encode(found.uid, key, seq + 1), lease.visible_at)

    # -- dead-lettering on request (retries.py) -------------------------------------------------

    def dead_letter(
        self, name: str, receipts: list[str], reason: str, predecoded: Decoded | None = None
    ) -> DeadLetterOutcome:
        return Retries(self).dead_letter(name, receipts, reason, predecoded)

    # -- redrive and housekeeping (maintenance.py) --------------------------------------------

    def redrive(
        self, name: str, destination: str | None, max_messages: int, channel_filter: str
    ) -> int:
        return Maintenance(self).redrive(name, destination, max_messages, channel_filter)

    def housekeep(self) -> bool:
        """Delete a slice of rows whose time conditions can no longer hold. True when a table
        had more than a slice, so the next operation should continue."""
        return Maintenance(self).housekeep()
