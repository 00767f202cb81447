"""Schema, migrations' version, and the SQL statements of the hot paths (module constants so the
query-plan tests check exactly these)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from typing import Any, NamedTuple

from ...receipts import new_signing_key
from ..base import QueueConfig

SCHEMA_VERSION = 4
"""1: one tombstone row per deleted message. 2: one row per run of consecutive keys deleted by one
operation with the same receipt_seq. 3: message counts by channel kept in channel_counts, and the
messages_enqueued index, so that stats read no more than the queue's unavailable messages
(MIGRATIONS)."""

# One column per QueueConfig field, in the dataclass's order.
_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(QueueConfig))

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS queues (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    name                TEXT NOT NULL UNIQUE,
    uid                 INTEGER NOT NULL,
    create_time         REAL NOT NULL,
    visibility_timeout  REAL NOT NULL,
    receive_wait_time   REAL NOT NULL,
    message_retention   REAL NOT NULL,
    default_delay       REAL NOT NULL,
    max_message_bytes   INTEGER NOT NULL,
    dead_letter_queue   TEXT,
    max_delivery_count  INTEGER,
    max_in_flight       INTEGER NOT NULL,
    dedup_window        REAL NOT NULL,
    dead_lettered_total INTEGER NOT NULL DEFAULT 0,
    expired_total       INTEGER NOT NULL DEFAULT 0,
    deleted_total       INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS messages (
    key            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue          INTEGER NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    message_id     TEXT NOT NULL,
    body           BLOB NOT NULL,
    attributes     TEXT,              -- compact JSON object, NULL when there are none
    channel        TEXT NOT NULL,
    enqueued_at    REAL NOT NULL,
    expires_at     REAL NOT NULL,
    visible_at     REAL NOT NULL,
    leased         INTEGER NOT NULL DEFAULT 0,
    delivery_count INTEGER NOT NULL DEFAULT 0,
    receipt_seq    INTEGER NOT NULL DEFAULT 0,
    last_error     TEXT NOT NULL DEFAULT '',
    attempt_id     TEXT,
    source_queue   TEXT
);
CREATE INDEX IF NOT EXISTS messages_visible ON messages (queue, visible_at, key);
CREATE INDEX IF NOT EXISTS messages_expiry ON messages (queue, expires_at);
CREATE INDEX IF NOT EXISTS messages_leased ON messages (queue, visible_at) WHERE leased = 1;
CREATE INDEX IF NOT EXISTS messages_attempt ON messages (queue, attempt_id)
    WHERE attempt_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_channel ON messages (queue, channel, visible_at)
    WHERE channel != '';
CREATE INDEX IF NOT EXISTS messages_enqueued ON messages (queue, enqueued_at);

-- Free-form name -> value pairs of a queue (Azure's queue metadata), a JSON object.
CREATE TABLE IF NOT EXISTS queue_metadata (
    queue    INTEGER PRIMARY KEY REFERENCES queues (id) ON DELETE CASCADE,
    metadata TEXT NOT NULL
);

-- How many messages each channel of a queue holds, kept by every operation that adds or removes
-- messages (stats_scan reads it instead of counting a whole queue).
CREATE TABLE IF NOT EXISTS channel_counts (
    queue   INTEGER NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    channel TEXT NOT NULL,
    total   INTEGER NOT NULL,
    PRIMARY KEY (queue, channel)
) WITHOUT ROWID;

-- No foreign key: tombstones may outlive their queue by up to TOMBSTONE_SECONDS. Harmless, as
-- queue ids are never reused, and it spares deleting a queue a scan of this table.
{tombstones}

CREATE TABLE IF NOT EXISTS dedup (
    queue      INTEGER NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    dedup_id   TEXT NOT NULL,
    message_id TEXT NOT NULL,
    until      REAL NOT NULL,
    PRIMARY KEY (queue, dedup_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dedup_age ON dedup (until);

CREATE TABLE IF NOT EXISTS attempts (
    queue      INTEGER NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    attempt_id TEXT NOT NULL,
    until      REAL NOT NULL,
    PRIMARY KEY (queue, attempt_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS attempts_age ON attempts (until);
"""

# One row per run of consecutive message keys that one operation deleted with the same
# receipt_seq: `key` is the run's first key, `last_key` its last. An ack of 1,000 messages sent
# together is one row instead of 1,000 (a fifth of the delete's SQLite time, issue 20). Runs never
# overlap, as a key is deleted at most once, so the run holding a key is the one with the
# greatest first key <= it (TOMBSTONE_RUN_SQL), if that run reaches it.
_TOMBSTONES = """
CREATE TABLE IF NOT EXISTS tombstones (
    key         INTEGER PRIMARY KEY,
    last_key    INTEGER NOT NULL,
    queue       INTEGER NOT NULL,
    receipt_seq INTEGER NOT NULL,
    deleted_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tombstones_age ON tombstones (deleted_at);
"""
_SCHEMA = _SCHEMA.replace("{tombstones}", _TOMBSTONES)

