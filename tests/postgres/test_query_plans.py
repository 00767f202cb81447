"""The hot statements search indexes: no Seq Scan of messages or tombstones, no Sort of a queue.

The plans are those of the store's own SQL text (module constants and builders of postgres.py)
on its real schema, over a backlog of BACKLOG messages spread over queues of different sizes and
ANALYZEd. Each statement is checked with the generic plan (psycopg prepares a statement after a
few runs, and PostgreSQL then may settle on a plan made without the parameters' values) and with
a custom plan, in a session set up as the store sets up its own (`postgres.PLANNER_SETTINGS`).

The same checks run after the sequence that once collapsed receive throughput (a small queue's
cycle, DeleteQueue, VACUUM ANALYZE of a table left nearly empty, then a backlog that the
statistics do not know of): the store plans every execution anew (force_custom_plan), and those
plans must not read the whole table.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import NewMessage, QueueConfig, VisibilityChange
from leaseq.server.store import postgres as pg
from leaseq.server.store.postgres import PostgresStore
from tests.support.postgres import connect

BACKLOG = 20_000
PLAN_MODES = ("force_generic_plan", "force_custom_plan")


def _numbered(query: str) -> tuple[str, list[str]]:
    """psycopg's %(name)s (or %(name)b) placeholders as $1, $2...; the names in number order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return re.sub(r"%\((\w+)\)[sb]", number, query), names


def _store_session(schema: str) -> psycopg.Connection:
    """A connection set up like the store's own (search_path, PLANNER_SETTINGS)."""
    settings = {"search_path": schema, **pg.PLANNER_SETTINGS}
    options = " ".join(f"-c {name}={value}" for name, value in settings.items())
    return connect(options=options, prepare_threshold=None)


def _plan(conn: psycopg.Connection, mode: str, query: str, params: dict[str, Any]) -> dict:
    return _explain(conn, mode, query, params)["Plan"]


def _explain(conn: psycopg.Connection, mode: str, query: str, params: dict[str, Any]) -> dict:
    """EXPLAIN's whole JSON document of the prepared statement (the plan, and JIT when the
    statement would be compiled)."""
    text, names = _numbered(query)
    conn.execute(f"SET plan_cache_mode = {mode}")
    conn.execute(sql.SQL("PREPARE hot AS {}").format(sql.SQL(text)))
    try:
        args = sql.SQL(", ").join(sql.Literal(params[name]) for name in names)
        explain = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE hot") + (
            sql.SQL("({})").format(args) if names else sql.SQL("")
        )
        [[document]] = conn.execute(explain).fetchall()
    finally:
        conn.execute("DEALLOCATE hot")
    return (document if isinstance(document, list) else json.loads(document))[0]


def _nodes(plan: dict) -> list[dict]:
    found = [plan]
    for child in plan.get("Plans", ()):
        found += _nodes(child)
    return found


def _describe(plan: dict) -> list[str]:
    return [
        f"{n['Node Type']} {n.get('Index Name', n.get('Relation Name', ''))}".strip()
        for n in _nodes(plan)
    ]


