"""What one send costs PostgreSQL: the store's send statements against pgmq's insert.

    python scripts/pg_send_cost.py [--dsn URL] [--batch 100] [--statements 3000] [--rounds 5]
                                   [--parts]

Each round runs four kinds of send, one after the other, each in a fresh schema made by the
store itself (its migrations and CreateQueue) and dropped afterwards: --statements statements of
--batch 100-byte bodies on one connection, each committed on its own, as

- bodies: SEND_BODIES_SQL, what `SendMessages` runs for messages that are only a body (the usual
          batch): prepared, generic plan, two arrays (ids, bodies);
- any:    SEND_SQL, what it runs when some message has attributes, a channel, a delay or a TTL:
          six arrays (here of NULLs and empty channels);
- bare:   the INSERT of `bodies` alone, without what the store adds around it: the queue row's
          lock and its expiry probe (a CTE), the channel-count trigger, messages_expiry;
- pgmq:   pgmq's send_batch INSERT, on a table shaped as pgmq's (the floor server's).

It prints, per round and as medians, the CPU that the database backend spent per message
(read from /proc: the database must run on this machine) and the wall time per statement.
bodies against bare is what leaseq adds to its INSERT; bare against pgmq is what leaseq's row
costs (its message id, attributes, channel, times and lease columns, the index that orders
receives and the one that finds stats' oldest message).

--parts splits those two gaps instead, one part taken away at a time: bodies, bare and pgmq as
above, and

- untriggered:  bodies without the channel-count trigger (what the trigger costs);
- unindexed:    bare without messages_enqueued, the index of stats' oldest visible message;
- anonymous:    bare without the message id (the column left NULL, none drawn or sent);
- lean:         bare without the message id and every index but the primary key and
                messages_visible: the two pgmq's table has (its key, its vt).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import time

import psycopg

from leaseq.bench.cpu import process_cpu_seconds
from leaseq.bench.launcher import store_for
from leaseq.bench.settings import DEFAULT_DSN
from leaseq.server.store.base import QueueConfig, new_message_ids
from leaseq.server.store.postgres import PostgresStore, parse_url
from leaseq.server.store.postgres.statements import (
    GENERIC_PLAN_SQL,
    SEND_BODIES_SQL,
    SEND_SQL,
)

# pgmq's table and INSERT as the floor server makes and runs them (scripts/ is on sys.path: the
# script's folder).
from floor_server import PGMQ_SEND_SQL, PGMQ_TABLE  # noqa: E402

KINDS = ("bodies", "any", "bare", "pgmq")
PARTS = ("bodies", "untriggered", "bare", "unindexed", "anonymous", "lean", "pgmq")

# The INSERT of SEND_BODIES_SQL alone: the queue's id, default delay and retention given.
BARE_SQL = """
    INSERT INTO messages (queue, message_id, body, channel, enqueued_at, expires_at, visible_at)
    SELECT %(queue)b, m.message_id, m.body, '', c.now, c.now + %(retention)b, c.now + %(delay)b
    FROM (SELECT extract(epoch FROM now())::float8 AS now) c,
         unnest(%(message_ids)b::text[], %(bodies)b::bytea[]) AS m(message_id, body)
"""
_UNTRIGGERED = "ALTER TABLE messages DISABLE TRIGGER channel_counts_insert"
BARE_SCHEMA = [_UNTRIGGERED, "DROP INDEX messages_expiry"]
# BARE_SQL without the message id, for a column that takes NULL.
ANONYMOUS_SQL = """
    INSERT INTO messages (queue, body, channel, enqueued_at, expires_at, visible_at)
    SELECT %(queue)b, m.body, '', c.now, c.now + %(retention)b, c.now + %(delay)b
    FROM (SELECT extract(epoch FROM now())::float8 AS now) c, unnest(%(bodies)b::bytea[]) AS m(body)
