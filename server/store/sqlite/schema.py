"""Schema, migrations' version, and the SQL statements of the hot paths (module constants so the
query-plan tests check exactly these)."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

from ...receipts import new_signing_key
from ..config_rows import CONFIG_COLUMNS

SCHEMA_VERSION = 7
"""1: one tombstone row per deleted message. 2: one row per run of consecutive keys deleted by one
operation with the same receipt_seq. 3: message counts by channel kept in channel_counts, and the
messages_enqueued index, so that stats read no more than the queue's unavailable messages.
4: queue_metadata. 5: messages' lifetime classes (see _LIFETIMES): one index answers both the
expiry sweep and stats' oldest visible message, and live leases are counted from
messages_visible, which now holds `leased` (MIGRATIONS). 6: message groups: queues' ordering,
content_based_dedup and dedup_scope, messages' `grp` and the `groups` table (_GROUPS).
7: queues' retry policy (retry_minimum_backoff, retry_maximum_backoff) and messages' `backoff`
with its partial index messages_backoff (see BACKOFF_ENDED_SQL).
queue_state and settings need no version: the schema statements make them (IF NOT EXISTS) in
a file of any version, and a leaseq that does not know them leaves them alone."""

# One column per QueueConfig field, in the dataclass's order (the retry policy as two).
_CONFIG_FIELDS = CONFIG_COLUMNS

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
    ordering            INTEGER NOT NULL DEFAULT 1,
    content_based_dedup INTEGER NOT NULL DEFAULT 0,
    dedup_scope         INTEGER NOT NULL DEFAULT 1,
    retry_minimum_backoff REAL,           -- NULL: no retry policy
    retry_maximum_backoff REAL,
    dead_lettered_total INTEGER NOT NULL DEFAULT 0,
    expired_total       INTEGER NOT NULL DEFAULT 0,
    deleted_total       INTEGER NOT NULL DEFAULT 0
);

-- No comma in a column's comment: DROP COLUMN (the tests make older versions' files so) reads
-- one there as the end of the column before.
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
    source_queue   TEXT,
    lifetime       REAL NOT NULL DEFAULT 0, -- the message's lifetime class (_LIFETIMES)
    grp            TEXT,                    -- the message's group (NULL: none)
    backoff        INTEGER NOT NULL DEFAULT 0 -- 1: the lease ends with the retry backoff
);
{message_indexes}
CREATE INDEX IF NOT EXISTS messages_attempt ON messages (queue, attempt_id)
    WHERE attempt_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_channel ON messages (queue, channel, visible_at)
    WHERE channel != '';
{groups}

-- Free-form name -> value pairs of a queue (Azure's queue metadata), a JSON object.
CREATE TABLE IF NOT EXISTS queue_metadata (
    queue    INTEGER PRIMARY KEY REFERENCES queues (id) ON DELETE CASCADE,
    metadata TEXT NOT NULL
);

-- A front end's own name -> value pairs of a queue (SQS's tags, ...) and of the server, in
-- namespaces (Store.queue_state, Store.settings).
CREATE TABLE IF NOT EXISTS queue_state (
    queue     INTEGER NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (queue, namespace, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS settings (
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;

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

# Lifetime classes (schema version 5). A message's `lifetime` is L > 0 when its expires_at was
# computed as enqueued_at + L (a send's ttl, by default the queue's retention; a dead-lettered
# message's new retention), else 0 ("no class": a redriven message keeps its enqueued_at and
# gets a new expiry; every message of a file migrated from version 4). Within one class L > 0,
# expires_at order is enqueued_at order (floating-point addition of L is monotonic), so the one
# index messages_expiry (queue, lifetime, expires_at) answers
#   - the expiry sweep: a range expires_at <= now per class (SWEEP_SQL), and
#   - stats' oldest visible message: per class, the first visible entry in expiry order; when
#     several entries share its expires_at, the least enqueued_at among them (OLDEST_IN_CLASS_SQL);
# and only class 0 needs the second, partial index messages_enqueued (queue, enqueued_at). This
# saves a sent message one index entry to insert and one to delete. `lifetimes` lists
# the classes each queue's messages use (every operation that gives a message a class records it
# in the same transaction; housekeeping forgets the empty ones), at most MAX_LIFETIMES per queue:
# a message whose lifetime would be a new class past that goes to class 0, so the sweep's
# searches per operation stay few whatever ttls clients choose.
#
# messages_visible also holds `leased`, so that live leases are counted from its range after now
# (IN_FLIGHT_SQL) without a partial index of leased messages, which cost each delivery an entry
# to insert and each delete one to remove (messages_visible's entry is rewritten anyway: a
# delivery changes visible_at).
_MESSAGE_INDEXES = """
CREATE INDEX IF NOT EXISTS messages_visible ON messages (queue, visible_at, key, leased);
CREATE INDEX IF NOT EXISTS messages_expiry ON messages (queue, lifetime, expires_at);
CREATE INDEX IF NOT EXISTS messages_enqueued ON messages (queue, enqueued_at) WHERE lifetime = 0;
CREATE INDEX IF NOT EXISTS messages_group ON messages (queue, grp) WHERE grp IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_group_visible ON messages (queue, grp, visible_at)
    WHERE grp IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_backoff ON messages (queue, visible_at) WHERE backoff = 1;
