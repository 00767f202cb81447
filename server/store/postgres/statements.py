"""The SQL texts of the PostgreSQL store (module constants, so the query-plan tests check these
very texts)."""

from __future__ import annotations

from .settings import _CONFIG_FIELDS, COUNTER_SLOTS, SWEEP_LIMIT

# --- statements (module constants, so the query-plan tests check these very texts) ----------

NOW_SQL = "COALESCE(%(now)b::float8, extract(epoch FROM now())::float8)"

QUEUE_COLUMNS = "id, name, uid, create_time, " + ", ".join(_CONFIG_FIELDS)
QUEUE_COLUMNS_OF_Q = ", ".join(f"q.{c}" for c in QUEUE_COLUMNS.split(", "))
GRANTED_SQL = "(SELECT COALESCE(sum(granted), 0)::bigint FROM queue_counters WHERE queue = q.id)"


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
# transaction holds skipped, counted in the queue's expired total. The rows are named by ctid
# (locked by the pick, so it holds), as in deliver_sql: by key, statistics of a nearly empty
# table let the planner read all of messages_visible (which holds key) for the DELETE.
def sweep_sql(limit: int = SWEEP_LIMIT) -> str:
    return f"""
    WITH expired AS (
        DELETE FROM messages WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM messages WHERE queue = %(queue)b AND expires_at <= %(now)b
            ORDER BY expires_at LIMIT {limit} FOR UPDATE SKIP LOCKED))
        RETURNING grp),
    counted AS (
        INSERT INTO queue_counters AS c (queue, slot, expired)
        SELECT %(queue)b, {SLOT_SQL}, count(*) FROM expired HAVING count(*) > 0
        ON CONFLICT (queue, slot) DO UPDATE SET expired = c.expired + EXCLUDED.expired)
    SELECT DISTINCT grp FROM expired WHERE grp IS NOT NULL
"""


SWEEP_SQL = sweep_sql()

# "Not expired" as a filter, never an index condition: as one, a generic plan (psycopg prepares
# statements after a few runs) may prefer a range of messages_expiry over the ordered scan of
# messages_visible, and then sort the whole queue. Likewise for other columns below (`+ 0`).
UNEXPIRED = "expires_at + 0 > %(now)b"

