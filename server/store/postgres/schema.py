"""The PostgreSQL schema: versioned migrations, applied under an advisory lock (see the package
docstring, Schema and migrations)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from ...receipts import new_signing_key
from .settings import AUTOVACUUM_THRESHOLD
from .statements import SLOT_SQL

log = logging.getLogger(__name__)

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

# channel_counters (version 4) kept by triggers on messages, whoever writes them (see version 4).
# Each adds to the writing connection's slot (SLOT_SQL, as queue_counters), one aggregated
# upsert per statement, its rows in (queue, channel) order so that statements lock counter rows
# in one order (two connections share a slot only when their pids do mod COUNTER_SLOTS; a
# deadlock between them is retried like any other).


def _upsert_counts(select: str) -> str:
    return (
        "INSERT INTO {schema}.channel_counters AS cc (queue, channel, slot, total)"
        f" {select} ON CONFLICT (queue, channel, slot)"
        " DO UPDATE SET total = cc.total + EXCLUDED.total;"
    )


def _trigger_function(name: str, body: str) -> str:
    return (
        f"CREATE FUNCTION {{schema}}.{name}() RETURNS trigger LANGUAGE plpgsql AS $$"
        f" BEGIN {body} RETURN NULL; END $$"
    )


_CHANNEL_TRIGGERS = [
    # Sends: statement-level, the statement's rows in a transition table (one upsert per
    # statement, not per row).
    _trigger_function(
        "channel_counts_insert",
        _upsert_counts(
            f"SELECT queue, channel, {SLOT_SQL}, count(*) FROM new_rows"
            " GROUP BY queue, channel ORDER BY queue, channel"
        ),
    ),
    "CREATE TRIGGER channel_counts_insert AFTER INSERT ON {schema}.messages"
    " REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT"
    " EXECUTE FUNCTION {schema}.channel_counts_insert()",
    # Acks, deletes by attempt, sweeps, purges, DeleteQueue: the same for the deleted rows.
    _trigger_function(
        "channel_counts_delete",
        _upsert_counts(
            f"SELECT queue, channel, {SLOT_SQL}, -count(*) FROM old_rows"
            " GROUP BY queue, channel ORDER BY queue, channel"
        ),
    ),
    "CREATE TRIGGER channel_counts_delete AFTER DELETE ON {schema}.messages"
    " REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT"
    " EXECUTE FUNCTION {schema}.channel_counts_delete()",
    # Moves to another queue (dead-letter moves, redrives): only an UPDATE that sets queue or
    # channel fires these (no delivery or lease change does). PostgreSQL allows no transition
    # tables with a column list (UPDATE OF), and without one every delivery would copy its rows
    # into them; so a row-level trigger notes each row it really moves in channel_moves (plain
    # inserts: upserting the counter row per moved row updated one row again and again in one
    # transaction, and each upsert walked all its versions: a cost per row that grew with the
    # statement's rows, docs/performance.md), and a
    # statement-level one takes them out again and adds them up in one upsert.
    _trigger_function(
        "channel_counts_note_move",
        "INSERT INTO {schema}.channel_moves (queue, channel, n)"
        " VALUES (OLD.queue, OLD.channel, -1), (NEW.queue, NEW.channel, 1);",
    ),
    "CREATE TRIGGER channel_counts_note_move AFTER UPDATE OF queue, channel"
    " ON {schema}.messages FOR EACH ROW"
    " WHEN (OLD.queue IS DISTINCT FROM NEW.queue OR OLD.channel IS DISTINCT FROM NEW.channel)"
    " EXECUTE FUNCTION {schema}.channel_counts_note_move()",
    _trigger_function(
        "channel_counts_move",
        "WITH moved AS (DELETE FROM {schema}.channel_moves RETURNING queue, channel, n) "
        + _upsert_counts(
            f"SELECT queue, channel, {SLOT_SQL}, sum(n) FROM moved"
            " GROUP BY queue, channel HAVING sum(n) <> 0 ORDER BY queue, channel"
        ),
    ),
    "CREATE TRIGGER channel_counts_move AFTER UPDATE OF queue, channel ON {schema}.messages"
    " FOR EACH STATEMENT EXECUTE FUNCTION {schema}.channel_counts_move()",
    # A TRUNCATE (by hand: the store never runs one) fires no DELETE trigger.
    _trigger_function("channel_counts_truncate", "DELETE FROM {schema}.channel_counters;"),
    "CREATE TRIGGER channel_counts_truncate AFTER TRUNCATE ON {schema}.messages"
    " FOR EACH STATEMENT EXECUTE FUNCTION {schema}.channel_counts_truncate()",
]

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
    (
        2,
        [
            # Free-form name -> value pairs of a queue (Azure's queue metadata); delete_queue
            # removes its row with the queue's other rows.
            """
            CREATE TABLE {schema}.queue_metadata (
                queue    bigint PRIMARY KEY,
                metadata jsonb NOT NULL
            )
            """,
        ],
    ),
    (
        3,
        [
            # Tombstones become runs, as in the SQLite store: one row per run of consecutive
            # keys deleted by one statement with one receipt_seq, `key` its first key and
            # `last_key` its last. An ack of 100 messages received together writes one row
            # (and two index entries) instead of 100: the tombstones were a quarter of the ack
            # backend's CPU and 215 of its 277 WAL bytes per message. Keys are never deleted
            # twice (an identity column), so runs never overlap and the run holding a key is
            # the one with the greatest first key <= it (TOMBSTONES_BY_KEY_SQL), if it reaches
            # that far. NULL means a run of one key: the rows written before this version, and
            # those a replica of an older version still writes during a rolling upgrade, stay
            # as they are (adding a nullable column rewrites nothing, however many there are).
            # An older replica's lookup (key = ANY) finds only the first key of a run: until it
            # is replaced, it answers MESSAGE_NOT_FOUND for a retried ack of the others.
            "ALTER TABLE {schema}.tombstones ADD COLUMN last_key bigint",
        ],
    ),
    (
        4,
        [
            # Stats without counting the queue: how many messages each channel of a
            # queue holds (expired ones not swept yet included). Sharded like queue_counters:
            # each connection adds to its own row (slot = backend pid mod COUNTER_SLOTS), so
            # concurrent senders and acks never wait for one hot row; stats sums the slots.
            # A slot's total may be negative (an ack on another connection than the send).
            """
            CREATE TABLE {schema}.channel_counters (
                queue   bigint NOT NULL,
                channel text COLLATE "C" NOT NULL,
                slot    integer NOT NULL,
                total   bigint NOT NULL DEFAULT 0,
                PRIMARY KEY (queue, channel, slot)
            ) WITH (fillfactor = 50)
            """,
            # The moves of the statement running, between the two triggers that count them
            # (_CHANNEL_TRIGGERS): empty but within one. Unlogged: nothing in it outlives a
            # statement, so nothing needs to survive a crash.
            """
            CREATE UNLOGGED TABLE {schema}.channel_moves (
                queue   bigint NOT NULL,
                channel text COLLATE "C" NOT NULL,
                n       integer NOT NULL
            )
            """,
            # Filled from the rows as they are, then kept by triggers on messages (below), so
            # that every statement that adds, removes or moves messages is counted whoever runs
            # it: replicas of an older version, still serving during a rolling upgrade, write
            # messages without knowing of this table and are counted all the same. The lock
            # (the mode CREATE TRIGGER takes; it lets readers and SELECT ... FOR UPDATE through)
            # lets nothing write messages until this transaction commits: writers wait here, and
            # each of their statements is either in the count or seen by the triggers, never
            # both, never neither.
            "LOCK TABLE {schema}.messages IN SHARE ROW EXCLUSIVE MODE",
            # One pass over the table, not the store's index-only habits (PLANNER_SETTINGS).
            "SET LOCAL enable_seqscan = on",
            "SET LOCAL enable_sort = on",
            "INSERT INTO {schema}.channel_counters (queue, channel, slot, total)"
            " SELECT queue, channel, 0, count(*) FROM {schema}.messages GROUP BY queue, channel",
            *_CHANNEL_TRIGGERS,
            # Stats' oldest visible message: the first entry of the queue in enqueue order that
            # is visible and unexpired; the walk skips only leased, delayed and expired ones.
            "CREATE INDEX messages_enqueued ON {schema}.messages (queue, enqueued_at)",
        ],
    ),
    (
        5,
        [
            # A front end's own name -> value pairs of a queue (SQS's tags, ...) and of the
            # server, in namespaces (Store.queue_state, Store.settings); delete_queue removes a
            # queue's rows with its other rows.
            """
            CREATE TABLE {schema}.queue_state (
                queue     bigint NOT NULL,
                namespace text NOT NULL,
                name      text NOT NULL,
                value     text NOT NULL,
                PRIMARY KEY (queue, namespace, name)
            )
            """,
            """
            CREATE TABLE {schema}.settings (
                namespace text NOT NULL,
                name      text NOT NULL,
                value     text NOT NULL,
                PRIMARY KEY (namespace, name)
            )
            """,
        ],
    ),
    (
        6,
        [
            # Message groups (domain.groups). Adding columns with constant defaults rewrites
            # nothing. A FIFO or FAIR queue keeps one row per group holding messages: when a
            # receive may deliver from it (ready_at) and, FAIR, when it was last served (turn).
            # A receive locks the group rows it delivers from (FOR UPDATE SKIP LOCKED), so two
            # replicas never lease messages of one FIFO group at once (groups.py). Idempotent
            # (IF NOT EXISTS): the migration tests add it to older versions' schemas.
            "ALTER TABLE {schema}.queues ADD COLUMN IF NOT EXISTS ordering smallint NOT NULL"
            " DEFAULT 1, ADD COLUMN IF NOT EXISTS content_based_dedup boolean NOT NULL"
            " DEFAULT false, ADD COLUMN IF NOT EXISTS dedup_scope smallint NOT NULL DEFAULT 1",
            'ALTER TABLE {schema}.messages ADD COLUMN IF NOT EXISTS grp text COLLATE "C"',
            "CREATE INDEX IF NOT EXISTS messages_group ON {schema}.messages (queue, grp, key)"
            " WHERE grp IS NOT NULL",
            "CREATE INDEX IF NOT EXISTS messages_group_visible"
            " ON {schema}.messages (queue, grp, visible_at, key) WHERE grp IS NOT NULL",
            f"""
            CREATE TABLE IF NOT EXISTS {{schema}}.groups (
                queue    bigint NOT NULL,
                name     text COLLATE "C" NOT NULL,
                ready_at float8 NOT NULL,
                turn     bigint NOT NULL DEFAULT 0,
                PRIMARY KEY (queue, name)
            ) WITH (fillfactor = 70, {_AUTOVACUUM})
            """,
            "CREATE INDEX IF NOT EXISTS groups_ready ON {schema}.groups (queue, ready_at, name)",
            "CREATE INDEX IF NOT EXISTS groups_turn ON {schema}.groups (queue, turn, name)",
        ],
    ),
    (
        7,
        [
            # The retry policy: a queue's backoffs (NULL: none), and on each message whether its
            # lease ends with the backoff. Nullable and defaulted columns rewrite nothing. The
            # partial index holds only such leases (queues with a policy), so the sweep that
            # turns the ended ones into delays (BACKOFF_ENDED_SQL) reads only those.
            # IF NOT EXISTS: the migration tests run older versions' schemas with these added.
            "ALTER TABLE {schema}.queues ADD COLUMN IF NOT EXISTS retry_minimum_backoff float8,"
            " ADD COLUMN IF NOT EXISTS retry_maximum_backoff float8",
            "ALTER TABLE {schema}.messages"
            " ADD COLUMN IF NOT EXISTS backoff boolean NOT NULL DEFAULT false",
            "CREATE INDEX IF NOT EXISTS messages_backoff ON {schema}.messages (queue, visible_at)"
            " WHERE backoff",
        ],
    ),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]

# --- schema -----------------------------------------------------------------------------------


def _lock_key(schema: str) -> str:
    return f"leaseq:migrate:{schema}"


async def _migrate(
    conn: psycopg.AsyncConnection[Any],
    schema: str,
    migrations: Sequence[tuple[int, list[str]]] = MIGRATIONS,
) -> bytes:
    """Create the schema or bring it to the last of migrations' versions (SCHEMA_VERSION),
    under an advisory lock (replicas that start together take turns); return the receipt
    signing key. One transaction: a failed migration leaves nothing behind."""
    latest = migrations[-1][0]
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
        cur = await conn.execute(f"SELECT value FROM {quoted}.meta WHERE name = 'schema_version'")
        row = await cur.fetchone()
        version = 0 if row is None else int(bytes(row[0]).decode())
        if version > latest:
            raise RuntimeError(
                f"the PostgreSQL schema {schema!r} has version {version};"
                f" this leaseq knows versions up to {latest}"
            )
        for number, statements in migrations:
            if number <= version:
                continue
            log.info("migrating PostgreSQL schema %s to version %d", schema, number)
            for statement in statements:
                await conn.execute(statement.replace("{schema}", quoted))
        if version != latest:
            await conn.execute(
                f"INSERT INTO {quoted}.meta (name, value) VALUES ('schema_version', %s)"
                " ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                (str(latest).encode(),),
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