CREATE TABLE IF NOT EXISTS lifetimes (
    queue    INTEGER NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    lifetime REAL NOT NULL,
    PRIMARY KEY (queue, lifetime)
) WITHOUT ROWID;
"""
_SCHEMA = _SCHEMA.replace("{message_indexes}", _MESSAGE_INDEXES)

MAX_LIFETIMES = 16

# One row per run of consecutive message keys that one operation deleted with the same
# receipt_seq: `key` is the run's first key, `last_key` its last. An ack of 1,000 messages sent
# together is one row instead of 1,000 (a fifth of the delete's SQLite time). Runs never
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

# Message groups (domain.groups): one row per group holding messages of a FIFO or FAIR queue,
# with the instant a receive may deliver from it (ready_at) and, FAIR, when it was last served
# (turn). Receives find ready groups by groups_ready (FIFO, oldest first) or groups_turn (FAIR,
# least recently served first), then the group's messages by messages_group (key order: FIFO)
# or messages_group_visible (delivery order: FAIR). Only messages with a group are in those
# two partial indexes: a queue without groups pays nothing for them.
_GROUPS = """
CREATE TABLE IF NOT EXISTS groups (
    queue    INTEGER NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    name     TEXT NOT NULL,
    ready_at REAL NOT NULL,
    turn     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS groups_ready ON groups (queue, ready_at);
CREATE INDEX IF NOT EXISTS groups_turn ON groups (queue, turn);
"""
_SCHEMA = _SCHEMA.replace("{groups}", _GROUPS)

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
    # The schema statements made `lifetimes`; the message indexes of _MESSAGE_INDEXES are made
    # after the migrations (they name the new column). The messages already there get class 0
    # (the column's default): exact, with both indexes.
    5: [
        "ALTER TABLE messages ADD COLUMN lifetime REAL NOT NULL DEFAULT 0",
        "DROP INDEX IF EXISTS messages_visible",
        "DROP INDEX IF EXISTS messages_expiry",
        "DROP INDEX IF EXISTS messages_leased",
        "DROP INDEX IF EXISTS messages_enqueued",
        "INSERT OR IGNORE INTO lifetimes (queue, lifetime) SELECT DISTINCT queue, 0 FROM messages",
    ],
    # The schema statements made `groups`; messages_group* are made after the migrations.
    6: [
        "ALTER TABLE queues ADD COLUMN ordering INTEGER NOT NULL DEFAULT 1",
        "ALTER TABLE queues ADD COLUMN content_based_dedup INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE queues ADD COLUMN dedup_scope INTEGER NOT NULL DEFAULT 1",
        "ALTER TABLE messages ADD COLUMN grp TEXT",
    ],
    # messages_backoff is made after the migrations, with the other message indexes.
    7: [
        "ALTER TABLE queues ADD COLUMN retry_minimum_backoff REAL",
        "ALTER TABLE queues ADD COLUMN retry_maximum_backoff REAL",
        "ALTER TABLE messages ADD COLUMN backoff INTEGER NOT NULL DEFAULT 0",
    ],
}

# --- statements used on hot paths (module constants so the query-plan tests check these) ------

QUEUE_COLUMNS = (
    "id, name, uid, create_time, "
    + ", ".join(_CONFIG_FIELDS)
    + ", dead_lettered_total, expired_total, deleted_total"
)
QUEUE_BY_NAME_SQL = f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name = ?"

# The expired messages of a queue: a range of messages_expiry per lifetime class of the queue.
SWEEP_SQL = (
    "DELETE FROM messages WHERE queue = ?1"
    " AND lifetime IN (SELECT lifetime FROM lifetimes WHERE queue = ?1) AND expires_at <= ?2"
    " RETURNING channel, grp"
)

# Records a lifetime class of a queue (rowcount 1 when it is new).
ADD_LIFETIME_SQL = "INSERT OR IGNORE INTO lifetimes (queue, lifetime) VALUES (?, ?)"

# Adds a (signed) number of messages to a channel's count.
COUNT_CHANNEL_SQL = (
    "INSERT INTO channel_counts (queue, channel, total) VALUES (?, ?, ?)"
    " ON CONFLICT (queue, channel) DO UPDATE SET total = total + excluded.total"
)

INSERT_MESSAGE_SQL = (
    "INSERT INTO messages (queue, message_id, body, attributes, channel, enqueued_at,"
    " expires_at, visible_at, lifetime, grp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

# Sends insert their rows INSERT_ROWS at a time with one multi-row INSERT ... VALUES, not one
# `executemany` step per row: each step of an executemany binds one row, runs the statement's
# program once (AUTOINCREMENT's read and write of sqlite_sequence included), resets it and lets go
# of the GIL and takes it back: a row costs several times what it costs in a 100-row statement
# (docs/performance.md, "Figures behind the code"). A statement's compile time grows faster than
# its rows (compiled once, then cached), so a batch is cut into statements of INSERT_ROWS, then
# tens, then single rows: at most three shapes of each form in the statement cache.
INSERT_ROWS = (100, 10, 1)


@functools.cache  # one str object per shape: its hash, the statement cache's key, is kept
def insert_rows_sql(count: int) -> str:
    """INSERT_MESSAGE_SQL for `count` rows of 10 parameters each."""
    return INSERT_MESSAGE_SQL.replace(
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * count)
    )


@functools.cache
def insert_bodies_sql(count: int) -> str:
    """INSERT_MESSAGE_SQL for `count` messages that are only a body (no attributes, channel ''):
    parameters ?1-?5 are the queue, enqueued_at, expires_at, visible_at and lifetime they share,
    then a message_id and a body per message."""
    rows = ", ".join(
        f"(?1, ?{6 + 2 * i}, ?{7 + 2 * i}, NULL, '', ?2, ?3, ?4, ?5, NULL)" for i in range(count)
    )
    return INSERT_MESSAGE_SQL.replace("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


# Live leases of a queue: the messages_visible range after now (leased and delayed messages),
# read from the index alone (it holds `leased`).
IN_FLIGHT_SQL = (
    "SELECT COUNT(*), MIN(visible_at) FROM messages INDEXED BY messages_visible"
    " WHERE queue = ? AND visible_at > ? AND leased = 1"
)

# The enqueue time of the oldest visible message of class 0: messages_enqueued in enqueue order,
# skipping the leased and delayed ones (a table lookup each), so it reads at most those + 1.
OLDEST_VISIBLE_SQL = (
    "SELECT enqueued_at FROM messages INDEXED BY messages_enqueued"
    " WHERE queue = ? AND lifetime = 0 AND +visible_at <= ? ORDER BY enqueued_at LIMIT 1"
)

# The same for a class L > 0 (parameters: queue, L, now): the first visible entry of the class
# in messages_expiry, skipping the leased and delayed ones; its enqueue time is the least of
# the class's visible messages unless others share its expires_at (a visible message enqueued
# earlier expires no later, and none expires earlier), so the least of those.
OLDEST_IN_CLASS_SQL = (
    "SELECT MIN(enqueued_at) FROM messages INDEXED BY messages_expiry"
    " WHERE queue = ?1 AND lifetime = ?2 AND +visible_at <= ?3 AND expires_at = ("
    "SELECT expires_at FROM messages INDEXED BY messages_expiry"
    " WHERE queue = ?1 AND lifetime = ?2 AND +visible_at <= ?3 ORDER BY expires_at LIMIT 1)"
)

# Leased and delayed messages by channel: the messages_visible range after now.
UNAVAILABLE_SQL = (
    "SELECT channel, SUM(leased = 1), SUM(leased = 0) FROM messages"
    " WHERE queue = ? AND visible_at > ? GROUP BY channel"
)

# A grouped queue's groups and those not ready at now (parameters: now, queue).
GROUP_COUNTS_SQL = "SELECT COUNT(*), COALESCE(SUM(ready_at > ?), 0) FROM groups WHERE queue = ?"

NEXT_VISIBLE_SQL = "SELECT MIN(visible_at) FROM messages WHERE queue = ? AND visible_at > ?"

# Deliveries and deletes name their messages in one JSON array bound as ONE parameter: a single
# statement walks it in C (json_each) instead of Python binding a statement per message, which
# was a fifth of the store's time per message at batch 1,000 in a profile.

# A delivered message as a receive reads it (transaction.finish_delivery): the fields every
# message has, then its rarely set ones (attributes, channel, last_error) as one JSON array, NULL
# when none is set. visible_at is the one the delivery set (DELIVER_SQL's parameter), so only the
# attempt replay reads it (ATTEMPT_LEASES_SQL: last). Fewer columns because each one a row gives
# back costs pysqlite (CPython 3.11) a release and a take of the GIL around sqlite3_column_type,
# and a thread switch when the event loop is waiting for the GIL: 8 columns instead of 11 cut
# the receive's part of the cycle at batch 100.
DELIVERED_COLUMNS = (
    "key, message_id, body, enqueued_at, expires_at, delivery_count, receipt_seq,"
    " CASE WHEN attributes IS NULL AND channel = '' AND last_error = '' AND grp IS NULL THEN NULL"
    " ELSE json_array(attributes, channel, last_error, grp) END"
)

# The leases of a queue with a retry policy that ended by now and end with its backoff (a
# delivery set `backoff`; only such leases are in the partial index, so queues without a policy
# pay nothing): transaction.Tx turns each into a delay until its redelivery.
BACKOFF_ENDED_SQL = (
    "SELECT key, visible_at, delivery_count FROM messages INDEXED BY messages_backoff"
    " WHERE queue = ? AND backoff = 1 AND visible_at <= ?"
)

# A delivery to a queue with a retry policy: its leases end with the backoff (a statement of its
# own, so that DELIVER_SQL is the same for queues without a policy). Parameter: a JSON array.
MARK_BACKOFF_SQL = "UPDATE messages SET backoff = 1 WHERE key IN (SELECT value FROM json_each(?))"

# Parameters: visible_at, leased, attempt_id, JSON array of keys. RETURNING gives the rows after
# the update, in no particular order (the caller restores delivery order). OR FAIL: no
# constraint can fail here (every value set is given or computed), and OR ABORT's only effect
# would be a statement journal, one more copy of every page the statement changes; the
# operation's own rollback covers any other error.
DELIVER_SQL = (
    "UPDATE OR FAIL messages SET delivery_count = delivery_count + 1, receipt_seq = receipt_seq + 1,"
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
    grp: str | None


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
    f"SELECT {DELIVERED_COLUMNS}, visible_at FROM messages WHERE queue = ? AND attempt_id = ?"
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


@functools.cache
def picked_sql(channel_clause: str = "") -> str:
    """A receive's candidates (candidates_sql) in one row: their keys as a JSON array in delivery
    order, and their total size. The per-message form gives back a row per message, each a step
    and a GIL release and take per column in pysqlite; this row is bound as it is to DELIVER_SQL.
    The subquery's LIMIT keeps SQLite from flattening it into the aggregate, which so reads its
    rows in its ORDER BY order (tests/sqlite/test_receive_order.py)."""
    candidates = candidates_sql(f"key, {SIZE_SQL} AS size", channel_clause)
    return f"SELECT json_group_array(key), sum(size) FROM ({candidates})"


def leases_by_key_sql(count: int) -> str:
    """Lease state of messages by key: primary key lookups. The queue is checked in Python, as a
    `queue = ?` term tempts the planner into scanning an index of the whole queue instead."""
    marks = ", ".join("?" * count)
    return (
        "SELECT key, queue, receipt_seq, leased, visible_at, last_error, delivery_count, backoff"
        " FROM messages"
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


def _message_index(statement: str) -> bool:
    """One of _MESSAGE_INDEXES' indexes: made after the migrations, which may first have to add
    the column they name (an older file's indexes of those names are dropped by migration 5)."""
    return statement.startswith("CREATE INDEX") and statement in _MESSAGE_INDEXES


def _initialize(conn: sqlite3.Connection) -> bytes:
    """Create the schema if needed, bring an older file up to SCHEMA_VERSION, and return the
    receipt signing key (made once per file)."""
    statements = _schema_statements()
    for statement in statements:
        if not _message_index(statement):
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
        conn.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (SCHEMA_VERSION,))
    for statement in statements:
        if _message_index(statement):
            conn.execute(statement)
    key = _meta(conn, "receipt_signing_key")
    if key is None:
        key = new_signing_key()
        conn.execute("INSERT INTO meta (name, value) VALUES ('receipt_signing_key', ?)", (key,))
    return bytes(key)


def _meta(conn: sqlite3.Connection, name: str) -> Any:
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
    return None if row is None else row[0]


# Keys per `IN (...)` list: far below SQLite's variable limit, and a handful of distinct
# statement shapes for the statement cache.
IN_CHUNK = 500


def _chunks(items: Sequence[Any], size: int = IN_CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


_SEQ = itemgetter(1)


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