# Statements that bring a file of version N - 1 to version N, in the writer's transaction.
MIGRATIONS: dict[int, list[str]] = {
    2: [
        "DROP INDEX tombstones_age",  # the new table's index takes the name
        "ALTER TABLE tombstones RENAME TO tombstones_v1",
        *[statement.strip() for statement in _TOMBSTONES.split(";") if statement.strip()],
        "INSERT INTO tombstones (key, last_key, queue, receipt_seq, deleted_at)"
        " SELECT key, key, queue, receipt_seq, deleted_at FROM tombstones_v1",
        "DROP TABLE tombstones_v1",
    ],
    # channel_counts and messages_enqueued are made by the schema statements (IF NOT EXISTS).
    3: [
        "INSERT INTO channel_counts (queue, channel, total)"
        " SELECT queue, channel, COUNT(*) FROM messages GROUP BY queue, channel",
    ],
    4: [],  # queue_metadata is made by the schema statements (IF NOT EXISTS)
}

# --- statements used on hot paths (module constants so the query-plan tests check these) ------

QUEUE_COLUMNS = (
    "id, name, uid, create_time, "
    + ", ".join(_CONFIG_FIELDS)
    + ", dead_lettered_total, expired_total, deleted_total"
)
QUEUE_BY_NAME_SQL = f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name = ?"

SWEEP_SQL = "DELETE FROM messages WHERE queue = ? AND expires_at <= ? RETURNING channel"

# Adds a (signed) number of messages to a channel's count.
COUNT_CHANNEL_SQL = (
    "INSERT INTO channel_counts (queue, channel, total) VALUES (?, ?, ?)"
    " ON CONFLICT (queue, channel) DO UPDATE SET total = total + excluded.total"
)

