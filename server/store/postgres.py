"""The PostgreSQL store: many server replicas over one database.

Semantics are base.py's, to the letter (the contract suite runs unchanged against this store);
this module only decides how to get them from PostgreSQL with many replicas at once.

URL
---
``postgresql://user:password@host:port/dbname?schema=leaseq&pool_min=2&pool_max=10``
(``postgres://`` too). ``schema`` (default ``leaseq``; lowercase letters, digits, ``_``) holds
every table, so several deployments or test runs share one database; ``pool_min`` /
``pool_max`` size the connection pool (``leaseq serve --pool-min/--pool-max`` set them);
``pool_timeout`` (seconds, default 5) is how long an operation waits for a connection before
it answers UNAVAILABLE. Every other query parameter goes to libpq as it is (``sslmode``,
``application_name``, ``connect_timeout``, ...).

Time
----
Every operation is one transaction and acts as of one instant, "now". In production that instant
is the database's: the first statement of the transaction reads ``now()`` (the transaction's
start, constant inside it), so replicas whose clocks disagree still agree on every lease, delay
and expiry. Tests inject a `Clock` (the contract suite's FakeClock) and then that clock's reading
is passed as a query parameter instead: the SQL is the same text in both cases,
``COALESCE(%(now)b, extract(epoch FROM now()))``, with NULL in production. Later statements of the
transaction pass the instant the first one returned. Times are float8 seconds since the epoch,
like every store's (to read them: ``to_timestamp(visible_at)``).

`store.clock` (what the service uses for ``server_time`` and the long-poll timers) is then a
`DatabaseClock`: the local clock corrected by the offset to the database's clock, measured at
open and again every minute.

Concurrency
-----------
READ COMMITTED transactions, with row locks where two replicas could collide:

- receive picks candidates with ``FOR UPDATE SKIP LOCKED`` in delivery order and updates them in
  the same statement: a message being delivered by one transaction is skipped by the others, and a
  row updated under a concurrent snapshot is re-checked against ``visible_at <= now`` before it is
  locked, so one delivery never goes to two consumers;
- lease operations (delete, change visibility, update) lock their messages ``FOR UPDATE`` in key
  order, then apply base.fence: a delivery and an ack of the same message serialize on the row;
- sends, dead-letter moves and redrives hold ``FOR KEY SHARE`` on the destination queue's row, so
  a concurrent DeleteQueue waits for them and then removes what they wrote; a queue created with a
  dead letter queue holds it the same way;
- the first statement of every operation also looks (one index probe) for expired messages;
  only when there are some a sweep deletes them, with ``SKIP LOCKED``, at most SWEEP_LIMIT at a
  time; every read filters ``expires_at > now`` and stats count what is expired but not swept
  yet, so counts stay exact whatever was swept;
- deadlocks and serialization failures (a purge racing a batch ack) are retried.

Counters (dead-lettered, expired, deleted totals and lease grants) are not columns of the queue's
row, which every consumer would then update and serialize on: each connection adds to its own
row of ``queue_counters`` (slot = backend pid mod COUNTER_SLOTS) and stats sums them.

The in-flight limit: counting live leases walks an index of every one of them, so (as in the
SQLite store) a receive first looks at a ceiling: the last exact count plus every lease granted
since (the ``granted`` counters, which every leasing receive adds to in its own transaction).
While ceiling + max_messages fits under max_in_flight no count is needed; near the limit a
receive takes the queue's advisory lock and counts exactly. Sequentially the limit is exact, as
base.py says; under concurrency a receiver far from the limit may overshoot it by at most the
batches other replicas are delivering at that very moment.

Schema and migrations
---------------------
``open()`` creates the schema and applies MIGRATIONS (versioned; the version is in ``meta``) in
one transaction under an advisory lock named after the schema, so replicas starting together
take turns and the later ones find the work done. A schema newer than this code is refused. The
receipt signing key is made once and kept in ``meta``, so every replica accepts every replica's
receipts.

Indexes (messages) and why
--------------------------
    messages_visible (queue, visible_at, key)   receive/peek/redrive: an ordered index range
                                                scan from the queue's oldest visible message
                                                that ends at visible_at <= now (leased and
                                                delayed messages lie beyond it, never scanned)
    messages_expiry  (queue, expires_at)        the expiry sweep
    messages_leased  (queue, visible_at) WHERE leased      live leases (exact in-flight count)
    messages_attempt (queue, attempt_id) WHERE attempt_id IS NOT NULL   receive attempts
    messages_channel (queue, channel, visible_at, key) WHERE channel <> ''   exact channel
psycopg prepares a statement after a few runs, and PostgreSQL may then keep a generic plan, made
without the parameters' values: conditions that must not steer the plan are written as filters
(``expires_at + 0 > now``: see UNEXPIRED), and tests/postgres/test_query_plans.py checks every
hot statement's generic and custom plans (no Seq Scan, the intended index, no Sort of a queue).

Statistics can still mislead the planner: right after a VACUUM of an empty table (relpages and
reltuples 0) every path looks free, and a generic plan made then (a Seq Scan and Sort of the
queue for the receive, and a Nested Loop re-reading the whole table once per picked row for its
UPDATE) was kept while the table grew to 100,000s of rows: a receive took 10 to 70 s, and
throughput fell from ~5,000 to under 100 msgs/s. The store's connections therefore run with
PLANNER_SETTINGS:

- plan_cache_mode = force_custom_plan: every execution is planned with the table's size as it
  is now (the planner reads the current number of pages, whatever pg_class says), so no plan
  made for an empty table outlives it. The price is planning each statement again (tens to
  hundreds of microseconds of the database's CPU, small next to a round trip);
- enable_seqscan and enable_sort off: without column statistics (a table never ANALYZEd, or
  analyzed nearly empty) a custom plan may still prefer reading and sorting the whole queue to
  the ordered index scan; those paths now cost so much that the planner takes the indexes, and
  scans or sorts only where no index path exists at all (every statement here has one).

And the hot statements are shaped so that their only index plans are the intended ones: the
receive updates `key = ANY(array of picked keys)` instead of joining the picked rows (a join
order is the planner's choice), next-visible is an ordered LIMIT 1 rather than min(), attempt
replay sorts in Python.

Every delivery moves visible_at, so it is never a HOT update and leaves an index entry for a
dead tuple at the head of messages_visible (where the next receive starts), and every ack a dead
row. PostgreSQL's index scans mark such entries dead on their first visit (later scans skip them
without a heap visit) and VACUUM removes them: the messages table is vacuumed after every
AUTOVACUUM_THRESHOLD dead rows whatever its size (scale factor 0, no cost delay). Until then a
receive's index scan reads about one more leaf page per couple of hundred deletes
(tests/postgres/test_store.py measures it); an old snapshot held elsewhere in the database
(a long transaction) keeps the entries from being marked, and then each costs a heap visit.

Parameters travel in binary (``%(name)b``): bodies as they are, not hex-encoded.

Notifications
-------------
A long poll waiting on replica A must wake when a message is sent through replica B. After a
change commits (send, release, redrive, purge, ...), the store publishes the queue's name on a
channel named after the schema (NOTIFY), from a background task that coalesces what piled up
meanwhile into one short transaction with synchronous_commit off. (A NOTIFY inside the data
transaction would serialize every committing sender on PostgreSQL's global notify lock.) One
connection per replica LISTENs and calls the subscribers (`subscribe`) with the queue's name;
its own notifications are ignored (the service already woke its waiters). When the listening
connection is lost, or every FALLBACK_WAKE_SECONDS in any case, subscribers are called with
None: "anything may have changed", a slow safety net for notifications lost on the way.

Failures
--------
A lost connection, a database restart, an exhausted pool: the RPC fails with
`errors.Unavailable` (UNAVAILABLE with RetryInfo). When the failure happened before COMMIT was
sent the transaction cannot have committed, so the store first checks the pool (dropping dead
connections) and retries on a fresh connection: after `pg_terminate_backend` most callers notice
nothing. The pool reconnects by itself; the listener reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.errors import DeadlockDetected, SerializationFailure
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from ..clock import Clock
from . import StoreOpenError
from ..errors import (
    InvalidArgument,
    LeaseqError,
    LeaseRejected,
    OverLimit,
    QueueAlreadyExists,
    QueueInUse,
    QueueNotFound,
    Unavailable,
)
from ..receipts import ReceiptCodec, new_queue_uid, new_signing_key
from .base import (
    TOMBSTONE_SECONDS,
    CountsByState,
    DeleteOutcome,
    DeliveredMessage,
    LeaseResult,
    LeaseStatus,
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
    bytes_reached,
    message_size,
    message_state,
)
from .fencing import Lease, Tombstone, fence_lease, held_lease_status, lease_result

__all__ = ["DatabaseClock", "PostgresSettings", "PostgresStore", "parse_url"]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_SCHEMA = "leaseq"
DEFAULT_POOL_MIN = 2
DEFAULT_POOL_MAX = 10
# How long an operation waits for a pooled connection before answering UNAVAILABLE.
POOL_TIMEOUT = 5.0
# How long open() waits for the first connections.
OPEN_TIMEOUT = 15.0

# Expired messages one operation removes at most (reads filter expires_at anyway).
SWEEP_LIMIT = 10_000
# Rows of queue_counters per queue (see the module docstring).
COUNTER_SLOTS = 64
# Candidates read per statement by a receive on a queue with a dead letter queue.
PICK_READ_AHEAD = 64
# Retries of an operation that lost its connection before COMMIT, or hit a deadlock.
RETRIES = 3

# Background work (real seconds).
HOUSEKEEPING_SECONDS = 60.0
HOUSEKEEPING_ROWS = 5_000
CLOCK_SYNC_SECONDS = 60.0
FALLBACK_WAKE_SECONDS = 10.0
# How often the store compares messages' statistics with its live rows (refresh_statistics).
STATS_CHECK_SECONDS = 5.0
# ANALYZE when the statistics count under a tenth of the live rows, and these are at least this.
STALE_STATS_ROWS = 10_000
LISTEN_BACKOFF_MAX = 5.0

# Session settings of every store connection: index plans whatever the statistics say (see the
# module docstring, Indexes). The user's own `options` in the URL come first and cannot undo them.
PLANNER_SETTINGS = {
    "plan_cache_mode": "force_custom_plan",
    "enable_seqscan": "off",
    "enable_sort": "off",
}

# Autovacuum for the tables that churn: vacuum after this many dead rows, whatever the size.
AUTOVACUUM_THRESHOLD = 5_000

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(QueueConfig))

# --- migrations -------------------------------------------------------------------------------
#
# Each entry: (version, statements). {schema} is replaced with the quoted schema name. Add new
# versions at the end; never edit a released one.

_AUTOVACUUM = (
    f"autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = {AUTOVACUUM_THRESHOLD},"
    " autovacuum_vacuum_insert_scale_factor = 0,"
    f" autovacuum_vacuum_insert_threshold = {10 * AUTOVACUUM_THRESHOLD},"
    " autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0"
)

MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """
            CREATE TABLE {schema}.queues (
                id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                name                text COLLATE "C" NOT NULL UNIQUE,
                uid                 bigint NOT NULL,
                create_time         float8 NOT NULL,
                visibility_timeout  float8 NOT NULL,
                receive_wait_time   float8 NOT NULL,
                message_retention   float8 NOT NULL,
                default_delay       float8 NOT NULL,
                max_message_bytes   bigint NOT NULL,
                dead_letter_queue   text COLLATE "C",
                max_delivery_count  integer,
                max_in_flight       bigint NOT NULL,
                dedup_window        float8 NOT NULL,
                -- the in-flight ceiling: the last exact count of live leases, and the sum of
                -- the granted counters in the same snapshot
                leases_counted      bigint NOT NULL DEFAULT 0,
                grants_at_count     bigint NOT NULL DEFAULT 0
            ) WITH (fillfactor = 70)
            """,
            "CREATE INDEX queues_dead_letter_queue ON {schema}.queues (dead_letter_queue)"
            " WHERE dead_letter_queue IS NOT NULL",
            """
            CREATE TABLE {schema}.queue_counters (
                queue         bigint NOT NULL,
                slot          integer NOT NULL,
                dead_lettered bigint NOT NULL DEFAULT 0,
                expired       bigint NOT NULL DEFAULT 0,
                deleted       bigint NOT NULL DEFAULT 0,
                granted       bigint NOT NULL DEFAULT 0,
                PRIMARY KEY (queue, slot)
            ) WITH (fillfactor = 50)
            """,
            f"""
            CREATE TABLE {{schema}}.messages (
                key            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                queue          bigint NOT NULL,
                message_id     text NOT NULL,
                body           bytea NOT NULL,
                attributes     jsonb,
                channel        text COLLATE "C" NOT NULL,
                enqueued_at    float8 NOT NULL,
                expires_at     float8 NOT NULL,
                visible_at     float8 NOT NULL,
                leased         boolean NOT NULL DEFAULT false,
                delivery_count integer NOT NULL DEFAULT 0,
                receipt_seq    integer NOT NULL DEFAULT 0,
                last_error     text NOT NULL DEFAULT '',
                attempt_id     text,
                source_queue   text
            ) WITH (fillfactor = 90, {_AUTOVACUUM})
            """,
            # Bodies are opaque bytes, often compressed already: stored out of line as they are
            # (pglz would spend the database's CPU on every big message, in and out).
            "ALTER TABLE {schema}.messages ALTER COLUMN body SET STORAGE EXTERNAL",
            "CREATE INDEX messages_visible ON {schema}.messages (queue, visible_at, key)",
            "CREATE INDEX messages_expiry ON {schema}.messages (queue, expires_at)",
            "CREATE INDEX messages_leased ON {schema}.messages (queue, visible_at) WHERE leased",
            "CREATE INDEX messages_attempt ON {schema}.messages (queue, attempt_id)"
            " WHERE attempt_id IS NOT NULL",
            "CREATE INDEX messages_channel ON {schema}.messages (queue, channel, visible_at, key)"
            " WHERE channel <> ''",
            f"""
            CREATE TABLE {{schema}}.tombstones (
                key         bigint PRIMARY KEY,
                queue       bigint NOT NULL,
                receipt_seq integer NOT NULL,
                deleted_at  float8 NOT NULL
            ) WITH ({_AUTOVACUUM})
            """,
            "CREATE INDEX tombstones_age ON {schema}.tombstones (deleted_at)",
            """
            CREATE TABLE {schema}.dedup (
                queue      bigint NOT NULL,
                dedup_id   text NOT NULL,
                message_id text NOT NULL,
                until      float8 NOT NULL,
                PRIMARY KEY (queue, dedup_id)
            )
            """,
            "CREATE INDEX dedup_age ON {schema}.dedup (until)",
            """
            CREATE TABLE {schema}.attempts (
                queue      bigint NOT NULL,
                attempt_id text NOT NULL,
                until      float8 NOT NULL,
                PRIMARY KEY (queue, attempt_id)
            )
            """,
            "CREATE INDEX attempts_age ON {schema}.attempts (until)",
        ],
    ),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]

# --- statements (module constants, so the query-plan tests check these very texts) ----------

NOW_SQL = "COALESCE(%(now)b::float8, extract(epoch FROM now())::float8)"

QUEUE_COLUMNS = "id, name, uid, create_time, " + ", ".join(_CONFIG_FIELDS)
QUEUE_COLUMNS_OF_Q = ", ".join(f"q.{c}" for c in QUEUE_COLUMNS.split(", "))
GRANTED_SQL = (
    "(SELECT COALESCE(sum(granted), 0)::bigint FROM queue_counters WHERE queue = q.id)"
)

SLOT_SQL = f"mod(pg_backend_pid(), {COUNTER_SLOTS})"


def open_queue_sql(lock: str = "", ceiling: bool = False) -> str:
    """The first statement of an operation on a queue: the instant "now", the queue's row (no
    row when there is no such queue) and whether any of its messages expired (then SWEEP_SQL
    runs next). (Not EXISTS, whose plan may expect a match within a few rows and scan the
    table: the ordered LIMIT 1 searches messages_expiry's range up to now, which the dead
    entries of acked messages, expiring later, are not in.) lock: "" or "FOR KEY SHARE" (the
    operation will add messages to the queue). ceiling: also the sum of the queue's granted
    counters (receive)."""
    extra = f", {GRANTED_SQL}" if ceiling else ""
    lock = f"{lock} OF q" if lock else ""
    return f"""
        SELECT c.now, {QUEUE_COLUMNS_OF_Q}, q.leases_counted, q.grants_at_count,
            (SELECT m.expires_at FROM messages m WHERE m.queue = q.id AND m.expires_at <= c.now
             ORDER BY m.expires_at LIMIT 1) IS NOT NULL
            {extra}
        FROM queues q, (SELECT {NOW_SQL} AS now) c
        WHERE q.name = %(name)b {lock}
    """


# The expiry sweep, when the first statement saw expired messages: at most SWEEP_LIMIT of them
# (the others wait for the next operation; reads filter expired messages anyway), those another
# transaction holds skipped, counted in the queue's expired total.
SWEEP_SQL = f"""
    WITH expired AS (
        DELETE FROM messages WHERE key = ANY(ARRAY(
            SELECT key FROM messages WHERE queue = %(queue)b AND expires_at <= %(now)b
            ORDER BY expires_at LIMIT {SWEEP_LIMIT} FOR UPDATE SKIP LOCKED))
        RETURNING 1)
    INSERT INTO queue_counters AS c (queue, slot, expired)
    SELECT %(queue)b, {SLOT_SQL}, count(*) FROM expired HAVING count(*) > 0
    ON CONFLICT (queue, slot) DO UPDATE SET expired = c.expired + EXCLUDED.expired
