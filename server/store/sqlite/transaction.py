"""One operation's view of the database: the SQL behind each Store method, run by the writer."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import attrgetter, itemgetter
from typing import Any, TypeVar

from ...domain import leases as decide
from ...domain.leases import Lease, Tombstone, fence, fence_lease, lease_result, message_state
from ...domain.limits import TOMBSTONE_SECONDS
from ...domain.rules import bytes_reached, new_message_ids
from ...domain.types import (
    AllDeleted,
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
from .schema import (
    _CONFIG_FIELDS,
    ADD_LIFETIME_SQL,
    ATTEMPT_LEASES_SQL,
    CANDIDATE_COLUMNS,
    COUNT_CHANNEL_SQL,
    DELETE_CURRENT_SQL,
    DELIVER_SQL,
    IN_FLIGHT_SQL,
    INSERT_ROWS,
    INSERT_TOMBSTONES_SQL,
    MAX_LIFETIMES,
    NEXT_VISIBLE_SQL,
    OLDEST_IN_CLASS_SQL,
    OLDEST_VISIBLE_SQL,
    QUEUE_BY_NAME_SQL,
    QUEUE_COLUMNS,
    ROW_COLUMNS,
    SIZE_SQL,
    SWEEP_SQL,
    TOMBSTONE_RUN_SQL,
    UNAVAILABLE_SQL,
    _Candidate,
    _channel_clause,
    _decode_attributes,
    _encode_attributes,
    _Row,
    candidates_sql,
    insert_bodies_sql,
    insert_rows_sql,
    leases_by_key_sql,
    picked_sql,
)

T = TypeVar("T")

# Stale tombstone/dedup/attempt rows are removed at most this often (store clock), in slices of
# HOUSEKEEPING_ROWS so that one slice never stalls the writer.
HOUSEKEEPING_SECONDS = 60.0
HOUSEKEEPING_ROWS = 5_000

# Candidates read per statement by a receive on a queue with a dead letter queue (see _pick).
PICK_READ_AHEAD = 64

# Keys per `IN (...)` list: far below SQLite's variable limit, and a handful of distinct
# statement shapes for the statement cache.
IN_CHUNK = 500

def _chunks(items: Sequence[T], size: int = IN_CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _statements(rows: int) -> Iterator[tuple[int, int]]:
    """(first row, row count) of each multi-row INSERT for `rows` rows, in order: as many of
    INSERT_ROWS[0] rows as fit, then of the next size, down to single rows."""
    start = 0
    for size in INSERT_ROWS:
        while rows - start >= size:
            yield start, size
            start += size


@functools.cache
def _insert_dedup_sql(verb: str, count: int) -> str:
    """`verb` INTO dedup of `count` records (as many rows per statement as the messages'
    INSERT: one executemany step per row cost three times as much): parameters ?1, ?2 are the
    queue and `until` they share, then a dedup_id and a message_id per record."""
    rows = ", ".join(f"(?1, ?{3 + 2 * i}, ?{4 + 2 * i}, ?2)" for i in range(count))
    return f"{verb} INTO dedup (queue, dedup_id, message_id, until) VALUES {rows}"


_BODY = attrgetter("body")
_SEQ = itemgetter(1)


def _plain(message: NewMessage) -> bool:
    """Only a body: no attributes, channel, delay, ttl or dedup id (send's fast path)."""
    return (
        not message.attributes
        and not message.channel
        and message.delay is None
        and message.ttl is None
        and not message.dedup_id
    )


def _runs(deleted: Iterable[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(first key, last key, receipt_seq) of each run of consecutive keys with one seq: a
    tombstone row each (schema.py). The keys are distinct (a message is deleted once)."""
    runs: list[tuple[int, int, int]] = []
    ordered = sorted(deleted)
    if ordered and ordered[-1][0] - ordered[0][0] + 1 == len(ordered):
        # Distinct keys spanning exactly their count are consecutive (the usual ack of a batch
        # sent together): one run when they share one seq, found without a loop in Python.
        if len(set(map(_SEQ, ordered))) == 1:
            return [(ordered[0][0], ordered[-1][0], ordered[0][1])]
    first = last = seq = -1
    for key, key_seq in ordered:
        if key == last + 1 and key_seq == seq:
            last = key
            continue
        if first >= 0:
            runs.append((first, last, seq))
        first = last = key
        seq = key_seq
    if first >= 0:
        runs.append((first, last, seq))
    return runs


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


def _state(row: _Row, now: float) -> MessageState:
    return message_state(row.visible_at, row.leased, now)


@dataclass(slots=True)
class Delivery:
    """What a receive leased, as the writer leaves it: the queue's uid and the rows
    (DELIVERED_COLUMNS, in delivery order). The receipts and DeliveredMessages are made from it
    after the commit (`finish_delivery`), outside the group's transaction, so that the writer,
    the store's bottleneck, spends its time in SQLite rather than in Python (issue 6)."""

    uid: int
    rows: list[tuple[Any, ...]]
    next_visible_at: float | None = None
    # The visible_at the delivery gave every row; None for an attempt's replay, whose rows
    # each end with their own.
    visible_at: float | None = None


@dataclass(slots=True)
class Decoded:
    """Receipts verified on the event loop against the uid the store last saw for the queue;
    the operation uses them only if that is still the queue's uid."""

    uid: int
    receipts: list[tuple[int, int] | None]


def finish_delivery(codec: ReceiptCodec, delivery: Delivery) -> ReceiveOutcome:
    rows = delivery.rows
    receipts = codec.encode_many(delivery.uid, [(row[0], row[6]) for row in rows])
    visible_at = delivery.visible_at
    if visible_at is None:  # an attempt's replay: each row ends with its own visible_at
        return ReceiveOutcome(
            [_delivered(receipt, *row) for receipt, row in zip(receipts, rows)],
            next_visible_at=delivery.next_visible_at,
        )
    return ReceiveOutcome(
        [
            DeliveredMessage(
                key, message_id, receipt, body, {}, "", enqueued_at, expires_at, visible_at,
                delivery_count, "",
            )
            if rare is None
            else _delivered(
                receipt, key, message_id, body, enqueued_at, expires_at, delivery_count, 0, rare,
                visible_at,
            )
            for receipt, (
                key, message_id, body, enqueued_at, expires_at, delivery_count, _, rare
            ) in zip(receipts, rows)
        ],
        next_visible_at=delivery.next_visible_at,
    )


def _delivered(
    receipt: str,
    key: int,
    message_id: str,
    body: bytes,
    enqueued_at: float,
    expires_at: float,
    delivery_count: int,
    receipt_seq: int,
    rare: str | None,
    visible_at: float,
) -> DeliveredMessage:
    """The message of a DELIVERED_COLUMNS row (and its visible_at), rarely set fields included."""
    attributes, channel, last_error = json.loads(rare) if rare is not None else (None, "", "")
    return DeliveredMessage(
        key, message_id, receipt, body, _decode_attributes(attributes), channel, enqueued_at,
        expires_at, visible_at, delivery_count, last_error,
    )


@dataclass(frozen=True)
class StatsCounters:
    """What stats takes from the writer: the queue, the instant, and its counters."""

    queue_id: int
    now: float
    dead_lettered_total: int
    expired_total: int
    deleted_total: int


def stats_scan(conn: sqlite3.Connection, counters: StatsCounters) -> QueueStats:
    """Counts by channel and state at counters.now, without reading the queue's visible messages:
    each channel's total from channel_counts, the leased and delayed ones (visible_at > now) from
    the messages_visible range after now, visible = total - those; the oldest visible message
    the least of each lifetime class's (schema._LIFETIMES), found by walking an index past the
    class's unavailable messages. So the cost grows with the leased and delayed messages, not
    the backlog (issue 20: a few ms at 1,000,000 waiting). Runs on the store's read connection
    (SqliteStore._read), in one read transaction: one snapshot."""
    now, queue_id = counters.now, counters.queue_id
    conn.execute("BEGIN")
    try:
        totals = conn.execute(
            "SELECT channel, total FROM channel_counts WHERE queue = ? AND total > 0", (queue_id,)
        ).fetchall()
        unavailable = {
            channel: (leased, delayed)
            for channel, leased, delayed in conn.execute(UNAVAILABLE_SQL, (queue_id, now))
        }
        oldest = _oldest_visible(conn, queue_id, now)
    finally:
        conn.execute("COMMIT")
    channels = {}
    for channel, total in totals:
        leased, delayed = unavailable.get(channel, (0, 0))
        channels[channel] = CountsByState(total - leased - delayed, leased, delayed)
    return QueueStats.from_channels(
        channels,
        oldest,
        now,
        dead_lettered_total=counters.dead_lettered_total,
        expired_total=counters.expired_total,
        deleted_total=counters.deleted_total,
    )


def _oldest_visible(conn: sqlite3.Connection, queue_id: int, now: float) -> float | None:
    """The enqueue time of the queue's oldest visible message: the least over its lifetime
    classes (every message's class is in `lifetimes`)."""
    found: list[float] = []
    for (lifetime,) in conn.execute(
        "SELECT lifetime FROM lifetimes WHERE queue = ?", (queue_id,)
    ).fetchall():
        if lifetime > 0:
            row = conn.execute(OLDEST_IN_CLASS_SQL, (queue_id, lifetime, now)).fetchone()
        else:
            row = conn.execute(OLDEST_VISIBLE_SQL, (queue_id, now)).fetchone()
        if row is not None and row[0] is not None:
            found.append(row[0])
    return min(found, default=None)


def peek_scan(
    conn: sqlite3.Connection,
    queue_id: int,
    now: float,
    max_messages: int,
    channel_filter: str,
    include_leased: bool,
    include_delayed: bool,
    after: PeekCursor | None,
    max_bytes: int | None = None,
) -> PeekPage:
    """A page of messages in (visible_at, key) order after the cursor, states as at `now`, ending
    after the message that reaches max_bytes (base.py). Runs on the read connection, like
    stats_scan: a page may hold 10,000 messages. Rows are read one by one, so a page cut by bytes
    reads no body past its last message."""
    state_clause, state_params = _peek_states(include_leased, include_delayed, now)
    clause, clause_params = _channel_clause(channel_filter)
    cursor = " AND (visible_at, key) > (?, ?)" if after is not None else ""
    sql = (
        f"SELECT {ROW_COLUMNS} FROM messages WHERE queue = ?{state_clause}{clause}{cursor}"
        " ORDER BY visible_at, key LIMIT ?"
    )
    params = (queue_id, *state_params, *clause_params, *(after or ()), max_messages + 1)
    page: list[_Row] = []
    more, taken = False, 0
    for values in conn.execute(sql, params):
        if len(page) == max_messages or bytes_reached(taken, max_bytes):
            more = True  # cut by bytes: the next page starts after this one's last message
            break
        row = _Row(*values)
        page.append(row)
        taken += len(row.body) + len(row.attributes or "")
    return PeekPage(
        messages=[_peeked(row, now) for row in page],
        next_cursor=(page[-1].visible_at, page[-1].key) if more and page else None,
    )


def _peek_states(
    include_leased: bool, include_delayed: bool, now: float
) -> tuple[str, tuple[Any, ...]]:
    if include_leased and include_delayed:
        return "", ()
    if include_leased:
        return " AND (visible_at <= ? OR leased = 1)", (now,)
    if include_delayed:
        return " AND (visible_at <= ? OR leased = 0)", (now,)
    return " AND visible_at <= ?", (now,)


def _peeked(row: _Row, now: float) -> PeekedMessage:
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
        state=_state(row, now),
        receipt_seq=row.receipt_seq,
        source_queue=row.source_queue,
    )


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
            channels = dict(self.conn.execute(
                f"SELECT key, channel FROM messages WHERE key IN ({', '.join('?' * len(chunk))})",
                [key for key, _, _ in chunk],
            ).fetchall())
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
        channels = [channel for (channel,) in self.conn.execute(SWEEP_SQL, (found.id, self.now))]
        if not channels:
            return found
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
        return self.conn.execute("DELETE FROM messages WHERE queue = ?", (found.id,)).rowcount

    def stats_counters(self, name: str) -> StatsCounters:
        """The writer's part of stats: the sweep (base.py: before every operation) and the
        queue's counters. The scan of the queue's messages runs on a read connection
        (`stats_scan`)."""
        found = self.queue(name)
        return StatsCounters(
            found.id, self.now, found.dead_lettered_total, found.expired_total, found.deleted_total
        )

    # -- send --------------------------------------------------------------------------------

    def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        found = self.queue(name)
        config, now = found.config, self.now
        if all(_plain(m) for m in messages):
            return [SendOutcome(i) for i in self._insert_bodies(found, list(map(_BODY, messages)))]
        known = self._live_dedup(found, {m.dedup_id for m in messages if m.dedup_id})
        outcomes: list[SendOutcome] = []
        rows: list[tuple[Any, ...]] = []
        records: list[tuple[Any, ...]] = []
        ids = new_message_ids(len(messages))
        classes = self._lifetime_classes(
            found.id, [config.message_retention if m.ttl is None else m.ttl for m in messages]
        )
        for index, m in enumerate(messages):
            if m.dedup_id and m.dedup_id in known:
                outcomes.append(SendOutcome(known[m.dedup_id], duplicate=True))
                continue
            message_id = ids[index]
            visible_at, expires_at = decide.send_times(now, m.delay, m.ttl, config)
            ttl = config.message_retention if m.ttl is None else m.ttl
            rows.append(
                (found.id, message_id, m.body, _encode_attributes(m.attributes), m.channel,
                 now, expires_at, visible_at, classes[ttl])
            )
            outcomes.append(SendOutcome(message_id))
            if m.dedup_id:
                # A repeat later in this batch is a duplicate whatever the window (base.py)...
                known[m.dedup_id] = message_id
                # ...but a zero window leaves no record.
                until = decide.dedup_until(now, config)
                if until is not None:
                    records.append((found.id, m.dedup_id, message_id, until))
        self._insert_rows(rows)
        self._count(found.id, [row[4] for row in rows], 1)
        if records:
            self.conn.executemany(
                "INSERT OR REPLACE INTO dedup (queue, dedup_id, message_id, until)"
                " VALUES (?, ?, ?, ?)",
                records,
            )
        return outcomes

    def send_bodies(self, name: str, bodies: list[bytes]) -> list[str]:
        """send() of messages that are only a body: their message ids."""
        return self._insert_bodies(self.queue(name), bodies)

    def send_keyed(
        self, name: str, bodies: list[bytes], dedup_ids: list[str]
    ) -> tuple[list[str], list[int]]:
        """send() of messages that are only a body and a dedup id ("" for none): their message
        ids (a duplicate's is its original's) and the indexes of the duplicates. The dedup ids
        are looked up and recorded as a set per batch; a batch with no duplicate (write_queue's
        usual one) makes no Python object per message but its ids."""
        found = self.queue(name)
        now, window = self.now, found.config.dedup_window
        named = dedup_ids if all(dedup_ids) else [d for d in dedup_ids if d]
        unique = set(named)
        if window > 0 and len(unique) == len(named):
            sent = self._send_unseen(found, bodies, dedup_ids, named)
            if sent is not None:
                return sent, []
        stored = self._dedup_records(found, unique)
        live = {d: message_id for d, (message_id, until) in stored.items() if until > now}
        # A record whose window ended may still be there (the sweep removes them in slices):
        # only then must the insert replace.
        verb = "INSERT OR REPLACE" if len(stored) > len(live) else "INSERT"
        if not live and len(unique) == len(named):
            duplicates: list[int] = []
            message_ids = self._insert_bodies(found, bodies)
            recorded = (
                message_ids if named is dedup_ids else list(compress(message_ids, dedup_ids))
            )
        else:
            message_ids, duplicates, named, recorded = self._insert_keyed(
                found, bodies, dedup_ids, live
            )
        # A zero window leaves no record (now < now + 0 never holds), as in send().
        if window > 0 and named:
            self._insert_dedup(verb, found, named, recorded)
        return message_ids, duplicates

    def _send_unseen(
        self, found: _Queue, bodies: list[bytes], dedup_ids: list[str], named: list[str]
    ) -> list[str] | None:
        """send_keyed's usual batch (distinct dedup ids, none of them sent before): the records
        go in first, INSERT OR IGNORE; when every one went in, the queue kept no record of any
        of these ids, live or not, and the messages follow: no lookup (it cost a fifth of the
        keyed send). Else that is undone and the answer is None: look them up."""
        message_ids = new_message_ids(len(bodies))
        recorded = message_ids if named is dedup_ids else list(compress(message_ids, dedup_ids))
        self.conn.execute("SAVEPOINT unseen")
        before = self.conn.total_changes
        self._insert_dedup("INSERT OR IGNORE", found, named, recorded)
        if self.conn.total_changes - before != len(named):
            self.conn.execute("ROLLBACK TO unseen")
            self.conn.execute("RELEASE unseen")
            return None
        self.conn.execute("RELEASE unseen")
        self._insert_bodies(found, bodies, message_ids)
        return message_ids

    def _insert_dedup(
        self, verb: str, found: _Queue, dedup_ids: list[str], message_ids: list[str]
    ) -> None:
        shared = [found.id, self.now + found.config.dedup_window]
        # dedup_id, message_id of each record in turn, flattened in C.
        values = list(chain.from_iterable(zip(dedup_ids, message_ids)))
        for start, count in _statements(len(dedup_ids)):
            self.conn.execute(
                _insert_dedup_sql(verb, count), shared + values[2 * start : 2 * (start + count)]
            )

    def _insert_keyed(
        self, found: _Queue, bodies: list[bytes], dedup_ids: list[str], known: dict[str, str]
    ) -> tuple[list[str], list[int], list[str], list[str]]:
        """send_keyed's batch with duplicates, message by message: (message ids, indexes of the
        duplicates, dedup ids to record, their message ids). A repeat later in the batch is a
        duplicate of the earlier entry whatever the window (base.py)."""
        message_ids: list[str] = []
        duplicates: list[int] = []
        kept: list[int] = []
        for index, dedup_id in enumerate(dedup_ids):
            if dedup_id in known:
                duplicates.append(index)
            else:
                kept.append(index)
                if dedup_id:
                    known[dedup_id] = ""  # this batch's: its message id is drawn below
            message_ids.append(dedup_id)
        fresh = iter(self._insert_bodies(found, [bodies[index] for index in kept]))
        named: list[str] = []
        recorded: list[str] = []
        for index in kept:
            dedup_id, message_ids[index] = message_ids[index], next(fresh)
            if dedup_id:
                known[dedup_id] = message_ids[index]
                named.append(dedup_id)
                recorded.append(message_ids[index])
        for index in duplicates:
            message_ids[index] = known[message_ids[index]]
        return message_ids, duplicates, named, recorded

    def _dedup_records(self, found: _Queue, dedup_ids: set[str]) -> dict[str, tuple[str, float]]:
        """dedup_id -> (message_id, until) of the records kept, inside their window or not."""
        records: dict[str, tuple[str, float]] = {}
        for chunk in _chunks(list(dedup_ids)):
            marks = ", ".join("?" * len(chunk))
            for dedup_id, message_id, until in self.conn.execute(
                "SELECT dedup_id, message_id, until FROM dedup"
                f" WHERE queue = ? AND dedup_id IN ({marks})",
                (found.id, *chunk),
            ):
                records[dedup_id] = (message_id, until)
        return records

    def _insert_bodies(
        self, found: _Queue, bodies: list[bytes], message_ids: list[str] | None = None
    ) -> list[str]:
        """The rows of messages that are only a body (the common batch), as send() writes
        them, built column by column in C (zip, repeat) instead of a tuple per message in
        Python: their message ids (drawn here unless given)."""
        config, now = found.config, self.now
        if message_ids is None:
            message_ids = new_message_ids(len(bodies))
        retention = config.message_retention
        lifetime = self._lifetime_classes(found.id, [retention])[retention] if bodies else 0.0
        visible_at, expires_at = decide.send_times(now, None, None, config)
        shared = [found.id, now, expires_at, visible_at, lifetime]
        # message_id, body of each message in turn, flattened in C.
        values = list(chain.from_iterable(zip(message_ids, bodies)))
        for start, count in _statements(len(bodies)):
            self.conn.execute(
                insert_bodies_sql(count), shared + values[2 * start : 2 * (start + count)]
            )
        if bodies:
            self.conn.execute(COUNT_CHANNEL_SQL, (found.id, "", len(bodies)))
        return message_ids

    def _insert_rows(self, rows: list[tuple[Any, ...]]) -> None:
        """INSERT_MESSAGE_SQL's rows, a multi-row statement at a time (schema.INSERT_ROWS)."""
        values = list(chain.from_iterable(rows))
        for start, count in _statements(len(rows)):
            self.conn.execute(insert_rows_sql(count), values[9 * start : 9 * (start + count)])

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
            self._move_to_dead_letter_queue(found, dead_letter_queue, dead)
        return deliver, None

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
        params = (found.id, self.now, *clause_params, *(cursor or ()), limit)
        return self.conn.execute(sql, params).fetchall()

    @staticmethod
    def _exhausted(found: _Queue, row: _Candidate) -> bool:
        return decide.due_for_dead_letter(row.delivery_count, found.config)

    def _dead_letter_target(self, found: _Queue) -> _Queue | None:
        config = found.config
        if not decide.dead_letters(config):
            return None
        # delete_queue refuses to delete a queue in use as a DLQ, so this exists.
        return self.find_queue(config.dead_letter_queue)

    def _move_to_dead_letter_queue(
        self, found: _Queue, dlq: _Queue, rows: list[_Candidate]
    ) -> None:
        retention = dlq.config.message_retention
        # expires_at = enqueued_at + retention: class `retention` (or 0, see _lifetime_classes).
        lifetime = self._lifetime_classes(dlq.id, [retention])[retention]
        self._move_counts([(row.key, found.id, dlq.id) for row in rows])
        self.conn.executemany(
            "UPDATE messages SET queue = ?, visible_at = ?, leased = 0, expires_at = ?,"
            " lifetime = ?, receipt_seq = receipt_seq + 1, source_queue = ?, attempt_id = NULL"
            " WHERE key = ?",
            [
                (dlq.id, self.now, decide.dead_letter_expiry(row.enqueued_at, dlq.config),
                 lifetime, found.name, row.key)
                for row in rows
            ],
        )
        self.conn.execute(
            "UPDATE queues SET dead_lettered_total = dead_lettered_total + ? WHERE id = ?",
            (len(rows), found.id),
        )

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
        rows = self.conn.execute(
            DELIVER_SQL,
            (
                self.now + timeout,
                1 if timeout > 0 else 0,
                attempt_id or None,
                keys_json or json.dumps(keys),
            ),
        ).fetchall()
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
            for key, queue_id, seq, leased, visible_at, last_error in self.conn.execute(
                leases_by_key_sql(len(chunk)), chunk
            ):
                if queue_id == found.id:
                    leases[key] = Lease(key, seq, bool(leased), visible_at, last_error)
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
            changes, decoded, leases, tombstones, self.now
        )
        self._write_leases(changed.values())
        return results

    def _write_leases(self, leases: Iterable[Lease]) -> None:
        self.conn.executemany(
            "UPDATE messages SET visible_at = ?, leased = ?, last_error = ?,"
            " attempt_id = CASE WHEN ? THEN NULL ELSE attempt_id END WHERE key = ?",
            [(l.visible_at, int(l.leased), l.last_error, l.clear_attempt, l.key) for l in leases],
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
        for seq, keys in by_seq.items():
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
            lease, tombstone, seq, self.now, found.config, stored or (b"", {}),
            body, attributes, visibility_timeout,
        )
        self.conn.execute(
            "UPDATE messages SET body = ?, attributes = ?, visible_at = ?, leased = ?,"
            " receipt_seq = receipt_seq + 1,"
            " attempt_id = CASE WHEN ? THEN NULL ELSE attempt_id END WHERE key = ?",
            (new_body, _encode_attributes(new_attributes), lease.visible_at, int(lease.leased),
             lease.clear_attempt, key),
        )
        return UpdatedMessage(key, self.codec.encode(found.uid, key, seq + 1), lease.visible_at)

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
        self._move_counts([(key, found.id, to.id) for to, key in moves])
        # A new expiry from now and the original enqueued_at: no lifetime class (class 0).
        for queue_id in {to.id for to, _ in moves}:
            self._lifetime_classes(queue_id, [0.0])
        self.conn.executemany(
            "UPDATE messages SET queue = ?, delivery_count = 0, visible_at = ?, leased = 0,"
            " source_queue = NULL, receipt_seq = receipt_seq + 1, expires_at = ?, attempt_id = NULL,"
            " lifetime = 0 WHERE key = ?",
            [(to.id, self.now, decide.redrive_expiry(self.now, to.config), key) for to, key in moves],
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
        # Channels that emptied (one row per channel a queue ever used: few), and lifetime classes
        # no message has any more (at most MAX_LIFETIMES + 1 per queue; a search each).
        self.conn.execute("DELETE FROM channel_counts WHERE total = 0")
        self.conn.execute(
            "DELETE FROM lifetimes WHERE NOT EXISTS (SELECT 1 FROM messages"
            " WHERE messages.queue = lifetimes.queue AND messages.lifetime = lifetimes.lifetime)"
        )
        return more


