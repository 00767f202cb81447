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
  order, then apply base.fence: a delivery and an ack of the same message serialize on the row.
  The usual ack (every receipt current, see "One statement per RPC") is one DELETE of the rows
  whose state in its snapshot passes the fence (``receipt_seq`` = the receipt's, not expired),
  named by ctid: a row changed by a concurrent delivery or lease change since has a new ctid and
  is left to the transaction way, which answers for it; a deadlock is retried;
- sends, dead-letter moves and redrives hold ``FOR KEY SHARE`` on the destination queue's row, so
  a concurrent DeleteQueue waits for them and then removes what they wrote; a queue created with a
  dead letter queue holds it the same way;
- the first statement of every operation also looks (one index probe) for expired messages;
  only when there are some a sweep deletes them, with ``SKIP LOCKED``, at most SWEEP_LIMIT at a
  time; every read filters ``expires_at > now`` and stats count what is expired but not swept
  yet (by channel), so counts stay exact whatever was swept;
- deadlocks and serialization failures (a purge racing a batch ack) are retried.

Counters (dead-lettered, expired, deleted totals and lease grants) are not columns of the queue's
row, which every consumer would then update and serialize on: each connection adds to its own
row of ``queue_counters`` (slot = backend pid mod COUNTER_SLOTS) and stats sums them.

Stats count no visible message (schema version 4). ``channel_counters`` (queue,
channel, slot) holds how many messages each channel of a queue has (expired ones not swept yet
included), sharded the same way. Triggers on ``messages`` keep it (schema.py, version 4), so
every writer is counted whatever its code: this store's statements, and those of replicas of an
older version still serving during a rolling upgrade. Inserts and deletes (sends, acks, deletes
by attempt, sweeps, purge, DeleteQueue) fire one statement-level trigger each, which adds the
statement's rows (a transition table) per (queue, channel) to the connection's row in one upsert,
inside the same statement: the one-statement send and ack are still one round trip. Moves to
another queue (dead-letter moves, redrive) fire, only for an UPDATE that sets queue or channel,
a row-level trigger that notes each row it moves (``channel_moves``) and a statement-level one
that adds them up in one upsert; deliveries and lease changes fire nothing.
STATS_SQL, one statement (one snapshot), then reads the summed totals, the leased and delayed
messages (messages_visible after now), the expired ones not swept (messages_expiry up to now)
and the oldest visible one (messages_enqueued, past the unavailable ones); visible = total -
expired - leased - delayed (never below 0, should the counters ever be short: a warning says
so). Its cost follows the leased, delayed and expired messages and the dead index entries not
vacuumed yet, not the backlog (docs/performance.md, "Figures behind the code"). Housekeeping removes the rows of channels whose slots sum
to 0 (locked and summed again first), so a queue that used many channel names keeps no rows for
them. The migration fills the table from the rows and
creates the triggers in one transaction, with writers locked out meanwhile: no write is missed
or counted twice.

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
    messages_enqueued (queue, enqueued_at)      stats: the oldest visible message (version 4)
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
  hundreds of microseconds of the database's CPU, small next to a round trip). The
  one-statement operations (below) are the exception: their plans hold whatever the statistics
  say, so their sessions plan them once (force_generic_plan; statements.py GENERIC_PLAN_SQL);
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

One statement per RPC
---------------------
A send without dedup ids, a receive without an attempt id and an ack whose receipts all verify
are each one autocommitted statement (statements.py: SEND_SQL, receive_sql,
DELETE_RECEIPTS_SQL): one round trip instead of BEGIN, a statement for the queue's row, the work
and COMMIT. The queue's row is the statement's first CTE (``q``: "now", id, uid, and whether the
queue holds expired messages, then swept by a statement after it), and the later CTEs take the
queue id and the instant from it. Where the transaction way has work the statement cannot do,
the statement does nothing and says so: a queue with a dead letter queue or near its in-flight
limit (the receive's ``fast`` is false), receipts of a queue this store has not seen or that was
made again under its name (the ack checks the id and uid it knew), repeated keys in one ack. An
ack deletes the messages whose receipt is current; the rest of its receipts (stale, already
deleted, ...) then go the transaction way for their statuses. A failure the server reported
(SQLSTATE) rolled the statement back and it runs again; a connection lost without a word may
have lost the answer to a commit: UNAVAILABLE.

Notifications
-------------
A long poll waiting on replica A must wake when a message is sent through replica B. After a change
commits (send, release, redrive, purge, ...), the store publishes the queue's name on a channel
named after the schema (NOTIFY), from a background task that coalesces what piled up meanwhile into
one autocommitted statement with synchronous_commit off, at most one every NOTIFY_GAP_SECONDS (5 ms:
the first change after a quiet spell is told at once). (A NOTIFY inside the data transaction would
serialize every committing sender on PostgreSQL's global notify lock, held through the commit's WAL
flush.) An ack notifies only while the queue's in-flight ceiling is within IN_FLIGHT_NOTIFY_MARGIN
of max_in_flight (the statement reads it): only then can a receiver elsewhere be held by the limit.
A receiver that got OverLimit had just counted at least max_in_flight live leases and recorded that
count as the ceiling, which grows with every grant until the next count, so the first ack after it
sees the ceiling at the limit and notifies; an ack that read the queue's row before that count
committed notifies while its ceiling was within the margin of it (a margin's worth of grants would
have to commit during that one statement to miss). The waiter's own timer (the earliest lease end)
and the safety wake-up below bound what a missed one costs. One connection per replica LISTENs and
calls the subscribers (`subscribe`) with the queue's name; its own notifications are ignored (the
service already woke its waiters). When the listening connection is lost, or every
FALLBACK_WAKE_SECONDS in any case, subscribers are called with None: "anything may have changed", a
slow safety net for notifications lost on the way.

Queue configurations
--------------------
The service reads a queue's configuration (get_queue) before every send and receive, to check the
request against it. A replica answers that from memory (queue_infos.py) while its LISTEN
connection is up: create, update and delete of a queue notify inside their own transaction (the
payload ``config <replica> <queue>``), and every replica drops its entry when it hears of the commit. So a
replica may use a configuration older than the newest committed one only until its listener hears
of the change (milliseconds), never an entry older than QUEUE_INFO_SECONDS, and none at all while
its listener is down. The statements of the store read the queue's row themselves, as they run.

Failures
--------
A lost connection, a database restart, an exhausted pool: the RPC fails with
`errors.Unavailable` (UNAVAILABLE with RetryInfo). When the failure happened before COMMIT was
sent the transaction cannot have committed, so the store first checks the pool (dropping dead
connections) and retries on a fresh connection: after `pg_terminate_backend` most callers notice
nothing. The pool reconnects by itself; the listener reconnects with backoff.

Modules
-------
    settings.py       tunables and the URL (parse_url, with_pool_size)
    schema.py         MIGRATIONS and _migrate
    statements.py     the SQL texts (module constants: the query-plan tests check these texts)
    connection.py     the first connection, the database's clock, failures as one line
    transaction.py    _Tx: one operation's transaction, the rows it reads
    notifications.py  ChangeFeed: NOTIFY after commit, LISTEN, the safety-net wake-up
    queue_infos.py    get_queue's answers kept while changes are heard
    sending.py        sends: the one-statement send, dedup claims
    receiving.py      receives: the one-statement receive, attempts, dead letters, in flight
    leasing.py        ChangeVisibility, DeleteMessages, UpdateMessage, redrive
    maintenance.py    housekeeping and the planner statistics check
    store.py          PostgresStore, the Store facade (its constants passed in: settings.Tuning)
"""

from __future__ import annotations

from .connection import DatabaseClock
from .schema import MIGRATIONS, SCHEMA_VERSION
from .settings import (
    AUTOVACUUM_THRESHOLD,
    DEFAULT_POOL_MAX,
    DEFAULT_POOL_MIN,
    DEFAULT_SCHEMA,
    DEFAULT_TUNING,
    IN_FLIGHT_NOTIFY_MARGIN,
    PLANNER_SETTINGS,
    STATS_CHECK_SECONDS,
    SWEEP_LIMIT,
    PostgresSettings,
    Tuning,
    parse_url,
    with_pool_size,
)
from .statements import (
    ATTEMPT_LEASES_SQL,
    BACKOFF_ENDED_SQL,
    CUSTOM_PLAN_SQL,
    DEAD_LETTER_SQL,
    DELETE_ATTEMPT_SQL,
    DELETE_KEYS_SQL,
    DELETE_RECEIPTS_SQL,
    DELIVER_KEYS_SQL,
    END_BACKOFFS_SQL,
    GENERIC_PLAN_SQL,
    IN_FLIGHT_SQL,
    INSERT_MESSAGES_SQL,
    LEASES_BY_KEY_SQL,
    MARK_BACKOFF_SQL,
    NEXT_VISIBLE_SQL,
    PEEK_KEYS_SQL,
    PURGE_SQL,
    REDRIVE_SQL,
    SEND_BODIES_SQL,
    SEND_SQL,
    SIZED_COLUMNS,
    STATS_SQL,
    SWEEP_SQL,
    TOMBSTONES_BY_KEY_SQL,
    WRITE_LEASES_SQL,
    _channel_clause,
    candidates_sql,
    deliver_sql,
    open_queue_sql,
    peek_sql,
    receive_sql,
)
from .store import PostgresStore

# Tests read the SQL texts and tunables through the package: every imported name is exported.
__all__ = [
    "ATTEMPT_LEASES_SQL",
    "AUTOVACUUM_THRESHOLD",
    "BACKOFF_ENDED_SQL",
    "CUSTOM_PLAN_SQL",
    "DEAD_LETTER_SQL",
    "DEFAULT_POOL_MAX",
    "DEFAULT_POOL_MIN",
    "DEFAULT_SCHEMA",
    "DEFAULT_TUNING",
    "DELETE_ATTEMPT_SQL",
    "DELETE_KEYS_SQL",
    "DELETE_RECEIPTS_SQL",
    "DELIVER_KEYS_SQL",
    "DatabaseClock",
    "END_BACKOFFS_SQL",
    "GENERIC_PLAN_SQL",
    "INSERT_MESSAGES_SQL",
    "IN_FLIGHT_NOTIFY_MARGIN",
    "IN_FLIGHT_SQL",
    "LEASES_BY_KEY_SQL",
    "MARK_BACKOFF_SQL",
    "MIGRATIONS",
    "NEXT_VISIBLE_SQL",
    "PEEK_KEYS_SQL",
    "PLANNER_SETTINGS",
    "PURGE_SQL",
    "PostgresSettings",
    "PostgresStore",
    "REDRIVE_SQL",
    "SCHEMA_VERSION",
    "SEND_BODIES_SQL",
    "SEND_SQL",
    "SIZED_COLUMNS",
    "STATS_CHECK_SECONDS",
    "STATS_SQL",
    "SWEEP_LIMIT",
    "SWEEP_SQL",
    "TOMBSTONES_BY_KEY_SQL",
    "Tuning",
    "WRITE_LEASES_SQL",
    "_channel_clause",
    "candidates_sql",
    "deliver_sql",
    "open_queue_sql",
    "parse_url",
    "peek_sql",
    "receive_sql",
    "with_pool_size",
]