"""

# "Not expired" as a filter, never an index condition: as one, a generic plan (psycopg prepares
# statements after a few runs) may prefer a range of messages_expiry over the ordered scan of
# messages_visible, and then sort the whole queue. Likewise for other columns below (`+ 0`).
UNEXPIRED = "expires_at + 0 > %(now)b"

MESSAGE_COLUMNS = (
    "key, message_id, body, attributes, channel, enqueued_at, expires_at, visible_at, leased,"
    " delivery_count, receipt_seq, last_error, source_queue"
)


def _channel_clause(channel_filter: str) -> str:
    """SQL for base.channel_matches, on the parameter %(channel)b. An exact channel repeats
    `channel <> ''` so that the planner may use the partial messages_channel index."""
    if not channel_filter or channel_filter == "*":
        return ""
    if channel_filter.endswith("*"):
        return " AND starts_with(channel, %(channel)b)"
    return " AND channel = %(channel)b AND channel <> ''"


def _channel_param(channel_filter: str) -> str:
    return channel_filter[:-1] if channel_filter.endswith("*") else channel_filter


def candidates_sql(channel_clause: str = "", after: bool = False, columns: str = "key") -> str:
    """Visible, unexpired messages of a queue in delivery order, locked for this transaction;
    those another transaction holds are skipped. An ordered index range scan ending at
    visible_at <= now."""
    cursor = " AND (visible_at, key) > (%(after_visible_at)b, %(after_key)b)" if after else ""
    return (
        f"SELECT {columns} FROM messages"
        f" WHERE queue = %(queue)b AND visible_at <= %(now)b AND {UNEXPIRED}"
        f"{channel_clause}{cursor}"
        " ORDER BY visible_at, key LIMIT %(limit)b FOR UPDATE SKIP LOCKED"
    )


def peek_sql(
    include_leased: bool,
    include_delayed: bool,
    channel_clause: str = "",
    after: bool = False,
    columns: str = MESSAGE_COLUMNS,
) -> str:
    """Messages in the wanted states in delivery order, without locks: messages_visible.
    A byte-limited peek selects SIZED_COLUMNS first, then the page's rows (PEEK_KEYS_SQL)."""
    if include_leased and include_delayed:
        states = ""
    elif include_leased:
        states = " AND (visible_at <= %(now)b OR leased)"
    elif include_delayed:
        states = " AND (visible_at <= %(now)b OR NOT leased)"
    else:
        states = " AND visible_at <= %(now)b"
    cursor = " AND (visible_at, key) > (%(after_visible_at)b, %(after_key)b)" if after else ""
    return (
        f"SELECT {columns} FROM messages WHERE queue = %(queue)b AND {UNEXPIRED}"
        f"{states}{channel_clause}{cursor} ORDER BY visible_at, key LIMIT %(limit)b"
    )