MESSAGE_COLUMNS = (
    "key, message_id, body, attributes, channel, enqueued_at, expires_at, visible_at, leased,"
    " delivery_count, receipt_seq, last_error, source_queue, grp"
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
# Read in visible_at order (the subquery's ORDER BY, which no plan sorts: PLANNER_SETTINGS): as a
# bare aggregate, statistics of a nearly empty table let a plan read the queue's whole range of
# messages_enqueued instead (every message of the queue, not its leases).
IN_FLIGHT_SQL = (
    "SELECT count(*), min(visible_at),"
    " (SELECT COALESCE(sum(granted), 0)::bigint FROM queue_counters WHERE queue = %(queue)b)"
    " FROM (SELECT visible_at FROM messages"
    f" WHERE queue = %(queue)b AND leased AND visible_at > %(now)b AND {UNEXPIRED}"
    " ORDER BY visible_at) AS leases"
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
    "SELECT key, receipt_seq, leased, visible_at, last_error, delivery_count, backoff"
    " FROM messages"
    f" WHERE key = ANY(%(keys)b::bigint[]) AND queue + 0 = %(queue)b AND {UNEXPIRED}"
    " ORDER BY key FOR UPDATE"
)


# The tombstones of keys: the run that may hold each key is the one with the greatest first key
# <= it (runs never overlap: schema.py, version 3), one backward probe of tombstones_pkey per key;
# it holds the key when it reaches it (last_key NULL: a run of one key) and is this queue's.
# Only receipts that found no message come here (a retried ack): a few.
TOMBSTONES_BY_KEY_SQL = (
    "SELECT k.key, t.receipt_seq, t.deleted_at FROM unnest(%(keys)b::bigint[]) AS k(key),"
    " LATERAL (SELECT key, last_key, queue, receipt_seq, deleted_at FROM tombstones"
    " WHERE key <= k.key ORDER BY key DESC LIMIT 1) AS t"
    " WHERE k.key <= COALESCE(t.last_key, t.key) AND t.queue = %(queue)b"
)

# The runs of the rows a statement deleted (the CTE `gone`: key, receipt_seq), one tombstone
# each: consecutive keys with one receipt_seq. The usual ack (a batch received together) is one
# run, seen by one aggregate of the deleted rows: distinct keys spanning exactly their count are
# consecutive. Otherwise (the second branch, not run at all when the first answered: its
# condition is a constant of the statement) within a receipt_seq, key - row_number() is the same
# for the keys of one run and grows at every gap: a sort of the deleted rows (at most the
# request's), no index.
_ONE_RUN = "max(key) - min(key) + 1 = count(*) AND min(receipt_seq) = max(receipt_seq)"
_RUNS_OF_GONE = f"""
    SELECT key, last_key, receipt_seq FROM (
        SELECT min(key) AS key, max(key) AS last_key, min(receipt_seq) AS receipt_seq,
            {_ONE_RUN} AS one
        FROM gone) AS span
    WHERE one
    UNION ALL
    SELECT min(key), max(key), receipt_seq FROM (
        SELECT key, receipt_seq,
            key - row_number() OVER (PARTITION BY receipt_seq ORDER BY key) AS run
        FROM gone) AS g
    WHERE NOT (SELECT {_ONE_RUN} FROM gone)
    GROUP BY receipt_seq, run"""


def delete_sql(where: str) -> str:
    """Delete messages, leave their tombstones (runs) and count them, in one statement."""
    return f"""
        WITH gone AS (
            DELETE FROM messages WHERE {where} RETURNING key, receipt_seq),
        marked AS (
            INSERT INTO tombstones (key, last_key, queue, receipt_seq, deleted_at)
            SELECT key, last_key, %(queue)b, receipt_seq, %(now)b FROM ({_RUNS_OF_GONE}) AS r
            ON CONFLICT (key) DO UPDATE SET last_key = EXCLUDED.last_key,
                queue = EXCLUDED.queue, receipt_seq = EXCLUDED.receipt_seq,
                deleted_at = EXCLUDED.deleted_at),
        counted AS (
            INSERT INTO queue_counters AS c (queue, slot, deleted)
            SELECT %(queue)b, {SLOT_SQL}, count(*) FROM gone HAVING count(*) > 0
            ON CONFLICT (queue, slot) DO UPDATE SET deleted = c.deleted + EXCLUDED.deleted)
        SELECT key FROM gone
    """


DELETE_KEYS_SQL = delete_sql("key = ANY(%(keys)b::bigint[])")
DELETE_ATTEMPT_SQL = delete_sql(f"queue = %(queue)b AND attempt_id = %(attempt)b AND {UNEXPIRED}")

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

# A send with dedup ids (the transaction way): the rows the caller kept.
INSERT_MESSAGES_SQL = """
    INSERT INTO messages (queue, message_id, body, attributes, channel, enqueued_at,
                          expires_at, visible_at, grp)
    SELECT %(queue)b, m.message_id, m.body, m.attributes::jsonb, m.channel, %(now)b,
           m.expires_at, m.visible_at, m.grp
    FROM unnest(%(message_ids)b::text[], %(bodies)b::bytea[], %(attributes)b::text[],
                %(channels)b::text[], %(expires)b::float8[], %(visibles)b::float8[],
                %(groups)b::text[])
         AS m(message_id, body, attributes, channel, expires_at, visible_at, grp)
    RETURNING message_id, key
"""

# Dead letters: messages of %(queue)b that reached max_delivery_count (locked by the pick) move
# to the dead letter queue %(dlq)b, counted in the source's dead_lettered total (and, by the
# trigger channel_counts_move, in both queues' channel counts: schema.py).
DEAD_LETTER_SQL = f"""
    WITH moved AS (
        UPDATE messages SET queue = %(dlq)b, visible_at = %(now)b, leased = false,
            backoff = false, expires_at = enqueued_at + %(retention)b,
            receipt_seq = receipt_seq + 1, source_queue = %(source)b, attempt_id = NULL,
            last_error = COALESCE(%(reason)b::text, last_error)
        WHERE key = ANY(%(keys)b::bigint[])
        RETURNING 1)
    INSERT INTO queue_counters AS c (queue, slot, dead_lettered)
    SELECT %(queue)b, {SLOT_SQL}, count(*) FROM moved HAVING count(*) > 0
    ON CONFLICT (queue, slot)
    DO UPDATE SET dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered
"""

# The leases of a queue with a retry policy that ended by now and end with its backoff (only such
# leases are in the partial index messages_backoff); those another transaction holds are left to
# it (SKIP LOCKED: no lock order to keep, so the order is the index's). _Tx.end_backoff_leases
# turns each into a delay until its redelivery (END_BACKOFFS_SQL).
BACKOFF_ENDED_SQL = (
    "SELECT key, visible_at, delivery_count FROM messages"
    " WHERE queue = %(queue)b AND backoff AND visible_at <= %(now)b"
    " ORDER BY visible_at FOR UPDATE SKIP LOCKED"
)

END_BACKOFFS_SQL = """
    UPDATE messages m SET visible_at = v.visible_at, leased = false, backoff = false
    FROM unnest(%(keys)b::bigint[], %(visibles)b::float8[]) AS v(key, visible_at)
    WHERE m.key = v.key AND m.key = ANY(%(keys)b::bigint[])
"""

# A delivery to a queue with a retry policy: its leases end with the backoff.
MARK_BACKOFF_SQL = "UPDATE messages SET backoff = true WHERE key = ANY(%(keys)b::bigint[])"

# Redrive: messages of %(queue)b (locked by the pick) to the queues v.queue, delivery count
# reset, a new retention clock (counted in both queues' channel counts by the trigger
# channel_counts_move).
REDRIVE_SQL = """
    UPDATE messages m SET queue = v.queue, delivery_count = 0,
        visible_at = %(now)b, leased = false, backoff = false, source_queue = NULL,
        receipt_seq = m.receipt_seq + 1, expires_at = v.expires_at, attempt_id = NULL
    FROM unnest(%(keys)b::bigint[], %(queues)b::bigint[], %(expires)b::float8[])
         AS v(key, queue, expires_at)
    WHERE m.key = v.key
"""

# The channels whose counters sum to 0 (every message sent to them is gone), at most %(limit)b:
# housekeeping removes their rows (PostgresStore._drop_empty_channels), so that a queue that used
# many channel names keeps no rows for those it no longer holds.
EMPTY_CHANNELS_SQL = """
    SELECT queue, channel FROM channel_counters
    GROUP BY queue, channel HAVING sum(total) = 0 LIMIT %(limit)b
"""

# Their rows, locked (in key order) and read as the newest committed versions: what a concurrent
# statement added since the first read is seen here, or in a new slot's row that is left alone.
LOCK_CHANNELS_SQL = """
    SELECT c.queue, c.channel, c.slot, c.total FROM channel_counters c
    JOIN unnest(%(queues)b::bigint[], %(channels)b::text[]) AS e(queue, channel)
        ON c.queue = e.queue AND c.channel = e.channel
    ORDER BY c.queue, c.channel, c.slot FOR UPDATE OF c
"""

DROP_CHANNEL_ROWS_SQL = """
    DELETE FROM channel_counters c
    USING unnest(%(queues)b::bigint[], %(channels)b::text[], %(slots)b::integer[])
        AS e(queue, channel, slot)
    WHERE c.queue = e.queue AND c.channel = e.channel AND c.slot = e.slot
"""

# GetQueueStats in one statement (one snapshot: the counters and the rows agree), without
# reading the queue's visible messages (counting them took seconds at 10,000,000):
#   0: each channel's messages (channel_counters' slots summed; expired ones not swept included)
#   1: each channel's leased and delayed messages, unexpired: messages_visible's range after now
#   2: each channel's expired messages not swept yet (past SWEEP_LIMIT): messages_expiry's range
#      up to now
#      (both ranges read in index order, ORDER BY: an Index Scan, never a Bitmap Heap Scan, which
#      a custom plan chose on a queue just acked fast and which never marks index entries of
#      deleted rows dead: its every run visited the heap of every acked message whose last
#      lease ended after now; an Index Scan visits them once)
#   3: the oldest visible message's enqueued_at: messages_enqueued in order from the queue's
#      first entry, past the leased, delayed and expired ones (`+ 0`: filters, so that no plan
#      reads a range of messages_visible and sorts it)
#   4: the queue's dead-lettered, expired and deleted totals (queue_counters)
# The caller takes visible = messages - expired - leased - delayed per channel. The cost grows
# with the leased, delayed and expired messages, not with the visible backlog.
STATS_SQL = f"""
    SELECT 0, channel, sum(total)::bigint, 0::bigint, 0::bigint, NULL::float8
    FROM channel_counters WHERE queue = %(queue)b GROUP BY channel HAVING sum(total) <> 0
    UNION ALL
    SELECT 1, channel, count(*) FILTER (WHERE leased), count(*) FILTER (WHERE NOT leased),
        0, NULL
    FROM (SELECT channel, leased FROM messages
          WHERE queue = %(queue)b AND visible_at > %(now)b AND {UNEXPIRED}
          ORDER BY visible_at) AS u
    GROUP BY channel
    UNION ALL
    SELECT 2, channel, count(*), 0, 0, NULL
    FROM (SELECT channel FROM messages WHERE queue = %(queue)b AND expires_at <= %(now)b
          ORDER BY expires_at) AS e
    GROUP BY channel
    UNION ALL
    SELECT 3, NULL, 0, 0, 0, (
        SELECT enqueued_at FROM messages
        WHERE queue = %(queue)b AND visible_at + 0 <= %(now)b AND {UNEXPIRED}
        ORDER BY enqueued_at LIMIT 1)
    UNION ALL
    SELECT 4, NULL, COALESCE(sum(dead_lettered), 0)::bigint, COALESCE(sum(expired), 0)::bigint,
        COALESCE(sum(deleted), 0)::bigint, NULL
    FROM queue_counters WHERE queue = %(queue)b
    UNION ALL
    SELECT 5, NULL, count(*), count(*) FILTER (WHERE ready_at > %(now)b), 0, NULL
    FROM groups WHERE queue = %(queue)b
"""

# Change visibility, release, nack: the new lease state of each key. `m.key = ANY(keys)` besides
# the join: a join order is the planner's choice, and with statistics of a nearly empty table it
# hashed the keys and read the whole primary key index for them; the ANY bounds that scan.
WRITE_LEASES_SQL = """
    UPDATE messages m SET visible_at = v.visible_at, leased = v.leased, backoff = v.backoff,
        last_error = v.last_error,
        attempt_id = CASE WHEN v.clear_attempt THEN NULL ELSE m.attempt_id END
    FROM unnest(%(keys)b::bigint[], %(visibles)b::float8[], %(leased)b::bool[],
                %(backoffs)b::bool[], %(errors)b::text[], %(clear)b::bool[])
         AS v(key, visible_at, leased, backoff, last_error, clear_attempt)
    WHERE m.key = v.key AND m.key = ANY(%(keys)b::bigint[])
"""


# --- one statement per RPC ---------------------------------------------------------------------
#
# The usual send, receive and ack each run as ONE autocommitted statement (a round trip, no BEGIN
# and COMMIT): the queue's row (and "now") in a first CTE, the work in the next ones, reading
# their queue id and instant from it. When the queue's row says the short way does not apply
# (a dead letter queue, the in-flight limit near, ...) the statement does nothing and says so,
# and the store takes the transaction way. Expired messages are swept by a statement after it
# (reads filter them anyway). Notifications stay out of these statements (the package docstring,
# Notifications: a NOTIFY holds PostgreSQL's cluster-wide notify lock through its commit's WAL
# flush); the statement says whether one is due.

# Their plans are cached per connection instead of made anew on every execution (PLANNER_SETTINGS'
# force_custom_plan; planning was most of a one-message receive's database CPU,
# docs/performance.md). They can be: the queue's id and "now" come from the CTE q, not from
# parameters, so no plan knows them anyway, and their index paths hold whatever the statistics
# say (tests/postgres/test_query_plans.py checks their generic plans on statistics of a nearly
# empty table too). The store switches a connection's session between the two modes when it
# goes from one kind of work to the other (PostgresStore._plan_mode): rarely.
GENERIC_PLAN_SQL = "SET plan_cache_mode = force_generic_plan"
CUSTOM_PLAN_SQL = "SET plan_cache_mode = force_custom_plan"

# The queue as the one-statement operations read it: q.now, its id and uid, and whether it holds
# expired messages (open_queue_sql's probe). Statements built on it end with q.now and q.id.
_QUEUE_NOW = """
    SELECT c.now, q.id, q.uid,
        (SELECT m.expires_at FROM messages m WHERE m.queue = q.id AND m.expires_at <= c.now
         ORDER BY m.expires_at LIMIT 1) IS NOT NULL AS has_expired"""

_IN_FLIGHT_CEILING = f"q.leases_counted + ({GRANTED_SQL} - q.grants_at_count)"


def _from_queue(statement: str) -> str:
    """A statement written with the parameters %(now)b, %(queue)b, %(until)b, %(leased)b, reading
    them instead from the CTE `q` (the queue's row, one or none: then nothing matches)."""
    for param, value in (
        ("%(now)b", "(SELECT now FROM q)"),
        ("%(queue)b", "(SELECT id FROM q WHERE fast)"),
        ("%(until)b", "(SELECT now + timeout FROM q)"),
        ("%(leased)b", "(SELECT timeout > 0 FROM q)"),
    ):
        statement = statement.replace(param, value)
    return statement


def receive_sql(channel_clause: str = "", sized: bool = False) -> str:
    """A receive in one statement: deliver_sql after the queue's row, when the queue has no dead
    letter queue and its in-flight ceiling leaves room for %(limit)b more (else `fast` is false
    and nothing is delivered). One row per delivered message (its pick order, then
    MESSAGE_COLUMNS), after q.now, q.id, q.uid, fast, has_expired and the next visible instant (only
    when nothing was delivered); one row with NULL message columns when none was.
    %(timeout)b: the lease, NULL for the queue's."""
    deliver = _from_queue(deliver_sql(channel_clause, sized))
    deliver = deliver.strip().removeprefix("WITH ")
    deliver = deliver[: deliver.rindex("SELECT * FROM delivered")]
    return f"""
        WITH q AS MATERIALIZED (
            {_QUEUE_NOW},
                COALESCE(%(timeout)b::float8, q.visibility_timeout) AS timeout,
                (q.dead_letter_queue IS NULL OR q.dead_letter_queue = ''
                 OR q.max_delivery_count IS NULL) AND q.ordering = 1
                AND q.retry_minimum_backoff IS NULL
                AND (COALESCE(%(timeout)b::float8, q.visibility_timeout) <= 0
                     OR {_IN_FLIGHT_CEILING} + %(limit)b <= q.max_in_flight) AS fast
            FROM queues q, (SELECT {NOW_SQL} AS now) c
            WHERE q.name = %(name)b),
        {deliver}
        SELECT q.now, q.id, q.uid, q.fast, q.has_expired,
            CASE WHEN q.fast AND NOT EXISTS (SELECT FROM delivered) THEN
                (SELECT visible_at FROM messages
                 WHERE queue = q.id AND visible_at > q.now AND expires_at + 0 > q.now
                 ORDER BY visible_at LIMIT 1) END,
            d.*
        FROM q LEFT JOIN delivered d ON true
    """


def _send_sql(insert: str, keys: bool = False) -> str:
    """A send without dedup ids in one statement: FOR KEY SHARE of the queue's row (a concurrent
    DeleteQueue waits for it, then deletes what it wrote), then `insert`, an INSERT of the rows
    that reads the queue's row as q, which writes nothing to a queue with an ordering (the
    caller goes the transaction way). Returns q.now, q.id, has_expired, the count and the
    queue's ordering; with keys, also the message ids and the keys of the rows (two arrays in
    one order); no row when there is no such queue."""
    head = f"""
    WITH q AS MATERIALIZED (
        {_QUEUE_NOW}, q.default_delay, q.message_retention, q.ordering
        FROM queues q, (SELECT {NOW_SQL} AS now) c
        WHERE q.name = %(name)b FOR KEY SHARE OF q),
    sent AS ({insert}
        WHERE q.ordering = 1"""
    if not keys:
        return f"""{head}
        RETURNING 1)
    SELECT q.now, q.id, q.has_expired, (SELECT count(*) FROM sent), q.ordering FROM q
"""
    # Both arrays from one aggregation over the rows: one order.
    return f"""{head}
        RETURNING message_id, key)
    SELECT q.now, q.id, q.has_expired, s.count, q.ordering, s.ids, s.keys
    FROM q, (SELECT count(*) AS count, array_agg(message_id) AS ids, array_agg(key) AS keys
             FROM sent) s
"""


# A lease an update through a send receipt made (domain.leases.update_leases): one grant more,
# as a leasing receive counts its own (the in-flight ceiling).
GRANT_ONE_SQL = f"""
    INSERT INTO queue_counters AS c (queue, slot, granted) VALUES (%(queue)b, {SLOT_SQL}, 1)
    ON CONFLICT (queue, slot) DO UPDATE SET granted = c.granted + EXCLUDED.granted
"""

# Each message's delay and retention (NULL: the queue's), attributes and channel.
SEND_SQL = _send_sql(
    """
        INSERT INTO messages (queue, message_id, body, attributes, channel, enqueued_at,
                              expires_at, visible_at)
        SELECT q.id, m.message_id, m.body, m.attributes::jsonb, m.channel, q.now,
               q.now + COALESCE(m.ttl, q.message_retention),
               q.now + COALESCE(m.delay, q.default_delay)
        FROM q, unnest(%(message_ids)b::text[], %(bodies)b::bytea[], %(attributes)b::text[],
                       %(channels)b::text[], %(ttls)b::float8[], %(delays)b::float8[])
             AS m(message_id, body, attributes, channel, ttl, delay)""",
    keys=True,
)

# SEND_SQL for messages that are only a body (send_bodies: the usual batch): two arrays, not
# six. Each array costs its dump in the server (per element, in Python) and its parse and unnest
# in the backend (`leaseq bench send --store postgres --json`: database_cpu_us_per_msg; the
# figures in docs/performance.md).
SEND_BODIES_SQL = _send_sql("""
        INSERT INTO messages (queue, message_id, body, channel, enqueued_at, expires_at,
                              visible_at)
        SELECT q.id, m.message_id, m.body, '', q.now, q.now + q.message_retention,
               q.now + q.default_delay
        FROM q, unnest(%(message_ids)b::text[], %(bodies)b::bytea[]) AS m(message_id, body)""")

# Acks by receipt in one statement, for a request whose receipts name distinct messages of this
# queue as the store knew it (%(queue)b and %(uid)b: a queue deleted and made again under the
# same name has new ones, and then nothing is deleted). The rows are found by an ordered read of
# the primary key (ORDER BY key: the only index that gives that order, PLANNER_SETTINGS) and
# deleted by ctid: by key, a generic plan made on statistics of a nearly empty table read all of
# messages_visible (which holds key) instead, as deliver_sql says of the receive. A row that
# another transaction changed meanwhile (a redelivery, a lease change) has a new ctid, so the
# DELETE's re-check on its newest version lets it be, and the transaction way answers for it
# (no row lock first: one WAL record less per message). A message goes when its receipt_seq is
# the receipt's (%(seqs)b, in the order of %(keys)b) and it has not expired: base.fence's "current
# receipt" case; the caller looks at the others again (their statuses) the transaction way.
# near_limit: the queue's in-flight ceiling is within %(margin)b of its limit, so a receiver held
# by the limit on another replica may wait for this ack: only then does the store notify (see the
# package docstring, Notifications).
# The key and receipt_seq arrays are cast once, in q: written in the row filter, the casts (psycopg
# sends small ints as int2[]) ran once per row, 100 array coercions per ack of 100 (perf of the
# backend: array_map, CopyArrayEls).
# q.seq: the receipts' one receipt_seq when they share it (the usual ack: a batch delivered once),
# compared as one value; only otherwise does each row look its receipt's up by array_position, a
# walk of the key array per row.
# The tombstones are runs (_RUNS_OF_GONE: one row for an ack of consecutive keys with one
# receipt_seq, the usual ack of a batch received together) and plain INSERTs (delete_sql's ON
# CONFLICT is a speculative insertion: one more descent of tombstones_pkey and one more WAL record
# per row): a message's row is deleted once and keys are never reused (an identity column), so no
# tombstone starts at one of these keys. Should one all the same, the statement fails whole
# (unique_violation, rolled back) and the transaction way, with ON CONFLICT, answers
# (PostgresStore._delete_fast).
DELETE_RECEIPTS_SQL = f"""
    WITH q AS MATERIALIZED (
        {_QUEUE_NOW},
            {_IN_FLIGHT_CEILING} + %(margin)b >= q.max_in_flight AS near_limit, true AS fast,
            %(keys)b::bigint[] AS keys, %(seqs)b::integer[] AS seqs,
            (SELECT CASE WHEN min(s) = max(s) THEN min(s) END
             FROM unnest(%(seqs)b::integer[]) AS s) AS seq
        FROM queues q, (SELECT {NOW_SQL} AS now) c
        WHERE q.name = %(name)b AND q.id = %(queue)b AND q.uid = %(uid)b AND q.ordering = 1),
    gone AS (
        DELETE FROM messages m WHERE m.ctid = ANY(ARRAY(
            SELECT ctid FROM messages
            WHERE key = ANY(%(keys)b::bigint[]) AND queue + 0 = (SELECT id FROM q)
                AND receipt_seq = COALESCE((SELECT seq FROM q),
                    (SELECT seqs FROM q)[array_position((SELECT keys FROM q), key)])
                AND expires_at + 0 > (SELECT now FROM q)
            ORDER BY key))
        RETURNING m.key, m.receipt_seq),
    marked AS (
        INSERT INTO tombstones (key, last_key, queue, receipt_seq, deleted_at)
        SELECT r.key, r.last_key, q.id, r.receipt_seq, q.now FROM ({_RUNS_OF_GONE}) AS r, q),
    counted AS (
        INSERT INTO queue_counters AS c (queue, slot, deleted)
        SELECT (SELECT id FROM q), {SLOT_SQL}, count(*) FROM gone HAVING count(*) > 0
        ON CONFLICT (queue, slot) DO UPDATE SET deleted = c.deleted + EXCLUDED.deleted)
    SELECT q.now, q.id, q.has_expired, ARRAY(SELECT key FROM gone), q.near_limit FROM q
"""