@pytest.fixture
async def backlog(schema: str, url: str):
    """A store with queues big and small, leased, delivered, deleted and channel messages;
    its tables ANALYZEd. Yields (connection with the store's search_path, parameters)."""
    clock = FakeClock()
    store = PostgresStore.from_url(url, clock=clock)
    await store.open()
    try:
        for name in ("work", "other", "tiny", "dead"):
            await store.create_queue(name, QueueConfig())
        body = b"x" * 100
        for _ in range(BACKLOG // 5_000 - 1):
            await store.send("work", [NewMessage(body=body) for _ in range(5_000)])
        await store.send("other", [NewMessage(body=body, channel="orders") for _ in range(4_000)])
        await store.send("other", [NewMessage(body=body) for _ in range(1_000)])
        await store.send("tiny", [NewMessage(body=body) for _ in range(5)])
        clock.advance(1)
        leased = await store.receive("work", 1_000, 60.0, attempt_id="attempt-1")
        acked = await store.receive("work", 5_000, 60.0)
        await store.delete("work", [m.receipt for m in acked.messages])
        await store.receive("other", 500, 60.0, channel_filter="orders")
        keys = [m.key for m in leased.messages[:100]]
        deleted_keys = [m.key for m in acked.messages[:100]]
        now = clock.now()
        with _store_session(schema) as conn:
            conn.execute("ANALYZE")
            [work, uid] = conn.execute("SELECT id, uid FROM queues WHERE name = 'work'").fetchone()
            params = {
                "name": "work",
                "queue": work,
                "uid": uid,
                "now": now,
                "limit": 100,
                "until": now + 30,
                "leased": True,
                "attempt": "attempt-1",
                "channel": "orders",
                "keys": keys,
                "deleted_keys": deleted_keys,
                "after_visible_at": now - 1,
                "after_key": keys[0],
                "max_bytes": 1 << 20,
            }
            yield conn, params
    finally:
        await store.close()


# The leading column of each index the statements use.
LEADING = {
    "messages_pkey": "key",
    "messages_visible": "queue",
    "messages_expiry": "queue",
    "messages_leased": "queue",
    "messages_attempt": "queue",
    "messages_channel": "queue",
    "messages_enqueued": "queue",
    "messages_backoff": "queue",
    "tombstones_pkey": "key",
}

EXACT = pg._channel_clause("orders")
PREFIX = pg._channel_clause("ord*")

# name -> (sql, index that must appear in the plan, whether the statement picks in order)
STATEMENTS: dict[str, tuple[str, str, bool]] = {
    "open queue": (pg.open_queue_sql(), "messages_expiry", False),
    "open queue for send": (pg.open_queue_sql("FOR KEY SHARE"), "messages_expiry", False),
    "open queue for receive": (pg.open_queue_sql(ceiling=True), "messages_expiry", False),
    "expiry sweep": (pg.SWEEP_SQL, "messages_expiry", False),
    "receive": (pg.deliver_sql(), "messages_visible", True),
    "receive, exact channel": (pg.deliver_sql(EXACT), "messages_channel", True),
    "receive, channel prefix": (pg.deliver_sql(PREFIX), "messages_visible", True),
    # Byte-limited: the running size sorts the picked candidates again (at most the limit's
    # rows), so only the index is checked; the queue is still read in messages_visible order.
    "receive, byte-limited": (pg.deliver_sql(sized=True), "messages_visible", False),
    "receive candidates": (pg.candidates_sql(), "messages_visible", True),
    "receive candidates, next page": (pg.candidates_sql(after=True), "messages_visible", True),
    "deliver by keys": (pg.DELIVER_KEYS_SQL, "messages_pkey", False),
    "in-flight count": (pg.IN_FLIGHT_SQL, "messages_leased", False),
    "next visible": (pg.NEXT_VISIBLE_SQL, "messages_visible", False),
    "attempt replay": (pg.ATTEMPT_LEASES_SQL, "messages_attempt", False),
    "leases by key": (pg.LEASES_BY_KEY_SQL, "messages_pkey", False),
    "tombstones by key": (pg.TOMBSTONES_BY_KEY_SQL, "tombstones_pkey", False),
    "delete by keys": (pg.DELETE_KEYS_SQL, "messages_pkey", False),
    "delete by attempt": (pg.DELETE_ATTEMPT_SQL, "messages_attempt", False),
    "peek": (pg.peek_sql(False, False), "messages_visible", True),
    "peek, next page": (pg.peek_sql(True, True, after=True), "messages_visible", True),
    "peek, exact channel": (pg.peek_sql(False, False, EXACT), "messages_channel", True),
    "peek sizes": (pg.peek_sql(False, False, columns=pg.SIZED_COLUMNS), "messages_visible", True),
    "peek page by keys": (pg.PEEK_KEYS_SQL, "messages_pkey", False),
    # GetQueueStats (and every metrics scrape): counters, and only the leased, delayed and
    # expired messages; the oldest visible one by messages_enqueued.
    "stats": (pg.STATS_SQL, "messages_enqueued", False),
    # One statement per RPC (the usual send, receive and ack): the queue's row first, then the
    # same work as above.
    "receive, one statement": (pg.receive_sql(), "messages_visible", True),
    "receive, one statement, exact channel": (pg.receive_sql(EXACT), "messages_channel", True),
    "receive, one statement, byte-limited": (pg.receive_sql(sized=True), "messages_visible", False),
    "send, one statement": (pg.SEND_SQL, "messages_expiry", False),
    "send of bodies, one statement": (pg.SEND_BODIES_SQL, "messages_expiry", False),
    "ack, one statement": (pg.DELETE_RECEIPTS_SQL, "messages_pkey", False),
    # Change visibility, releases, nacks: an UPDATE joined to an unnest of the keys (a join
    # order is the planner's choice: it must stay a probe of the primary key per key).
    "write leases": (pg.WRITE_LEASES_SQL, "messages_pkey", False),
    # A queue with a retry policy: its ended leases (the partial index of such leases only),
    # turned into delays, and the mark a delivery's leases get.
    "ended backoff leases": (pg.BACKOFF_ENDED_SQL, "messages_backoff", False),
    "end backoffs": (pg.END_BACKOFFS_SQL, "messages_pkey", False),
    "mark backoffs": (pg.MARK_BACKOFF_SQL, "messages_pkey", False),
}


ONE_STATEMENT = tuple(name for name in STATEMENTS if "one statement" in name)


def _values(name: str, params: dict[str, Any]) -> dict[str, Any]:
    values = dict(params)
    if name == "tombstones by key":
        # Looked up only for receipts whose message is gone (a retried ack): a few.
        values["keys"] = params["deleted_keys"][:5]
    if name in ONE_STATEMENT:
        n = len(values["keys"])
        values.update(
            timeout=30.0,
            seqs=[1] * n,
            margin=pg.IN_FLIGHT_NOTIFY_MARGIN,
            message_ids=[f"m{i}" for i in range(n)],
            bodies=[b"x"] * n,
            attributes=[None] * n,
            channels=[""] * n,
            ttls=[None] * n,
            delays=[None] * n,
        )
    if name == "write leases":
        n = len(values["keys"])
        values.update(
            visibles=[params["until"]] * n,
            leased=[True] * n,
            backoffs=[False] * n,
            errors=[""] * n,
            clear=[False] * n,
        )
    if name == "end backoffs":
        values.update(visibles=[params["until"]] * len(values["keys"]))
    return values


def _problems(
    conn: psycopg.Connection, mode: str, params: dict[str, Any], only: tuple[str, ...] = ()
) -> list[str]:
    problems = []
    for name, (query, index, ordered) in STATEMENTS.items():
        if only and name not in only:
            continue
        values = _values(name, params)
        plan = _plan(conn, mode, query, values)
        nodes = _nodes(plan)
        steps = _describe(plan)
        seq_scans = [
            n
            for n in nodes
            if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in ("messages", "tombstones")
        ]
        # An index read end to end (no condition) is a Seq Scan by another name: a join once
        # read all of messages through its primary key, once per picked row.
        unbounded = [
            n
            for n in nodes
            if n["Node Type"] in ("Index Scan", "Index Only Scan")
            and n.get("Relation Name") in ("messages", "tombstones")
            and "Index Cond" not in n
        ]
        # An index searched without its leading column is read end to end, once per value of
        # an ANY(array): messages_visible holds key too, and a receive once took 20 s so.
        headless = [
            n
            for n in nodes
            if n.get("Index Name") in LEADING
            and not re.search(rf"\b{LEADING[n['Index Name']]}\b\s*(=|<|>)", n.get("Index Cond", ""))
        ]
        sorts = [n for n in nodes if n["Node Type"] == "Sort"]
        if seq_scans:
            problems.append(f"{name}: Seq Scan: {steps}")
        if unbounded or headless:
            problems.append(f"{name}: reads a whole index: {steps}")
        if not any(n.get("Index Name") == index for n in nodes):
            problems.append(f"{name}: not on {index}: {steps}")
        if ordered and sorts:
            problems.append(f"{name}: sorts instead of reading {index} in order: {steps}")
        conn.rollback()
    return problems


@pytest.mark.parametrize("mode", PLAN_MODES)
async def test_hot_statements_search_indexes(backlog, mode: str) -> None:
    conn, params = backlog
    problems = _problems(conn, mode, params)
    assert not problems, "\n".join(problems)


async def test_no_hot_statement_is_jit_compiled(backlog) -> None:
    """A path that enable_sort / enable_seqscan disable still costs 10^10 when it is the only
    one (the byte-limited receive sorts its candidates), above every jit_*_above_cost: with JIT
    on (PostgreSQL's default) that receive spent about 1 s compiling on every execution. The
    store's sessions turn JIT off (PLANNER_SETTINGS)."""
    conn, params = backlog
    compiled = [
        name
        for name, (query, _, _) in STATEMENTS.items()
        if "JIT" in _explain(conn, "force_custom_plan", query, _values(name, params))
    ]
    assert not compiled, f"JIT-compiled on every execution: {compiled}"


@pytest.fixture
async def vacuumed_nearly_empty(schema: str, url: str, monkeypatch):
    """The sequence that once collapsed the receive plan, on one schema: a batch-1 cycle on a small queue, DeleteQueue, VACUUM
    ANALYZE of the schema's tables (messages is left nearly empty: its statistics say so), then
    a producer's backlog on a new queue, some of it leased, delivered and deleted, with no
    ANALYZE since. Yields (store session, parameters, store)."""
    # The store's own check (refresh_statistics) runs when the test says, not on its timer.
    clock = FakeClock()
    store = PostgresStore.from_url(url, clock=clock, tuning=pg.Tuning(stats_check_seconds=3600.0))
    await store.open()
    try:
        await store.create_queue("small", QueueConfig())
        for _ in range(20):
            await store.send("small", [NewMessage(body=b"x")])
            got = await store.receive("small", 1, 30.0)
            await store.delete("small", [m.receipt for m in got.messages])
        await store.delete_queue("small")
        with connect(options=f"-c search_path={schema}") as admin:
            for table in ("messages", "tombstones", "queues", "queue_counters", "dedup"):
                admin.execute(f"VACUUM ANALYZE {table}")
        await store.create_queue("work", QueueConfig())
        await store.create_queue("other", QueueConfig())
        for _ in range(BACKLOG // 5_000):
            await store.send("work", [NewMessage(body=b"x" * 100) for _ in range(5_000)])
        await store.send("other", [NewMessage(body=b"x", channel="orders") for _ in range(100)])
        clock.advance(1)
        leased = await store.receive("work", 1_000, 60.0, attempt_id="attempt-1")
        acked = await store.receive("work", 1_000, 60.0)
        await store.delete("work", [m.receipt for m in acked.messages])
        await store.change_visibility("work", [VisibilityChange(leased.messages[0].receipt, 120.0)])
        # The store's own sessions plan every execution anew.
        setting = await store._run(
            lambda tx: tx.row("SELECT current_setting('plan_cache_mode')", {})
        )
        assert setting == ("force_custom_plan",)
        await _until_counted(schema, 4 * BACKLOG // 5)
        now = clock.now()
        with _store_session(schema) as conn:
            [work, uid] = conn.execute("SELECT id, uid FROM queues WHERE name = 'work'").fetchone()
            keys = [m.key for m in leased.messages[:100]]
            params = {
                "name": "work",
                "queue": work,
                "uid": uid,
                "now": now,
                "limit": 1000,
                "until": now + 30,
                "leased": True,
                "attempt": "attempt-1",
                "channel": "orders",
                "keys": keys,
                "deleted_keys": [m.key for m in acked.messages[:100]],
                "max_bytes": 8 << 20,
                "after_visible_at": now - 1,
                "after_key": keys[0],
            }
            yield conn, params, store
    finally:
        await store.close()


async def _until_counted(schema: str, rows: int) -> None:
    """Until PostgreSQL's activity statistics count rows live rows in messages (backends
    report them within about a second)."""
    with connect(options=f"-c search_path={schema}") as conn:
        for _ in range(200):
            [[live]] = conn.execute(
                "SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'messages'::regclass"
            ).fetchall()
            if live >= rows:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"the statistics never counted {rows} live rows")


def _reltuples(conn: psycopg.Connection) -> float:
    [[tuples]] = conn.execute(
        "SELECT reltuples FROM pg_class WHERE oid = 'messages'::regclass"
    ).fetchall()
    return tuples


# Every hot statement, the receive path first (written to need no statistics), keeps its index
# plan while pg_class still says "empty" (before the store notices and ANALYZEs): acks, lease
# changes and sends run in that window too.


async def test_the_receive_path_needs_no_statistics(vacuumed_nearly_empty) -> None:
    conn, params, _ = vacuumed_nearly_empty
    assert _reltuples(conn) < 10, "the sequence should leave messages' statistics nearly empty"
    problems = _problems(conn, "force_custom_plan", params)
    # The one-statement operations keep one generic plan per connection (GENERIC_PLAN_SQL),
    # possibly made in this very state: it must be the index plan too.
    problems += _problems(conn, "force_generic_plan", params, only=ONE_STATEMENT)
    assert not problems, "\n".join(problems)
    # The update of the picked rows has one plan whatever the statistics: by ctid.
    for name in (
        "receive",
        "receive, exact channel",
        "receive, channel prefix",
        "receive, one statement",
        "receive, one statement, exact channel",
    ):
        plan = _plan(conn, "force_custom_plan", STATEMENTS[name][0], _values(name, params))
        assert "Tid Scan" in {n["Node Type"] for n in _nodes(plan)}, (name, _describe(plan))


async def test_the_store_refreshes_statistics_that_say_empty(vacuumed_nearly_empty) -> None:
    conn, params, store = vacuumed_nearly_empty
    assert _reltuples(conn) < 10
    assert await store.refresh_statistics()
    assert _reltuples(conn) >= BACKLOG // 2
    assert not await store.refresh_statistics()  # now close enough: nothing to do
    problems = _problems(conn, "force_custom_plan", params)
    assert not problems, "\n".join(problems)


async def test_messages_table_is_vacuumed_by_dead_rows_not_by_size(backlog) -> None:
    conn, _ = backlog
    [[options]] = conn.execute(
        "SELECT reloptions FROM pg_class WHERE oid = 'messages'::regclass"
    ).fetchall()
    assert "autovacuum_vacuum_scale_factor=0" in options
    assert f"autovacuum_vacuum_threshold={pg.AUTOVACUUM_THRESHOLD}" in options


@pytest.mark.parametrize("mode", PLAN_MODES)
async def test_stats_reads_its_ranges_with_index_scans(backlog, mode: str) -> None:
    """GetQueueStats reads only the leased, delayed and expired messages (and the oldest visible
    one), with Index Scans: a Bitmap Heap Scan never marks the entries of deleted rows dead, so
    after a burst of acks every stats call visited the heap of every acked message again."""
    conn, params = backlog
    nodes = _nodes(_plan(conn, mode, pg.STATS_SQL, params))
    on_messages = {
        (n["Node Type"], n.get("Index Name"))
        for n in nodes
        if n.get("Relation Name") == "messages" or n.get("Index Name", "").startswith("messages_")
    }
    assert on_messages == {
        ("Index Scan", "messages_visible"),
        ("Index Scan", "messages_expiry"),
        ("Index Scan", "messages_enqueued"),
    }, _describe(_plan(conn, mode, pg.STATS_SQL, params))
