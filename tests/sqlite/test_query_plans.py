"""The hot statements are index searches: no full SCAN of messages, no temporary sort.

The plans are read from the store's own file (its real schema) with the store's own SQL text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leaseq.server.store.sqlite import SqliteStore
from leaseq.server.store.sqlite import schema as s

from .conftest import read_only

ROWS = s.ROW_COLUMNS

# name -> (sql, the index its plan must search)
STATEMENTS = {
    "receive": (s.candidates_sql(ROWS), "messages_visible"),
    "receive, next page": (s.candidates_sql(ROWS, after=True), "messages_visible"),
    "receive, exact channel": (
        s.candidates_sql(ROWS, s._channel_clause("orders")[0]),
        "messages_channel",
    ),
    "receive, exact channel, next page": (
        s.candidates_sql(ROWS, s._channel_clause("orders")[0], after=True),
        "messages_channel",
    ),
    "receive, channel prefix": (
        s.candidates_sql(ROWS, s._channel_clause("ord*")[0]),
        "messages_visible",
    ),
    "message of a receipt": (s.leases_by_key_sql(3), "INTEGER PRIMARY KEY"),
    "in-flight count": (s.IN_FLIGHT_SQL, "COVERING INDEX messages_visible"),
    "next visible": (s.NEXT_VISIBLE_SQL, "messages_visible"),
    "attempt replay": (s.ATTEMPT_LEASES_SQL, "messages_attempt"),
    "expiry sweep": (s.SWEEP_SQL, "messages_expiry"),
    "deliver": (s.DELIVER_SQL, "INTEGER PRIMARY KEY"),
    "delete by current receipts": (s.DELETE_CURRENT_SQL, "INTEGER PRIMARY KEY"),
    "tombstone of a key": (s.TOMBSTONE_RUN_SQL, "INTEGER PRIMARY KEY"),
    "stats: oldest visible": (s.OLDEST_VISIBLE_SQL, "messages_enqueued"),
    "stats: oldest visible of a lifetime class": (s.OLDEST_IN_CLASS_SQL, "messages_expiry"),
}

# Steps that walk the JSON array of keys a statement is given (one per message named), and the
# sweep's and stats' small lookups (a queue's lifetime classes; the first entry of a class).
_JSON_ARRAY_STEPS = ("LIST SUBQUERY", "SCAN json_each VIRTUAL TABLE", "SCAN j VIRTUAL TABLE")
_SMALL_STEPS = ("SEARCH lifetimes USING PRIMARY KEY (queue=?)", "SCALAR SUBQUERY")


def _parameters(sql: str) -> int:
    numbered = [int(n) for n in re.findall(r"\?(\d+)", sql)]
    return max(numbered) if numbered else sql.count("?")


def _plan(path: Path, sql: str) -> list[str]:
    with read_only(path) as conn:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", [1] * _parameters(sql)).fetchall()
    return [row[-1] for row in rows]


@pytest.mark.parametrize("name", list(STATEMENTS))
async def test_hot_statement_searches_an_index(
    store: SqliteStore, db_path: Path, name: str
) -> None:
    sql, index = STATEMENTS[name]
    plan = _plan(db_path, sql)
    assert plan, plan
    assert all(
        step.startswith(
            (
                "SEARCH messages",
                "SEARCH tombstones",
                "SEARCH m USING INTEGER PRIMARY KEY",
                *_JSON_ARRAY_STEPS,
                *_SMALL_STEPS,
            )
        )
        for step in plan
    ), plan
    assert index in plan[0], plan
    assert not any("TEMP B-TREE" in step for step in plan), plan


async def test_stats_read_only_the_unavailable_messages(store: SqliteStore, db_path: Path) -> None:
    """Stats count leased and delayed messages on the messages_visible range after now (grouped
    by channel in a small temporary tree: one entry per channel), never the whole queue."""
    plan = _plan(db_path, s.UNAVAILABLE_SQL)
    assert plan[0].startswith("SEARCH messages USING INDEX messages_visible"), plan
    assert "visible_at>?" in plan[0], plan
    assert all(step.startswith(("SEARCH", "USE TEMP B-TREE FOR GROUP BY")) for step in plan), plan


async def test_receive_range_stops_at_now(store: SqliteStore, db_path: Path) -> None:
    """Leased messages at the head of the queue have visible_at > now: the range ends before
    them, so a receive never walks over them."""
    [step] = _plan(db_path, s.candidates_sql(ROWS))
    assert "(queue=? AND visible_at<?)" in step