"""
_ANONYMOUS = [*BARE_SCHEMA, "ALTER TABLE messages ALTER COLUMN message_id DROP NOT NULL"]
# Each kind: the statements that shape its schema after the store's migrations (the send it runs
# is _run's: SEND_BODIES_SQL, SEND_SQL, BARE_SQL, ANONYMOUS_SQL or pgmq's).
SETUP: dict[str, list[str]] = {
    "bodies": [],
    "any": [],
    "untriggered": [_UNTRIGGERED],
    "bare": BARE_SCHEMA,
    "unindexed": [*BARE_SCHEMA, "DROP INDEX messages_enqueued"],
    "anonymous": _ANONYMOUS,
    "lean": [
        *_ANONYMOUS,
        *(f"DROP INDEX messages_{name}" for name in ("enqueued", "leased", "attempt", "channel")),
    ],
    "pgmq": PGMQ_TABLE,
}


async def _make_queue(url: str) -> None:
    """The store's tables in url's schema (its migrations), and the queue "q"."""
    store = PostgresStore.from_url(url)
    await store.open()
    try:
        await store.create_queue("q", QueueConfig())
    finally:
        await store.close()


def _backend_cpu_seconds(pid: int) -> float:
    seconds = process_cpu_seconds(pid)
    if seconds is None:
        raise SystemExit("pg_send_cost.py: the database's backend is not a process of this machine")
    return seconds


def _run(dsn: str, kind: str, batch: int, statements: int) -> tuple[float, float]:
    """(backend CPU µs per message, wall ms per statement) of one kind in a fresh schema."""
    config = QueueConfig()
    bodies = [secrets.token_bytes(100) for _ in range(batch)]
    with store_for("postgres", dsn, prefix="leaseq_send_cost") as url:
        asyncio.run(_make_queue(url))
        where = parse_url(url)
        with psycopg.connect(where.conninfo, autocommit=True, prepare_threshold=0) as conn:
            conn.execute(f'SET search_path TO "{where.schema}"')
            conn.execute(GENERIC_PLAN_SQL)
            for statement in SETUP[kind]:
                conn.execute(statement)
            row = conn.execute("SELECT id FROM queues WHERE name = 'q'").fetchone()
            assert row is not None
            queue_id = row[0]
            cursor = conn.cursor(binary=True)
            # What BARE_SQL and ANONYMOUS_SQL take instead of reading the queue's row.
            given = {
                "queue": queue_id, "retention": config.message_retention,
                "delay": config.default_delay, "bodies": bodies,
            }

            def send() -> None:
                if kind == "pgmq":
                    cursor.execute(PGMQ_SEND_SQL, (bodies,))
                    return
                if kind in ("anonymous", "lean"):
                    cursor.execute(ANONYMOUS_SQL, given)
                    return
                ids = new_message_ids(batch)
                if kind in ("bodies", "untriggered"):
                    cursor.execute(SEND_BODIES_SQL, {
                        "name": "q", "now": None, "message_ids": ids, "bodies": bodies,
                    })
                    cursor.fetchall()
                elif kind == "any":
                    cursor.execute(SEND_SQL, {
                        "name": "q", "now": None, "message_ids": ids, "bodies": bodies,
                        "attributes": [None] * batch, "channels": [""] * batch,
                        "ttls": [None] * batch, "delays": [None] * batch,
                    })
                    cursor.fetchall()
                else:
                    cursor.execute(BARE_SQL, {**given, "message_ids": ids})

            for _ in range(min(200, statements)):  # warm: prepared, caches filled
                send()
            pid = conn.info.backend_pid
            cpu_before = _backend_cpu_seconds(pid)
            started = time.perf_counter()
            for _ in range(statements):
                send()
            wall = time.perf_counter() - started
            cpu = _backend_cpu_seconds(pid) - cpu_before
    return cpu / (statements * batch) * 1e6, wall / statements * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn", default=os.environ.get("LEASEQ_BENCH_DSN", DEFAULT_DSN),
        help="the database that gets the fresh schemas (as leaseq bench's --dsn)",
    )
    parser.add_argument("--batch", type=int, default=100, help="messages per statement (100)")
    parser.add_argument("--statements", type=int, default=3000, help="per kind and round (3000)")
    parser.add_argument("--rounds", type=int, default=5, help="the kinds alternate (5)")
    parser.add_argument(
        "--parts", action="store_true",
        help="split the row's cost, one part taken away at a time (see the docstring)",
    )
    args = parser.parse_args()
    if args.batch < 1 or args.statements < 1 or args.rounds < 1:
        parser.error("--batch, --statements and --rounds take 1 or more")
    try:
        psycopg.connect(args.dsn, connect_timeout=10).close()
    except psycopg.Error as error:
        raise SystemExit(f"pg_send_cost.py: {' '.join(str(error).split())}") from None
    kinds = PARTS if args.parts else KINDS
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    wall: dict[str, list[float]] = {kind: [] for kind in kinds}
    print(f"batch {args.batch}, {args.statements} statements per kind and round")
    print(f"{'round':>5}  " + "  ".join(f"{kind + ' µs/msg':>18} {'ms/stmt':>8}" for kind in kinds))
    for round_number in range(1, args.rounds + 1):
        for kind in kinds:
            cpu_per_message, wall_per_statement = _run(
                args.dsn, kind, args.batch, args.statements
            )
            cpu[kind].append(cpu_per_message)
            wall[kind].append(wall_per_statement)
        print(f"{round_number:>5}  " + "  ".join(
            f"{cpu[kind][-1]:>18.2f} {wall[kind][-1]:>8.3f}" for kind in kinds
        ), flush=True)
    medians = {kind: statistics.median(cpu[kind]) for kind in kinds}
    print(f"{'median':>5}  " + "  ".join(
        f"{medians[kind]:>18.2f} {statistics.median(wall[kind]):>8.3f}" for kind in kinds
    ))
    if args.parts:
        print("backend CPU per message against pgmq: " + ", ".join(
            f"{kind} {_ratio(medians[kind], medians['pgmq'])}" for kind in kinds if kind != "pgmq"
        ))
        return
    bodies, any_, bare, pgmq = (medians[kind] for kind in KINDS)
    print(
        f"backend CPU per message: bodies / any {_ratio(bodies, any_)},"
        f" bodies / bare {_ratio(bodies, bare)}, bare / pgmq {_ratio(bare, pgmq)},"
        f" bodies / pgmq {_ratio(bodies, pgmq)}"
    )


def _ratio(part: float, whole: float) -> str:
    # The CPU clock ticks every 10 ms: a run that short may read none.
    return f"{part / whole:.2f}x" if whole else "n/a (too short to read the CPU)"


if __name__ == "__main__":
    sys.exit(main())
