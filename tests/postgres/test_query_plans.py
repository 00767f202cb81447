"""The hot statements search indexes: no Seq Scan of messages or tombstones, no Sort of a queue.

The plans are those of the store's own SQL text (module constants and builders of postgres.py)
on its real schema, over a backlog of BACKLOG messages spread over queues of different sizes and
ANALYZEd. Each statement is checked with the generic plan (psycopg prepares a statement after a
few runs, and PostgreSQL then may settle on a plan made without the parameters' values) and with
a custom plan.
"""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

from leaseq.server.clock import FakeClock
from leaseq.server.store import postgres as pg
from leaseq.server.store.base import NewMessage, QueueConfig
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


def _plan(conn: psycopg.Connection, mode: str, query: str, params: dict[str, Any]) -> dict:
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
    return (document if isinstance(document, list) else json.loads(document))[0]["Plan"]


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
        with connect(options=f"-c search_path={schema}", prepare_threshold=None) as conn:
            conn.execute("ANALYZE")
            [work] = conn.execute("SELECT id FROM queues WHERE name = 'work'").fetchone()
            params = {
                "name": "work",
                "queue": work,
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
}


@pytest.mark.parametrize("mode", PLAN_MODES)
async def test_hot_statements_search_indexes(backlog, mode: str) -> None:
    conn, params = backlog
    problems = []
    for name, (query, index, ordered) in STATEMENTS.items():
        values = dict(params)
        if name == "tombstones by key":
            # Looked up only for receipts whose message is gone (a retried ack): a few.
            values["keys"] = params["deleted_keys"][:5]
        plan = _plan(conn, mode, query, values)
        nodes = _nodes(plan)
        steps = _describe(plan)
        seq_scans = [
            n for n in nodes
            if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in ("messages", "tombstones")
        ]
        sorts = [n for n in nodes if n["Node Type"] == "Sort"]
        if seq_scans:
            problems.append(f"{name}: Seq Scan: {steps}")
        if not any(n.get("Index Name") == index for n in nodes):
            problems.append(f"{name}: not on {index}: {steps}")
        if ordered and sorts:
            problems.append(f"{name}: sorts instead of reading {index} in order: {steps}")
        conn.rollback()
    assert not problems, "\n".join(problems)


async def test_messages_table_is_vacuumed_by_dead_rows_not_by_size(backlog) -> None:
    conn, _ = backlog
    [[options]] = conn.execute(
        "SELECT reloptions FROM pg_class WHERE oid = 'messages'::regclass"
    ).fetchall()
    assert "autovacuum_vacuum_scale_factor=0" in options
    assert f"autovacuum_vacuum_threshold={pg.AUTOVACUUM_THRESHOLD}" in options