INSERT_MESSAGE_SQL = (
    "INSERT INTO messages (queue, message_id, body, attributes, channel, enqueued_at,"
    " expires_at, visible_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)

# Live leases of a queue, read from the partial index only.
IN_FLIGHT_SQL = (
    "SELECT COUNT(*), MIN(visible_at) FROM messages"
    " WHERE queue = ? AND leased = 1 AND visible_at > ?"
)

# The enqueue time of the queue's oldest visible message: messages_enqueued in enqueue order,
# skipping the leased and delayed ones (a table lookup each), so it reads at most those + 1.
OLDEST_VISIBLE_SQL = (
    "SELECT enqueued_at FROM messages INDEXED BY messages_enqueued"
    " WHERE queue = ? AND +visible_at <= ? ORDER BY enqueued_at LIMIT 1"
)

# Leased and delayed messages by channel: the messages_visible range after now.
UNAVAILABLE_SQL = (
    "SELECT channel, SUM(leased = 1), SUM(leased = 0) FROM messages"
    " WHERE queue = ? AND visible_at > ? GROUP BY channel"
)

NEXT_VISIBLE_SQL = "SELECT MIN(visible_at) FROM messages WHERE queue = ? AND visible_at > ?"

# Deliveries and deletes name their messages in one JSON array bound as ONE parameter: a single
# statement walks it in C (json_each) instead of Python binding a statement per message, which
# was a fifth of the store's time per message at batch 1,000 (issue 6's profile).

DELIVERED_COLUMNS = (
    "key, message_id, body, attributes, channel, enqueued_at, expires_at, visible_at,"
    " delivery_count, receipt_seq, last_error"
)

# Parameters: visible_at, leased, attempt_id, JSON array of keys. RETURNING gives the rows after
# the update, in no particular order (the caller restores delivery order).
DELIVER_SQL = (
    "UPDATE messages SET delivery_count = delivery_count + 1, receipt_seq = receipt_seq + 1,"
    " visible_at = ?, leased = ?, attempt_id = ?"
    f" WHERE key IN (SELECT value FROM json_each(?)) RETURNING {DELIVERED_COLUMNS}"
)

# Deletes the messages of a queue whose receipt_seq is the given one: parameters are a JSON array
# of keys, the queue id and the receipt_seq (the caller groups the receipts of a batch by seq:
# usually one group). Plain integers in the array keep json_each cheap: the earlier form, one
# [key, seq] pair per message picked apart with ->>, cost twice as much per message.
# `+queue` keeps the planner off the queue's indexes (see leases_by_key_sql).
DELETE_CURRENT_SQL = (
    "DELETE FROM messages WHERE key IN (SELECT value FROM json_each(?))"
    " AND +queue = ? AND receipt_seq = ? RETURNING key, channel"
)

INSERT_TOMBSTONES_SQL = (
    "INSERT INTO tombstones (key, last_key, queue, receipt_seq, deleted_at) VALUES (?, ?, ?, ?, ?)"
)

# The run that may hold a key: the one with the greatest first key <= it (runs never overlap).
TOMBSTONE_RUN_SQL = (
    "SELECT key, last_key, queue, receipt_seq, deleted_at FROM tombstones WHERE key <= ?"
    " ORDER BY key DESC LIMIT 1"
)


class _Row(NamedTuple):
    """A message as the read paths select it."""

    key: int
    message_id: str
    body: bytes
    attributes: str | None
    channel: str
    enqueued_at: float
    expires_at: float
    visible_at: float
    leased: int
    delivery_count: int
    receipt_seq: int
    last_error: str
    source_queue: str | None


ROW_COLUMNS = ", ".join(_Row._fields)

# A message's size for base.py's max_bytes: length() of a blob reads no overflow page, so sizing
# candidates costs no body read.
SIZE_SQL = "length(body) + coalesce(length(attributes), 0)"


class _Candidate(NamedTuple):
    """A message as a receive's pick reads it: what it needs to choose, without the body."""

    key: int
    visible_at: float
    delivery_count: int
    enqueued_at: float
    size: int


CANDIDATE_COLUMNS = f"key, visible_at, delivery_count, enqueued_at, {SIZE_SQL}"

# The unary + keeps the planner off messages_leased (which would scan every live lease of the
# queue) and on messages_attempt (only this attempt's messages).
ATTEMPT_LEASES_SQL = (
    f"SELECT {DELIVERED_COLUMNS} FROM messages WHERE queue = ? AND attempt_id = ?"
    " AND +leased = 1 AND +visible_at > ? ORDER BY key"
)


def candidates_sql(columns: str, channel_clause: str = "", after: bool = False) -> str:
    """Visible messages of a queue in delivery order: an index range scan on messages_visible
    (or messages_channel for an exact channel), ending at visible_at <= now. `after` adds the
    keyset cursor of the previous page."""
    cursor = " AND (visible_at, key) > (?, ?)" if after else ""
    return (
        f"SELECT {columns} FROM messages WHERE queue = ? AND visible_at <= ?{channel_clause}"
        f"{cursor} ORDER BY visible_at, key LIMIT ?"
    )


def leases_by_key_sql(count: int) -> str:
    """Lease state of messages by key: primary key lookups. The queue is checked in Python, as a
    `queue = ?` term tempts the planner into scanning an index of the whole queue instead."""
    marks = ", ".join("?" * count)
    return (
        "SELECT key, queue, receipt_seq, leased, visible_at, last_error FROM messages"
        f" WHERE key IN ({marks})"
    )


def _channel_clause(channel_filter: str) -> tuple[str, tuple[Any, ...]]:
    """SQL and parameters for base.channel_matches. An exact channel repeats `channel != ''` so
    that the planner may use the partial messages_channel index (it cannot see that the bound
    value is not empty)."""
    if not channel_filter or channel_filter == "*":
        return "", ()
    if channel_filter.endswith("*"):
        prefix = channel_filter[:-1]
        return " AND substr(channel, 1, ?) = ?", (len(prefix), prefix)
    return " AND channel = ? AND channel != ''", (channel_filter,)


def _encode_attributes(attributes: dict[str, str]) -> str | None:
    if not attributes:
        return None
    return json.dumps(attributes, separators=(",", ":"), ensure_ascii=False)


def _decode_attributes(text: str | None) -> dict[str, str]:
    return json.loads(text) if text else {}


def _schema_statements() -> list[str]:
    # Not executescript(): it COMMITs first, and this runs inside the writer's transaction
    # (DDL is transactional in SQLite). The schema text has no ';' inside comments.
    return [statement.strip() for statement in _SCHEMA.split(";") if statement.strip()]


def _initialize(conn: sqlite3.Connection) -> bytes:
    """Create the schema if needed, bring an older file up to SCHEMA_VERSION, and return the
    receipt signing key (made once per file)."""
    for statement in _schema_statements():
        conn.execute(statement)
    version = _meta(conn, "schema_version")
    if version is None:
        conn.execute(
            "INSERT INTO meta (name, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,)
        )
    elif int(version) > SCHEMA_VERSION or int(version) < min(MIGRATIONS) - 1:
        raise RuntimeError(
            f"the store file has schema version {version};"
            f" this leaseq reads version {SCHEMA_VERSION}"
        )
    else:
        for step in range(int(version) + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute(
            "UPDATE meta SET value = ? WHERE name = 'schema_version'", (SCHEMA_VERSION,)
        )
    key = _meta(conn, "receipt_signing_key")
    if key is None:
        key = new_signing_key()
        conn.execute("INSERT INTO meta (name, value) VALUES ('receipt_signing_key', ?)", (key,))
    return bytes(key)


def _meta(conn: sqlite3.Connection, name: str) -> Any:
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
    return None if row is None else row[0]