# A message's size for base.py's max_bytes. octet_length of a bytea reads its TOAST header, not
# the value, so sizing candidates costs no body read.
SIZE_SQL = "octet_length(body) + coalesce(octet_length(attributes::text), 0)"
SIZED_COLUMNS = f"key, visible_at, {SIZE_SQL} AS size"

PEEK_KEYS_SQL = (
    f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE key = ANY(%(keys)b::bigint[])"
    " ORDER BY visible_at, key"
)
"""The rows of a byte-limited peek page, chosen by their sizes first: only they are read whole."""


_DELIVERED_COLUMNS = ", ".join(f"m.{c}" for c in MESSAGE_COLUMNS.split(", "))


def deliver_sql(channel_clause: str = "", sized: bool = False) -> str:
    """Pick and deliver in one statement (queues without a dead letter queue): the candidates,
    their new delivery, and the lease grants counted. Each row comes back with its place in
    the pick order (delivery order).

    The picked rows are named by their ctid, one array (an InitPlan): `ctid = ANY(array)` has
    no plan but a Tid Scan (or a Seq Scan: PLANNER_SETTINGS), whatever the statistics say. The
    rows are locked by the pick (FOR UPDATE), so their ctids hold until this UPDATE. By key, or
    joined to the picked rows, the planner was free to read a whole index once per picked key
    (messages_visible holds key too) when the statistics said the table was empty: a receive
    took 20 s (see the module docstring, Indexes).

    sized: the candidates end after the one whose running size reaches %(max_bytes)b (base.py's
    byte limit); the few locked candidates past it are let go at commit. The running sum sorts
    the candidates (at most the limit's rows) again; the queue is still read in index order."""
    if sized:
        candidates = candidates_sql(channel_clause, columns=f"ctid, {SIZED_COLUMNS}")
        chosen = f"""
            SELECT ctid, key FROM (
                SELECT ctid, key, visible_at,
                    sum(size) OVER (ORDER BY visible_at, key ROWS UNBOUNDED PRECEDING) - size
                    AS before
                FROM ({candidates}) AS c) AS s
            WHERE before < %(max_bytes)b ORDER BY visible_at, key"""
    else:
        chosen = candidates_sql(channel_clause, columns="ctid, key")
    # array_agg keeps the order of its sorted subquery (PostgreSQL documents it for this use).
    picked = f"SELECT array_agg(ctid) AS rows, array_agg(key) AS keys FROM ({chosen}) AS p"
    return f"""
        WITH picked AS MATERIALIZED ({picked}),
        delivered AS (
            UPDATE messages m SET delivery_count = m.delivery_count + 1,
                receipt_seq = m.receipt_seq + 1, visible_at = %(until)b, leased = %(leased)b,
                attempt_id = %(attempt)b
            WHERE m.ctid = ANY((SELECT rows FROM picked)::tid[])
            RETURNING array_position((SELECT keys FROM picked), m.key), {_DELIVERED_COLUMNS}),
        granted AS (
            INSERT INTO queue_counters AS c (queue, slot, granted)
            SELECT %(queue)b, {SLOT_SQL}, count(*) FROM delivered
            HAVING %(leased)b AND count(*) > 0
            ON CONFLICT (queue, slot) DO UPDATE SET granted = c.granted + EXCLUDED.granted)
        SELECT * FROM delivered
    """


DELIVER_KEYS_SQL = f"""
    WITH delivered AS (
        UPDATE messages m SET delivery_count = m.delivery_count + 1,
            receipt_seq = m.receipt_seq + 1, visible_at = %(until)b, leased = %(leased)b,
            attempt_id = %(attempt)b
        WHERE m.key = ANY(%(keys)b::bigint[])
        RETURNING {_DELIVERED_COLUMNS}),
    granted AS (
        INSERT INTO queue_counters AS c (queue, slot, granted)
        SELECT %(queue)b, {SLOT_SQL}, count(*) FROM delivered
        HAVING %(leased)b AND count(*) > 0
        ON CONFLICT (queue, slot) DO UPDATE SET granted = c.granted + EXCLUDED.granted)
    SELECT * FROM delivered
"""

# Live leases of a queue, from the partial index only; the granted counters in the same snapshot.
IN_FLIGHT_SQL = (
    "SELECT count(*), min(visible_at),"
    " (SELECT COALESCE(sum(granted), 0)::bigint FROM queue_counters WHERE queue = %(queue)b)"
    f" FROM messages WHERE queue = %(queue)b AND leased AND visible_at > %(now)b AND {UNEXPIRED}"
)

# The first entry of messages_visible past now (NULL when none). Written as the ordered LIMIT 1
# that min() would become, so that no statistics can make it aggregate the queue instead.
NEXT_VISIBLE_SQL = (
    "SELECT (SELECT visible_at FROM messages"
    f" WHERE queue = %(queue)b AND visible_at > %(now)b AND {UNEXPIRED}"
    " ORDER BY visible_at LIMIT 1)"
)

# The caller puts them in key order (an ORDER BY here would make the primary key's index, read
# end to end, a candidate plan: PLANNER_SETTINGS make a Sort costly). `leased IS TRUE`, not
# `leased`: a filter that does not match messages_leased's predicate, so that the planner cannot
# prefer reading every lease of the queue to the few of one attempt.
ATTEMPT_LEASES_SQL = (
    f"SELECT {MESSAGE_COLUMNS} FROM messages"
    " WHERE queue = %(queue)b AND attempt_id = %(attempt)b AND leased IS TRUE"
    f" AND visible_at + 0 > %(now)b AND {UNEXPIRED}"
)

# The fencing state of messages by key, locked in key order (no deadlock between two acks).
LEASES_BY_KEY_SQL = (
    "SELECT key, receipt_seq, leased, visible_at, last_error FROM messages"
    f" WHERE key = ANY(%(keys)b::bigint[]) AND queue + 0 = %(queue)b AND {UNEXPIRED}"
    " ORDER BY key FOR UPDATE"
)

TOMBSTONES_BY_KEY_SQL = (
    "SELECT key, receipt_seq, deleted_at FROM tombstones"
    " WHERE key = ANY(%(keys)b::bigint[]) AND queue = %(queue)b"
)


def delete_sql(where: str) -> str:
    """Delete messages, leave their tombstones and count them, in one statement."""
    return f"""
        WITH gone AS (
            DELETE FROM messages WHERE {where} RETURNING key, receipt_seq),
        marked AS (
            INSERT INTO tombstones (key, queue, receipt_seq, deleted_at)
            SELECT key, %(queue)b, receipt_seq, %(now)b FROM gone
            ON CONFLICT (key) DO UPDATE SET queue = EXCLUDED.queue,
                receipt_seq = EXCLUDED.receipt_seq, deleted_at = EXCLUDED.deleted_at),
        counted AS (
            INSERT INTO queue_counters AS c (queue, slot, deleted)
            SELECT %(queue)b, {SLOT_SQL}, count(*) FROM gone HAVING count(*) > 0
            ON CONFLICT (queue, slot) DO UPDATE SET deleted = c.deleted + EXCLUDED.deleted)
        SELECT key FROM gone
    """


DELETE_KEYS_SQL = delete_sql("key = ANY(%(keys)b::bigint[])")
DELETE_ATTEMPT_SQL = delete_sql(
    f"queue = %(queue)b AND attempt_id = %(attempt)b AND {UNEXPIRED}"
)

# Purge: every message; those already expired (not swept yet) count as expired, not purged.
PURGE_SQL = f"""
    WITH gone AS (
        DELETE FROM messages WHERE queue = %(queue)b RETURNING expires_at > %(now)b AS live),
    counted AS (
        INSERT INTO queue_counters AS c (queue, slot, expired)
        SELECT %(queue)b, {SLOT_SQL}, count(*) FROM gone WHERE NOT live HAVING count(*) > 0
        ON CONFLICT (queue, slot) DO UPDATE SET expired = c.expired + EXCLUDED.expired)
    SELECT count(*) FROM gone WHERE live
"""

INSERT_MESSAGES_SQL = """
    INSERT INTO messages (queue, message_id, body, attributes, channel, enqueued_at,
                          expires_at, visible_at)
    SELECT %(queue)b, m.message_id, m.body, m.attributes::jsonb, m.channel, %(now)b,
           m.expires_at, m.visible_at
    FROM unnest(%(message_ids)b::text[], %(bodies)b::bytea[], %(attributes)b::text[],
                %(channels)b::text[], %(expires)b::float8[], %(visibles)b::float8[])
         AS m(message_id, body, attributes, channel, expires_at, visible_at)
"""

