"""What is made outside the writer's transaction: a receive's DeliveredMessages from the rows
it leased (after the commit), and the stats and peek scans of the read connection.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from ...domain.leases import message_state
from ...domain.rules import bytes_reached
from ...domain.types import (
    CountsByState,
    DeliveredMessage,
    MessageState,
    PeekCursor,
    PeekedMessage,
    PeekPage,
    QueueStats,
    ReceiveOutcome,
)
from ...receipts import ReceiptCodec
from .schema import (
    GROUP_COUNTS_SQL,
    OLDEST_IN_CLASS_SQL,
    OLDEST_VISIBLE_SQL,
    ROW_COLUMNS,
    UNAVAILABLE_SQL,
    _channel_clause,
    _decode_attributes,
    _Row,
)


def _state(row: _Row, now: float) -> MessageState:
    return message_state(row.visible_at, row.leased, now)  # type: ignore[arg-type]  # 0 or 1


@dataclass(slots=True)
class Delivery:
    """What a receive leased, as the writer leaves it: the queue's uid and the rows
    (DELIVERED_COLUMNS, in delivery order). The receipts and DeliveredMessages are made from it
    after the commit (`finish_delivery`), outside the group's transaction, so that the writer,
    the store's bottleneck, spends its time in SQLite rather than in Python."""

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
                key,
                message_id,
                receipt,
                body,
                {},
                "",
                enqueued_at,
                expires_at,
                visible_at,
                delivery_count,
                "",
            )
            if rare is None
            else _delivered(
                receipt,
                key,
                message_id,
                body,
                enqueued_at,
                expires_at,
                delivery_count,
                0,
                rare,
                visible_at,
            )
            for receipt, (
                key,
                message_id,
                body,
                enqueued_at,
                expires_at,
                delivery_count,
                _,
                rare,
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
    attributes, channel, last_error, group = (
        json.loads(rare) if rare is not None else (None, "", "", None)
    )
    return DeliveredMessage(
        key,
        message_id,
        receipt,
        body,
        _decode_attributes(attributes),
        channel,
        enqueued_at,
        expires_at,
        visible_at,
        delivery_count,
        last_error,
        group or "",
        0 if group is None else key,
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
    the backlog. Runs on the store's read connection
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
        groups, blocked = conn.execute(GROUP_COUNTS_SQL, (now, queue_id)).fetchone()
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
        groups=groups,
        blocked_groups=blocked,
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
        group=row.grp or "",
        sequence=0 if row.grp is None else row.key,
    )