WRITE_LEASES_SQL = """
    UPDATE messages m SET visible_at = v.visible_at, leased = v.leased,
        last_error = v.last_error,
        attempt_id = CASE WHEN v.clear_attempt THEN NULL ELSE m.attempt_id END
    FROM unnest(%(keys)b::bigint[], %(visibles)b::float8[], %(leased)b::bool[],
                %(errors)b::text[], %(clear)b::bool[])
         AS v(key, visible_at, leased, last_error, clear_attempt)
    WHERE m.key = v.key
"""


# --- URL and settings -------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresSettings:
    conninfo: str  # what libpq gets: the URL without this store's own parameters
    schema: str = DEFAULT_SCHEMA
    pool_min: int = DEFAULT_POOL_MIN
    pool_max: int = DEFAULT_POOL_MAX
    pool_timeout: float = POOL_TIMEOUT


_OWN_PARAMS = ("schema", "pool_min", "pool_max", "pool_timeout")


def parse_url(url: str) -> PostgresSettings:
    """Split a store URL into libpq's conninfo and this store's parameters (ValueError if bad)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {url!r}")
    own: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        (own.__setitem__(name, value) if name in _OWN_PARAMS else rest.append((name, value)))
    schema = own.get("schema", DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.match(schema):
        raise ValueError(
            f"bad schema name {schema!r} in the store URL: use lowercase letters, digits and _"
            " (at most 63, not starting with a digit)"
        )
    try:
        pool_min = int(own.get("pool_min", DEFAULT_POOL_MIN))
        pool_max = int(own.get("pool_max", max(DEFAULT_POOL_MAX, pool_min)))
        pool_timeout = float(own.get("pool_timeout", POOL_TIMEOUT))
    except ValueError:
        raise ValueError(f"pool_min, pool_max, pool_timeout must be numbers in {url!r}") from None
    if pool_min < 0 or pool_max < 1 or pool_max < pool_min or not pool_timeout > 0:
        raise ValueError(
            f"need 0 <= pool_min <= pool_max, pool_max >= 1, pool_timeout > 0 (in {url!r})"
        )
    conninfo = urlunsplit(
        ("postgresql", parts.netloc, parts.path, urlencode(rest), parts.fragment)
    )
    return PostgresSettings(conninfo, schema, pool_min, pool_max, pool_timeout)


def with_pool_size(url: str, pool_min: int | None, pool_max: int | None) -> str:
    """The URL with pool_min/pool_max set (None: as it was)."""
    parts = urlsplit(url)
    params = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if not (k == "pool_min" and pool_min is not None)
        and not (k == "pool_max" and pool_max is not None)
    ]
    if pool_min is not None:
        params.append(("pool_min", str(pool_min)))
    if pool_max is not None:
        params.append(("pool_max", str(pool_max)))
    return urlunsplit(parts._replace(query=urlencode(params)))


# --- the database's clock ---------------------------------------------------------------------


class DatabaseClock:
    """The database server's clock as seen from here: the local clock plus a measured offset.

    Operations take their instant from the database itself; this clock is for what the service
    reads outside an operation (server_time in responses, long-poll timers), so that it agrees
    with the database even when this machine's clock is off."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.uncertainty = math.inf  # half the round trip of the sample the offset came from

    def now(self) -> float:
        return time.time() + self.offset

    async def sync(self, conn: psycopg.AsyncConnection[Any], samples: int = 3) -> None:
        best: tuple[float, float] | None = None
        for _ in range(samples):
            before = time.time()
            cur = await conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
            row = await cur.fetchone()
            after = time.time()
            assert row is not None
            half = (after - before) / 2
            if best is None or half < best[1]:
                best = (row[0] - (before + half), half)
        assert best is not None
        self.offset, self.uncertainty = best


# --- rows -------------------------------------------------------------------------------------


class _Row(NamedTuple):
    key: int
    message_id: str
    body: bytes
    attributes: dict[str, str] | None
    channel: str
    enqueued_at: float
    expires_at: float
    visible_at: float
    leased: bool
    delivery_count: int
    receipt_seq: int
    last_error: str
    source_queue: str | None


def _size(row: _Row) -> int:
    return message_size(row.body, row.attributes or {})


@dataclass(frozen=True)
class _Queue:
    id: int
    name: str
    uid: int
    create_time: float
    config: QueueConfig
    # The in-flight ceiling's inputs (only read by receive).
    leases_counted: int = 0
    grants_at_count: int = 0
    granted: int = 0

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> _Queue:
        n = len(_CONFIG_FIELDS)
        config = QueueConfig(**dict(zip(_CONFIG_FIELDS, row[4 : 4 + n])))
        return cls(row[0], row[1], row[2], row[3], config)

    def info(self) -> QueueInfo:
        return QueueInfo(self.name, self.config, self.create_time)


def _encode_attributes(attributes: dict[str, str]) -> str | None:
    if not attributes:
        return None
    return json.dumps(attributes, separators=(",", ":"), ensure_ascii=False)


# --- one operation: a transaction ------------------------------------------------------------


class _Tx:
    """One operation's transaction: the connection, the receipt codec, and "now" once the first
    statement has read it."""

    def __init__(
        self, conn: psycopg.AsyncConnection[Any], codec: ReceiptCodec, clock_now: float | None
    ) -> None:
        self.conn = conn
        self.codec = codec
        self.clock_now = clock_now  # the injected clock's reading; None: the database's now()
        self.now = math.nan
        self.published: set[str] = set()  # queues whose waiters elsewhere should look again

    async def rows(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor(binary=True)
        await cur.execute(query, params)
        return await cur.fetchall()

    async def row(self, query: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        cur = self.conn.cursor(binary=True)
        await cur.execute(query, params)
        return await cur.fetchone()

    async def run(self, query: str, params: dict[str, Any]) -> int:
        cur = await self.conn.execute(query, params)
        return cur.rowcount

    def p(self, found: _Queue | None = None, **params: Any) -> dict[str, Any]:
        """Parameters with "now" (and the queue id) filled in."""
        params["now"] = self.now
        if found is not None:
            params["queue"] = found.id
        return params

    # -- queues ------------------------------------------------------------------------------

    async def clock(self) -> float:
        row = await self.row(f"SELECT {NOW_SQL}", {"now": self.clock_now})
        assert row is not None
        self.now = row[0]
        return self.now

    async def open(self, name: str, lock: str = "", ceiling: bool = False) -> _Queue | None:
        """The queue after its expiry sweep (base.py: before every operation); None if missing."""
        row = await self.row(open_queue_sql(lock, ceiling), {"now": self.clock_now, "name": name})
        if row is None:
            return None
        self.now = row[0]
        n = 1 + 4 + len(_CONFIG_FIELDS)
        found = _Queue.from_row(row[1:n])
        counted, grants_at_count, has_expired = row[n : n + 3]
        if ceiling:
            found = dataclasses.replace(
                found, leases_counted=counted, grants_at_count=grants_at_count, granted=row[n + 3]
            )
        if has_expired:
            await self.run(SWEEP_SQL, self.p(found))
        return found

    async def queue(self, name: str, lock: str = "", ceiling: bool = False) -> _Queue:
        found = await self.open(name, lock, ceiling)
        if found is None:
            raise QueueNotFound(name)
        return found

    async def find_queue(self, name: str, lock: str = "") -> _Queue | None:
        """A queue's row without the sweep (lock: e.g. FOR KEY SHARE)."""
        row = await self.row(
            f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name = %(name)b {lock}", {"name": name}
        )
        return None if row is None else _Queue.from_row(row)

    async def check_dead_letter_queue(self, name: str, config: QueueConfig) -> None:
        dlq = config.dead_letter_queue
        if not dlq:
            return
        if dlq == name:
            raise InvalidArgument(
                "config.dead_letter_queue", "a queue cannot be its own dead letter queue"
            )
        # FOR KEY SHARE: a concurrent DeleteQueue of the dead letter queue waits for this
        # transaction, then sees this queue using it.
        if await self.find_queue(dlq, "FOR KEY SHARE") is None:
            raise InvalidArgument("config.dead_letter_queue", f"queue {dlq!r} does not exist")

    # -- messages ----------------------------------------------------------------------------

    def delivered(self, found: _Queue, row: _Row) -> DeliveredMessage:
        return DeliveredMessage(
            key=row.key,
            message_id=row.message_id,
            receipt=self.codec.encode(found.uid, row.key, row.receipt_seq),
            body=row.body,
            attributes=dict(row.attributes or {}),
            channel=row.channel,
            enqueued_at=row.enqueued_at,
            expires_at=row.expires_at,
            visible_at=row.visible_at,
            delivery_count=row.delivery_count,
            last_error=row.last_error,
        )

    def peeked(self, row: _Row) -> PeekedMessage:
        return PeekedMessage(
            key=row.key,
            message_id=row.message_id,
            body=row.body,
            attributes=dict(row.attributes or {}),
            channel=row.channel,
            enqueued_at=row.enqueued_at,
            expires_at=row.expires_at,
            visible_at=row.visible_at,
            delivery_count=row.delivery_count,
            last_error=row.last_error,
            state=message_state(row.visible_at, row.leased, self.now),
            receipt_seq=row.receipt_seq,
            source_queue=row.source_queue,
        )

    async def leases(self, found: _Queue, keys: Iterable[int]) -> dict[int, Lease]:
        """Fencing state of those keys that are unexpired messages of this queue, locked."""
        keys = sorted(set(keys))
        if not keys:
            return {}
        rows = await self.rows(LEASES_BY_KEY_SQL, self.p(found, keys=keys))
        return {row[0]: Lease(*row) for row in rows}

    async def tombstones(self, found: _Queue, keys: Iterable[int]) -> dict[int, Tombstone]:
        keys = sorted(set(keys))
        if not keys:
            return {}
        rows = await self.rows(TOMBSTONES_BY_KEY_SQL, self.p(found, keys=keys))
        return {key: Tombstone(seq, deleted_at) for key, seq, deleted_at in rows}

    async def lookup(
        self, found: _Queue, decoded: list[tuple[int, int] | None]
    ) -> tuple[dict[int, Lease], dict[int, Tombstone]]:
        keys = {d[0] for d in decoded if d is not None}
        leases = await self.leases(found, keys)
        return leases, await self.tombstones(found, keys - leases.keys())

    def set_visibility(self, lease: Lease, timeout: float, reason: str = "") -> None:
        lease.visible_at = self.now + timeout
        if timeout <= 0:
            # A release: visible now, no longer leased, no longer part of its receive attempt.
            lease.leased = False
            lease.clear_attempt = True
        if reason:
            lease.last_error = reason

    async def write_leases(self, leases: Sequence[Lease]) -> None:
        if not leases:
            return
        await self.run(
            WRITE_LEASES_SQL,
            {
                "keys": [l.key for l in leases],
                "visibles": [l.visible_at for l in leases],
                "leased": [l.leased for l in leases],
                "errors": [l.last_error for l in leases],
                "clear": [l.clear_attempt for l in leases],
            },
        )


# --- the store --------------------------------------------------------------------------------

Listener = Callable[[str | None], None]


class PostgresStore:
    """The Store protocol over PostgreSQL (psycopg 3, an async connection pool).

    Also a change feed (`subscribe`): see the module docstring, Notifications.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        clock: Clock | None = None,
        pool_min: int = DEFAULT_POOL_MIN,
        pool_max: int = DEFAULT_POOL_MAX,
        pool_timeout: float = POOL_TIMEOUT,
    ) -> None:
        if not _SCHEMA_NAME.match(schema):
            raise ValueError(f"bad schema name {schema!r}")
        self.conninfo = conninfo
        self.schema = schema
        self.pool_min = pool_min
        self.pool_max = max(pool_max, pool_min, 1)
        self.pool_timeout = pool_timeout
        self._injected_clock = clock
        self._db_clock = DatabaseClock()
        self.clock: Clock = clock if clock is not None else self._db_clock
        self.channel = f"leaseq.{schema}"
        self._origin = secrets.token_hex(8)
        self._pool: AsyncConnectionPool | None = None
        self._codec: ReceiptCodec | None = None
        self._listeners: list[Listener] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[str] = set()
        self._pending_event = asyncio.Event()
        self._check_lock = asyncio.Lock()
        self._closing = False
        # Set while the LISTEN connection is up (tests wait for it).
        self.listening = asyncio.Event()

    @classmethod
    def from_url(cls, url: str, clock: Clock | None = None) -> PostgresStore:
        settings = parse_url(url)
        return cls(
            settings.conninfo,
            schema=settings.schema,
            clock=clock,
            pool_min=settings.pool_min,
            pool_max=settings.pool_max,
            pool_timeout=settings.pool_timeout,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def _connect_kwargs(self) -> dict[str, Any]:
        params = psycopg.conninfo.conninfo_to_dict(self.conninfo)
        options = params.get("options") or ""
        settings = {"search_path": self.schema, **PLANNER_SETTINGS}
        kwargs: dict[str, Any] = {
            "options": " ".join([options, *(f"-c {k}={v}" for k, v in settings.items())]).strip(),
        }
        if "application_name" not in params:
            kwargs["application_name"] = "leaseq"
        return kwargs

    async def open(self) -> None:
        if self._pool is not None:
            return
        self._closing = False
        kwargs = self._connect_kwargs()
        # One connection first: a server that is down or a database that does not exist is
        # reported at once, in one line, not as the pool's warnings until OPEN_TIMEOUT.
        await _check_connection(self.conninfo, kwargs)
        pool = AsyncConnectionPool(
            self.conninfo,
            kwargs=kwargs,
            min_size=self.pool_min,
            max_size=self.pool_max,
            timeout=self.pool_timeout,
            open=False,
            name=f"leaseq-{self.schema}",
        )
        try:
            await pool.open(wait=True, timeout=OPEN_TIMEOUT)
        except PoolTimeout as error:
            await pool.close()
            raise StoreOpenError(
                f"cannot connect to PostgreSQL ({_redacted(self.conninfo)}): {error}"
            ) from error
        try:
            async with pool.connection() as conn:
                key = await _migrate(conn, self.schema)
                await self._db_clock.sync(conn)
                await conn.commit()
        except psycopg.Error as error:
            await pool.close()
            raise StoreOpenError(
                f"cannot prepare the PostgreSQL schema {self.schema!r}: {_one_line(error)}"
            ) from error
        except BaseException:
            await pool.close()
            raise
        self._codec = ReceiptCodec(key)
        self._pool = pool
        # Made here, on the loop that runs the store.
        self._pending_event = asyncio.Event()
        self._check_lock = asyncio.Lock()
        self.listening = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._listen(kwargs), name="leaseq-pg-listen"),
            asyncio.create_task(self._publish_loop(), name="leaseq-pg-notify"),
            asyncio.create_task(self._maintain(), name="leaseq-pg-maintenance"),
            asyncio.create_task(self._watch_statistics(), name="leaseq-pg-statistics"),
        ]

    async def close(self) -> None:
        pool = self._pool
        if pool is None or self._closing:
            return
        self._closing = True  # new operations are refused; what is pending is still published
        notifier = [t for t in self._tasks if t.get_name() == "leaseq-pg-notify"]
        others = [t for t in self._tasks if t not in notifier]
        for task in others:
            task.cancel()
        self._pending_event.set()
        for task in others:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        for task in notifier:
            try:
                await asyncio.wait_for(task, 2.0)
            except (asyncio.TimeoutError, Exception):
                pass
        self._tasks = []
        self._pool = None
        await pool.close()

    def token_key(self) -> bytes:
        return self._codec.derive(b"leaseq page tokens")

    # -- the change feed ---------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call listener(queue) when another replica changed queue in a way that may let a
        waiting receiver make progress; listener(None) when changes may have been missed.
        Called on the event loop that opened the store. Returns the unsubscribe function."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _fire(self, queue: str | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(queue)
            except Exception:
                log.exception("a store change listener failed")

    def _publish(self, queues: Iterable[str]) -> None:
        queues = [q for q in queues if q]
        if queues and self._pool is not None:
            self._pending.update(queues)
            self._pending_event.set()

    async def _publish_loop(self) -> None:
        """NOTIFY the queues that changed, coalescing what piles up during one round trip."""
        while True:
            await self._pending_event.wait()
            self._pending_event.clear()
            queues, self._pending = sorted(self._pending), set()
            if queues:
                await self._notify(queues)
            if self._closing and not self._pending:
                return

    async def _notify(self, queues: list[str]) -> None:
        pool = self._pool
        if pool is None:
            return
        payloads = [f"{self._origin} {q}" for q in queues]
        for attempt in range(2):  # a second time on a checked pool (e.g. after a restart)
            try:
                async with pool.connection() as conn:
                    # Only a wake-up hint: no need to wait for the WAL flush.
                    await conn.execute(
                        "SELECT set_config('synchronous_commit', 'off', true),"
                        " (SELECT count(pg_notify(%s, p)) FROM unnest(%s::text[]) AS p)",
                        (self.channel, payloads),
                    )
                    await conn.commit()
                return
            except (psycopg.OperationalError, psycopg.InterfaceError) as error:
                if attempt == 0 and not isinstance(error, PoolTimeout):
                    await self._check_pool()
                    continue
                # Lost: the other replicas' safety wake-up (FALLBACK_WAKE_SECONDS) covers it.
                log.warning("could not notify other replicas: %s", error)
            except Exception as error:
                log.warning("could not notify other replicas: %s", error)
                return

    async def _listen(self, kwargs: dict[str, Any]) -> None:
        backoff = 0.05
        while not self._closing:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True, **kwargs
                )
            except Exception as error:
                log.warning("LISTEN connection failed (retrying in %.1fs): %s", backoff, error)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, LISTEN_BACKOFF_MAX)
                continue
            try:
                async with conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    self.listening.set()
                    backoff = 0.05
                    # Anything may have happened while nobody listened.
                    self._fire(None)
                    while True:
                        async for notify in conn.notifies(timeout=FALLBACK_WAKE_SECONDS):
                            origin, _, queue = notify.payload.partition(" ")
                            if origin != self._origin:
                                self._fire(queue)
                        self._fire(None)  # the slow safety net (see the module docstring)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("LISTEN connection lost: %s", error)
            finally:
                self.listening.clear()
            if not self._closing:
                self._fire(None)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, LISTEN_BACKOFF_MAX)

    async def _maintain(self) -> None:
        """Housekeeping (stale tombstones, dedup and attempt records; one replica at a time)
        and the clock offset, every minute."""
        while True:
            await asyncio.sleep(min(HOUSEKEEPING_SECONDS, CLOCK_SYNC_SECONDS))
            try:
                await self.housekeep()
                pool = self._pool
                if pool is not None and self._injected_clock is None:
                    async with pool.connection() as conn:
                        await self._db_clock.sync(conn)
                        await conn.commit()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("PostgreSQL housekeeping failed: %s", error)

    async def _watch_statistics(self) -> None:
        while True:
            await asyncio.sleep(STATS_CHECK_SECONDS)
            try:
                await self.refresh_statistics()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("PostgreSQL statistics check failed: %s", error)

    async def refresh_statistics(self) -> bool:
        """ANALYZE messages when pg_class counts under a tenth of its live rows (at least
        STALE_STATS_ROWS): a VACUUM of a nearly empty table records "0 rows", and without
        autovacuum nothing corrects it. The planner scales every estimate by that count, so the
        statements written to need no statistics (the receive) are safe anyway, but the others
        (acks by key, ...) get their plans from it. One replica at a time; returns whether it
        ran."""

        async def op(tx: _Tx) -> bool:
            row = await tx.row(
                "SELECT c.reltuples, s.n_live_tup FROM pg_class c"
                " JOIN pg_stat_user_tables s ON s.relid = c.oid"
                " WHERE c.oid = 'messages'::regclass",
                {},
            )
            if row is None:
                return False
            estimated, live = row
            if estimated < 0 or live < STALE_STATS_ROWS or estimated * 10 >= live:
                return False  # never analyzed (the planner sizes it by its pages), or close
            got = await tx.row(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(%(lock)b, 0))",
                {"lock": f"leaseq:analyze:{self.schema}"},
            )
            if not got or not got[0]:
                return False
            await tx.conn.execute("ANALYZE messages", prepare=False)
            return True

        return await self._run(op)

    async def housekeep(self) -> int:
        """Delete stale tombstone, dedup and attempt rows (their meaning is bounded by a time
        checked on every read, so when this runs is invisible). Returns the rows deleted."""

        async def op(tx: _Tx) -> int:
            got = await tx.row(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(%(lock)b, 0))",
                {"lock": f"leaseq:housekeeping:{self.schema}"},
            )
            if not got or not got[0]:
                return 0  # another replica is at it
            now = await tx.clock()
            total = 0
            for table, condition, cutoff in (
                ("tombstones", "deleted_at < %(cutoff)b", now - TOMBSTONE_SECONDS),
                ("dedup", "until <= %(cutoff)b", now),
                ("attempts", "until <= %(cutoff)b", now),
            ):
                total += await tx.run(
                    f"DELETE FROM {table} WHERE ctid IN (SELECT ctid FROM {table}"
                    f" WHERE {condition} LIMIT {HOUSEKEEPING_ROWS})",
                    {"cutoff": cutoff},
                )
            return total

        total = 0
        while True:
            deleted = await self._run(op)
            total += deleted
            if deleted < HOUSEKEEPING_ROWS:
                return total

    # -- running operations ------------------------------------------------------------------

    async def _run(self, fn: Callable[[_Tx], Awaitable[T]]) -> T:
        """Run fn in one transaction; publish what it asked to after COMMIT. Connection trouble
        becomes Unavailable, after retries where they are safe (see the module docstring)."""
        failure: BaseException | None = None
        for attempt in range(RETRIES + 1):
            pool, codec = self._pool, self._codec
            if pool is None or codec is None or self._closing:
                raise Unavailable("the PostgreSQL store is not open")
            clock_now = None if self._injected_clock is None else self._injected_clock.now()
            committing = False
            try:
                async with pool.connection() as conn:
                    async with conn.transaction():
                        tx = _Tx(conn, codec, clock_now)
                        result = await fn(tx)
                        committing = True
                self._publish(tx.published)
                return result
            except LeaseqError:
                raise
            except (DeadlockDetected, SerializationFailure) as error:
                failure = error  # rolled back by the server: safe to run again
                continue
            except (PoolTimeout, PoolClosed) as error:
                raise _unavailable(error) from error
            except (psycopg.OperationalError, psycopg.InterfaceError) as error:
                failure = error
                if committing:
                    raise _unavailable(error) from error  # it may have committed: no retry
                await self._check_pool()
                continue
        assert failure is not None
        raise _unavailable(failure) from failure

    async def _check_pool(self) -> None:
        """After a connection failed: drop the pool's dead connections (once, for everyone who
        noticed at the same time)."""
        pool = self._pool
        if pool is None:
            return
        if self._check_lock.locked():
            async with self._check_lock:
                return
        async with self._check_lock:
            try:
                await pool.check()
            except Exception as error:  # pragma: no cover - check() logs and replaces
                log.debug("pool check failed: %s", error)

    # -- queues ------------------------------------------------------------------------------

    async def create_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        async def op(tx: _Tx) -> QueueInfo:
            now = await tx.clock()
            existing = await tx.find_queue(name)
            if existing is not None:
                if existing.config == config:
                    return existing.info()
                raise QueueAlreadyExists(name)
            await tx.check_dead_letter_queue(name, config)
            columns = ", ".join(("name", "uid", "create_time", *_CONFIG_FIELDS))
            marks = ", ".join(["%s"] * (3 + len(_CONFIG_FIELDS)))
            cur = await tx.conn.execute(
                f"INSERT INTO queues ({columns}) VALUES ({marks})"
                " ON CONFLICT (name) DO NOTHING RETURNING id",
                (name, new_queue_uid(), now, *dataclasses.astuple(config)),
            )
            if await cur.fetchone() is None:
                # Another replica created it meanwhile (its INSERT committed first).
                raced = await tx.find_queue(name)
                if raced is not None and raced.config == config:
                    return raced.info()
                raise QueueAlreadyExists(name)
            return QueueInfo(name, config, now)

        return await self._run(op)

    async def get_queue(self, name: str) -> QueueInfo:
        async def op(tx: _Tx) -> QueueInfo:
            found = await tx.find_queue(name)
            if found is None:
                raise QueueNotFound(name)
            return found.info()

        return await self._run(op)

    async def list_queues(self, prefix: str, after: str | None, limit: int) -> list[QueueInfo]:
        async def op(tx: _Tx) -> list[QueueInfo]:
            rows = await tx.rows(
                f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name >= %(prefix)b"
                " AND starts_with(name, %(prefix)b) AND name > %(after)b"
                " ORDER BY name LIMIT %(limit)b",
                {"prefix": prefix, "after": after or "", "limit": max(limit, 0)},
            )
            return [_Queue.from_row(row).info() for row in rows]

        return await self._run(op)

    async def update_queue(self, name: str, config: QueueConfig) -> QueueInfo:
        async def op(tx: _Tx) -> QueueInfo:
            found = await tx.queue(name)
            await tx.check_dead_letter_queue(name, config)
            assignments = ", ".join(f"{field} = %s" for field in _CONFIG_FIELDS)
            await tx.conn.execute(
                f"UPDATE queues SET {assignments} WHERE id = %s",
                (*dataclasses.astuple(config), found.id),
            )
            tx.published.add(name)
            return QueueInfo(name, config, found.create_time)

        return await self._run(op)

    async def delete_queue(self, name: str) -> None:
        async def op(tx: _Tx) -> None:
            # Deleting the row first waits for the senders holding it (FOR KEY SHARE); then the
            # statements below see what they wrote.
            cur = await tx.conn.execute(
                "DELETE FROM queues WHERE name = %s RETURNING id", (name,)
            )
            row = await cur.fetchone()
            if row is None:
                raise QueueNotFound(name)
            queue_id = row[0]
            cur = await tx.conn.execute(
                "SELECT name FROM queues WHERE dead_letter_queue = %s ORDER BY name LIMIT 1",
                (name,),
            )
            user = await cur.fetchone()
            if user is not None:
                raise QueueInUse(name, user[0])  # rolls the delete back
            for table in ("messages", "queue_counters", "dedup", "attempts"):
                await tx.conn.execute(f"DELETE FROM {table} WHERE queue = %s", (queue_id,))
            tx.published.add(name)

        await self._run(op)

    async def purge_queue(self, name: str) -> int:
        async def op(tx: _Tx) -> int:
            found = await tx.queue(name)
            row = await tx.row(PURGE_SQL, tx.p(found))
            assert row is not None
            tx.published.add(name)
            return row[0]

        return await self._run(op)

    async def stats(self, name: str) -> QueueStats:
        async def op(tx: _Tx) -> QueueStats:
            found = await tx.queue(name)
            rows = await tx.rows(
                "SELECT channel, count(*) FILTER (WHERE visible_at <= %(now)b),"
                " count(*) FILTER (WHERE visible_at > %(now)b AND leased),"
                " count(*) FILTER (WHERE visible_at > %(now)b AND NOT leased),"
                " min(enqueued_at) FILTER (WHERE visible_at <= %(now)b)"
                f" FROM messages WHERE queue = %(queue)b AND {UNEXPIRED}"
                " GROUP BY channel",
                tx.p(found),
            )
            totals = await tx.row(
                "SELECT COALESCE(sum(dead_lettered), 0)::bigint,"
                " COALESCE(sum(expired), 0)::bigint, COALESCE(sum(deleted), 0)::bigint,"
                " (SELECT count(*) FROM messages"
                "  WHERE queue = %(queue)b AND expires_at <= %(now)b)"
                " FROM queue_counters WHERE queue = %(queue)b",
                tx.p(found),
            )
            assert totals is not None
            dead_lettered, expired, deleted, unswept = totals
            channels = {ch: CountsByState(v, l, d) for ch, v, l, d, _ in rows}
            oldest = min((enq for *_, enq in rows if enq is not None), default=None)
            return QueueStats.from_channels(
                channels,
                oldest,
                tx.now,
                dead_lettered_total=dead_lettered,
                expired_total=expired + unswept,  # past SWEEP_LIMIT: expired, not yet removed
                deleted_total=deleted,
            )

        return await self._run(op)

    # -- send --------------------------------------------------------------------------------

    async def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        async def op(tx: _Tx) -> list[SendOutcome]:
            # FOR KEY SHARE: a concurrent DeleteQueue waits for this send, then deletes it too.
            found = await tx.queue(name, lock="FOR KEY SHARE")
            config, now = found.config, tx.now
            # A repeat later in this batch is a duplicate of the first (whatever the window).
            first: dict[str, str] = {}  # dedup_id -> message_id of its first entry
            ids: list[str] = []
            for m in messages:
                if m.dedup_id and m.dedup_id in first:
                    ids.append(first[m.dedup_id])
                    continue
                message_id = os.urandom(16).hex()
                ids.append(message_id)
                if m.dedup_id:
                    first[m.dedup_id] = message_id
            known = await self._claim_dedup(tx, found, first) if first else {}
            outcomes: list[SendOutcome] = []
            rows: dict[str, list[Any]] = {
                "message_ids": [], "bodies": [], "attributes": [], "channels": [],
                "expires": [], "visibles": [],
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
                delay = config.default_delay if m.delay is None else m.delay
                ttl = config.message_retention if m.ttl is None else m.ttl
                rows["message_ids"].append(message_id)
                rows["bodies"].append(m.body)
                rows["attributes"].append(_encode_attributes(m.attributes))
                rows["channels"].append(m.channel)
                rows["expires"].append(now + ttl)
                rows["visibles"].append(now + delay)
                outcomes.append(SendOutcome(message_id))
            if rows["message_ids"]:
                await tx.run(INSERT_MESSAGES_SQL, tx.p(found, **rows))
                tx.published.add(name)
            return outcomes

        return await self._run(op)

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
                tx.p(found, ids=dedup_ids, mids=[first[i] for i in dedup_ids],
                     until=tx.now + window),
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

    # -- receive -----------------------------------------------------------------------------

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: float | None = None,
        channel_filter: str = "",
        attempt_id: str = "",
        max_bytes: int | None = None,
    ) -> ReceiveOutcome:
        cut = False  # the byte limit ended the pick: candidates were locked and let go

        async def op(tx: _Tx) -> ReceiveOutcome:
            nonlocal cut
            found = await tx.queue(name, ceiling=True)
            timeout = (
                found.config.visibility_timeout
                if visibility_timeout is None
                else visibility_timeout
            )
            if attempt_id:
                # Two receives with one attempt id take turns (the second one replays).
                await tx.run(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%(lock)b, 0))",
                    {"lock": f"leaseq:attempt:{self.schema}:{found.id}:{attempt_id}"},
                )
                replay = await self._replay_attempt(tx, found, attempt_id)
                if replay is not None:
                    return await self._outcome(tx, found, replay)
            limit = await self._delivery_limit(tx, found, max_messages, timeout)
            dlq = await self._dead_letter_target(tx, found)
            if dlq is None:
                rows = await self._deliver(
                    tx, found, limit, timeout, channel_filter, attempt_id, max_bytes
                )
            else:
                rows = await self._pick_and_deliver(
                    tx, found, dlq, limit, timeout, channel_filter, attempt_id, max_bytes
                )
            cut = len(rows) < limit and bytes_reached(
                sum(_size(row) for row in rows), max_bytes
            )
            if attempt_id and rows:
                await tx.run(
                    "INSERT INTO attempts AS a (queue, attempt_id, until)"
                    " VALUES (%(queue)b, %(attempt)b, %(until)b)"
                    " ON CONFLICT (queue, attempt_id) DO UPDATE SET until = EXCLUDED.until",
                    tx.p(found, attempt=attempt_id, until=tx.now + timeout),
                )
            return await self._outcome(tx, found, [tx.delivered(found, row) for row in rows])

        try:
            outcome = await self._run(op)
        except LeaseqError as error:
            if isinstance(error, Unavailable):
                self._wake_after_rollback(name)
            raise
        except BaseException:  # cancelled
            self._wake_after_rollback(name)
            raise
        if cut:
            # Receivers that skipped the candidates past the cut may have gone to sleep on them.
            self._wake_after_rollback(name)
        return outcome

    def _wake_after_rollback(self, queue: str) -> None:
        """A receive rolled back: receivers that skipped the messages it had locked may have gone
        to sleep on them. They look again, here and on the other replicas."""
        self._fire(queue)
        self._publish([queue])

    async def _replay_attempt(
        self, tx: _Tx, found: _Queue, attempt_id: str
    ) -> list[DeliveredMessage] | None:
        """base.py's attempt cases a (the live leases again) and b (nothing); None for c."""
        rows = await tx.rows(ATTEMPT_LEASES_SQL, tx.p(found, attempt=attempt_id))
        if rows:
            rows.sort(key=lambda row: row[0])  # key order
            return [tx.delivered(found, _Row(*row)) for row in rows]
        record = await tx.row(
            "SELECT 1 FROM attempts WHERE queue = %(queue)b AND attempt_id = %(attempt)b"
            " AND until > %(now)b",
            tx.p(found, attempt=attempt_id),
        )
        return [] if record is not None else None

    async def _delivery_limit(
        self, tx: _Tx, found: _Queue, max_messages: int, timeout: float
    ) -> int:
        """How many messages this receive may lease (see the module docstring, in-flight)."""
        if timeout <= 0:
            return max_messages  # no lease, no limit
        limit = found.config.max_in_flight
        ceiling = found.leases_counted + (found.granted - found.grants_at_count)
        if ceiling + max_messages <= limit:
            return max_messages
        # Near the limit: count exactly, one receiver of this queue at a time.
        await tx.run(
            "SELECT pg_advisory_xact_lock(hashtextextended(%(lock)b, 0))",
            {"lock": f"leaseq:in-flight:{self.schema}:{found.id}"},
        )
        row = await tx.row(IN_FLIGHT_SQL, tx.p(found))
        assert row is not None
        count, earliest_end, granted = row
        await tx.run(
            "UPDATE queues SET leases_counted = %(count)b, grants_at_count = %(granted)b"
            " WHERE id = %(queue)b",
            tx.p(found, count=count, granted=granted),
        )
        if count >= limit:
            raise OverLimit(found.name, limit, retry_at=earliest_end)
        return min(max_messages, limit - count)

    async def _dead_letter_target(self, tx: _Tx, found: _Queue) -> _Queue | None:
        config = found.config
        if not config.dead_letter_queue or config.max_delivery_count is None:
            return None
        return await tx.find_queue(config.dead_letter_queue, "FOR KEY SHARE")

    async def _deliver(
        self,
        tx: _Tx,
        found: _Queue,
        limit: int,
        timeout: float,
        channel_filter: str,
        attempt_id: str,
        max_bytes: int | None,
    ) -> list[_Row]:
        if limit <= 0:
            return []
        rows = await tx.rows(
            deliver_sql(_channel_clause(channel_filter), sized=max_bytes is not None),
            tx.p(
                found,
                limit=limit,
                channel=_channel_param(channel_filter),
                until=tx.now + timeout,
                leased=timeout > 0,
                attempt=attempt_id or None,
                max_bytes=max_bytes,
            ),
        )
        rows.sort(key=lambda row: row[0])  # delivery order: the pick order
        return [_Row(*row[1:]) for row in rows]

    async def _pick_and_deliver(
        self,
        tx: _Tx,
        found: _Queue,
        dlq: _Queue,
        limit: int,
        timeout: float,
        channel_filter: str,
        attempt_id: str,
        max_bytes: int | None,
    ) -> list[_Row]:
        """Like _deliver, for a queue with a dead letter queue: candidates that reached
        max_delivery_count move there instead and do not count towards the limit (nor towards
        max_bytes)."""
        max_count = found.config.max_delivery_count
        assert max_count is not None
        clause = _channel_clause(channel_filter)
        deliver: list[int] = []
        dead: list[int] = []
        taken = 0
        cursor: tuple[float, int] | None = None
        while len(deliver) < limit and not bytes_reached(taken, max_bytes):
            want = limit - len(deliver)
            page = max(want, PICK_READ_AHEAD)
            rows = await tx.rows(
                candidates_sql(clause, after=cursor is not None,
                               columns=f"key, visible_at, delivery_count, {SIZE_SQL}"),
                tx.p(
                    found,
                    limit=page,
                    channel=_channel_param(channel_filter),
                    after_visible_at=cursor[0] if cursor else None,
                    after_key=cursor[1] if cursor else None,
                ),
            )
            for key, visible_at, delivery_count, size in rows:
                if len(deliver) == limit or bytes_reached(taken, max_bytes):
                    break
                if delivery_count >= max_count:
                    dead.append(key)
                else:
                    deliver.append(key)
                    taken += size
                cursor = (visible_at, key)
            if len(rows) < page:
                break
        if dead:
            await tx.run(
                "UPDATE messages SET queue = %(dlq)b, visible_at = %(now)b, leased = false,"
                " expires_at = enqueued_at + %(retention)b, receipt_seq = receipt_seq + 1,"
                " source_queue = %(source)b, attempt_id = NULL WHERE key = ANY(%(keys)b::bigint[])",
                tx.p(found, dlq=dlq.id, retention=dlq.config.message_retention,
                     source=found.name, keys=dead),
            )
            await tx.run(
                "INSERT INTO queue_counters AS c (queue, slot, dead_lettered)"
                f" VALUES (%(queue)b, {SLOT_SQL}, %(n)b) ON CONFLICT (queue, slot)"
                " DO UPDATE SET dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered",
                tx.p(found, n=len(dead)),
            )
            tx.published.add(dlq.name)
        if not deliver:
            return []
        rows = await tx.rows(
            DELIVER_KEYS_SQL,
            tx.p(found, keys=deliver, until=tx.now + timeout, leased=timeout > 0,
                 attempt=attempt_id or None),
        )
        order = {key: i for i, key in enumerate(deliver)}
        return sorted((_Row(*row) for row in rows), key=lambda row: order[row.key])

    async def _outcome(
        self, tx: _Tx, found: _Queue, messages: list[DeliveredMessage]
    ) -> ReceiveOutcome:
        if messages:
            return ReceiveOutcome(messages)
        row = await tx.row(NEXT_VISIBLE_SQL, tx.p(found))
        return ReceiveOutcome([], next_visible_at=None if row is None else row[0])

    # -- peek --------------------------------------------------------------------------------

    async def peek(
        self,
        name: str,
        max_messages: int,
        channel_filter: str = "",
        include_leased: bool = False,
        include_delayed: bool = False,
        after: PeekCursor | None = None,
        max_bytes: int | None = None,
    ) -> PeekPage:
        async def op(tx: _Tx) -> PeekPage:
            found = await tx.queue(name)
            params = tx.p(
                found,
                limit=max(max_messages, 0) + 1,
                channel=_channel_param(channel_filter),
                after_visible_at=after[0] if after else None,
                after_key=after[1] if after else None,
            )
            clause = _channel_clause(channel_filter)
            if max_bytes is None:
                sql = peek_sql(include_leased, include_delayed, clause, after=after is not None)
                rows = [_Row(*row) for row in await tx.rows(sql, params)]
                page = rows[: max(max_messages, 0)]
                return PeekPage(
                    messages=[tx.peeked(row) for row in page],
                    next_cursor=(page[-1].visible_at, page[-1].key)
                    if len(rows) > max_messages and page
                    else None,
                )
            # Sizes first, then only the page's rows whole: a page cut by bytes reads no body
            # past its last message.
            sized = await tx.rows(
                peek_sql(
                    include_leased, include_delayed, clause, after=after is not None,
                    columns=SIZED_COLUMNS,
                ),
                params,
            )
            chosen: list[tuple[int, float]] = []
            taken = 0
            for key, visible_at, size in sized[: max(max_messages, 0)]:
                if bytes_reached(taken, max_bytes):
                    break
                chosen.append((key, visible_at))
                taken += size
            more = len(sized) > len(chosen)
            rows = await tx.rows(PEEK_KEYS_SQL, {"keys": [key for key, _ in chosen]})
            # A message that changed between the two statements shows its state now; one deleted
            # in between is left out. The cursor follows the sizes' order, so paging goes on.
            return PeekPage(
                messages=[tx.peeked(_Row(*row)) for row in rows],
                next_cursor=(chosen[-1][1], chosen[-1][0]) if more and chosen else None,
            )

        return await self._run(op)

    # -- change visibility ---------------------------------------------------------------------

    async def receipt_of(self, name: str, key: int, receipt_seq: int) -> str:
        async def op(tx: _Tx) -> str:
            found = await tx.find_queue(name)
            if found is None:
                raise QueueNotFound(name)
            return tx.codec.encode(found.uid, key, receipt_seq)

        return await self._run(op)

    async def change_visibility(
        self, name: str, changes: list[VisibilityChange]
    ) -> list[LeaseResult]:
        async def op(tx: _Tx) -> list[LeaseResult]:
            found = await tx.queue(name)
            decoded = [tx.codec.decode(c.receipt, found.uid) for c in changes]
            leases, tombstones = await tx.lookup(found, decoded)
            changed: dict[int, Lease] = {}
            results = []
            for change, receipt in zip(changes, decoded):
                if receipt is None:
                    results.append(LeaseResult(change.receipt, LeaseStatus.INVALID_RECEIPT))
                    continue
                key, seq = receipt
                lease = leases.get(key)
                status = held_lease_status(lease, tombstones.get(key), seq, tx.now)
                if status is not None:
                    results.append(lease_result(change.receipt, status, key))
                    continue
                assert lease is not None
                tx.set_visibility(lease, change.visibility_timeout, change.reason)
                changed[key] = lease
                results.append(LeaseResult(change.receipt, LeaseStatus.OK, lease.visible_at, key))
            await tx.write_leases(list(changed.values()))
            if changed:
                # A release, or a lease that now ends sooner: waiters elsewhere look again.
                tx.published.add(name)
            return results

        return await self._run(op)

    # -- delete ------------------------------------------------------------------------------

    async def delete(
        self, name: str, receipts: list[str], attempt_ids: Sequence[str] = ()
    ) -> DeleteOutcome:
        async def op(tx: _Tx) -> DeleteOutcome:
            found = await tx.queue(name)
            decoded = [tx.codec.decode(r, found.uid) for r in receipts]
            leases, tombstones = await tx.lookup(found, decoded)
            results: list[LeaseResult] = []
            deleted: list[int] = []
            for text, receipt in zip(receipts, decoded):
                if receipt is None:
                    results.append(LeaseResult(text, LeaseStatus.INVALID_RECEIPT))
                    continue
                key, seq = receipt
                status = fence_lease(leases.get(key), tombstones.get(key), seq, tx.now)
                if status is None:
                    # Later entries of this request see the message as deleted, like a retry.
                    del leases[key]
                    tombstones[key] = Tombstone(seq, tx.now)
                    deleted.append(key)
                results.append(lease_result(text, status or LeaseStatus.OK, key))
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
            return DeleteOutcome(results, attempt_counts, deleted)

        return await self._run(op)

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
            leases, tombstones = await tx.lookup(found, [decoded])
            lease = leases.get(key)
            status = held_lease_status(lease, tombstones.get(key), seq, tx.now)
            if status is not None:
                raise LeaseRejected(status)
            assert lease is not None
            row = await tx.row(
                "SELECT body, attributes FROM messages WHERE key = %(key)b", {"key": key}
            )
            assert row is not None
            new_body = row[0] if body is None else body
            new_attributes = dict(row[1] or {}) if attributes is None else dict(attributes)
            size = message_size(new_body, new_attributes)
            if size > found.config.max_message_bytes:
                raise InvalidArgument(
                    "body",
                    f"body and attributes are {size} bytes, over the queue's max_message_bytes"
                    f" ({found.config.max_message_bytes})",
                )
            if visibility_timeout is not None:
                tx.set_visibility(lease, visibility_timeout)
                tx.published.add(name)
            await tx.run(
                "UPDATE messages SET body = %(body)b, attributes = %(attributes)b::jsonb,"
                " visible_at = %(visible_at)b, leased = %(leased)b,"
                " receipt_seq = receipt_seq + 1,"
                " attempt_id = CASE WHEN %(clear)b THEN NULL ELSE attempt_id END"
                " WHERE key = %(key)b",
                {
                    "body": new_body,
                    "attributes": _encode_attributes(new_attributes),
                    "visible_at": lease.visible_at,
                    "leased": lease.leased,
                    "clear": lease.clear_attempt,
                    "key": key,
                },
            )
            return UpdatedMessage(key, tx.codec.encode(found.uid, key, seq + 1), lease.visible_at)

        return await self._run(op)

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
                    candidates_sql(clause, after=cursor is not None,
                                   columns="key, visible_at, source_queue"),
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
            if moves:
                await tx.run(
                    "UPDATE messages m SET queue = v.queue, delivery_count = 0,"
                    " visible_at = %(now)b, leased = false, source_queue = NULL,"
                    " receipt_seq = m.receipt_seq + 1, expires_at = v.expires_at,"
                    " attempt_id = NULL"
                    " FROM unnest(%(keys)b::bigint[], %(queues)b::bigint[], %(expires)b::float8[])"
                    " AS v(key, queue, expires_at) WHERE m.key = v.key",
                    tx.p(
                        keys=[key for _, key in moves],
                        queues=[to.id for to, _ in moves],
                        expires=[tx.now + to.config.message_retention for to, _ in moves],
                    ),
                )
                tx.published.update(to.name for to, _ in moves)
            return len(moves)

        return await self._run(op)


# --- schema -----------------------------------------------------------------------------------


def _lock_key(schema: str) -> str:
    return f"leaseq:migrate:{schema}"


async def _migrate(conn: psycopg.AsyncConnection[Any], schema: str) -> bytes:
    """Create the schema or bring it to SCHEMA_VERSION, under an advisory lock (replicas that
    start together take turns); return the receipt signing key. One transaction: a failed
    migration leaves nothing behind."""
    quoted = sql.Identifier(schema).as_string(conn)
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_lock_key(schema),)
        )
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quoted}.meta"
            " (name text PRIMARY KEY, value bytea NOT NULL)"
        )
        cur = await conn.execute(
            f"SELECT value FROM {quoted}.meta WHERE name = 'schema_version'"
        )
        row = await cur.fetchone()
        version = 0 if row is None else int(bytes(row[0]).decode())
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"the PostgreSQL schema {schema!r} has version {version};"
                f" this leaseq knows versions up to {SCHEMA_VERSION}"
            )
        for number, statements in MIGRATIONS:
            if number <= version:
                continue
            log.info("migrating PostgreSQL schema %s to version %d", schema, number)
            for statement in statements:
                await conn.execute(statement.replace("{schema}", quoted))
        if version != SCHEMA_VERSION:
            await conn.execute(
                f"INSERT INTO {quoted}.meta (name, value) VALUES ('schema_version', %s)"
                " ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                (str(SCHEMA_VERSION).encode(),),
            )
        cur = await conn.execute(
            f"INSERT INTO {quoted}.meta (name, value) VALUES ('receipt_signing_key', %s)"
            " ON CONFLICT (name) DO NOTHING",
            (new_signing_key(),),
        )
        cur = await conn.execute(
            f"SELECT value FROM {quoted}.meta WHERE name = 'receipt_signing_key'"
        )
        row = await cur.fetchone()
        assert row is not None
        return bytes(row[0])


async def _check_connection(conninfo: str, kwargs: dict[str, Any]) -> None:
    """Connect once (bounded by OPEN_TIMEOUT unless the URL sets connect_timeout); StoreOpenError
    with libpq's reason when that fails."""
    if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(conninfo):
        kwargs = {**kwargs, "connect_timeout": int(OPEN_TIMEOUT)}
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
    except psycopg.Error as error:
        raise StoreOpenError(
            f"cannot connect to PostgreSQL ({_redacted(conninfo)}): {_one_line(error)}"
        ) from None
    await conn.close()


def _one_line(error: BaseException) -> str:
    """psycopg's message on one line: libpq writes a line per address tried, plus hints."""
    text = str(error).removeprefix("connection failed: ")
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return "; ".join(line for line in lines if line) or type(error).__name__


def _redacted(conninfo: str) -> str:
    """The connection string without its password (for messages and logs)."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<unparsable connection string>"
    params.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in params.items())


def _unavailable(error: BaseException) -> Unavailable:
    failure = Unavailable(f"PostgreSQL store unavailable: {type(error).__name__}: {error}".strip())
    failure.__cause__ = error
    return failure
