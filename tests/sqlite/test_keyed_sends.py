"""SqliteStore.send_keyed at write_queue's batch sizes: the dedup records of a batch go in by
multi-row INSERT statements (100, 10, 1 rows), each record naming its own message, and a
batch sent again answers every original in place."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import QueueConfig
from leaseq.server.store.sqlite import SqliteStore

from .conftest import read_only


def _records(path: Path) -> dict[str, tuple[str, float]]:
    with read_only(path) as conn:
        return {
            d: (m, until)
            for d, m, until in conn.execute("SELECT dedup_id, message_id, until FROM dedup")
        }


async def test_a_large_batch_and_its_repeat(
    store: SqliteStore, db_path: Path, clock: FakeClock
) -> None:
    await store.create_queue("q", QueueConfig(dedup_window=60.0))
    n = 1234  # 12 statements of 100 rows, 3 of 10, 4 of 1
    bodies = [b"body %d" % i for i in range(n)]
    dedup_ids = [f"w:{i % 3}:{i}" for i in range(n)]
    first, duplicates = await store.send_keyed("q", bodies, dedup_ids)
    assert duplicates == [] and len(set(first)) == n
    assert _records(db_path) == {d: (m, clock.now() + 60.0) for d, m in zip(dedup_ids, first)}

    clock.advance(30)
    # The same ids again, reversed, with two new ones and an entry without a dedup id.
    again_ids = ["new 1", *reversed(dedup_ids), "", "new 2"]
    again, duplicates = await store.send_keyed("q", [b"x"] * len(again_ids), again_ids)
    assert duplicates == list(range(1, n + 1))
    assert again[1 : n + 1] == list(reversed(first))
    assert len({again[0], again[-2], again[-1], *first}) == n + 3
    stats = await store.stats("q")
    assert stats.visible == n + 3


async def test_records_past_their_window_are_replaced(
    store: SqliteStore, db_path: Path, clock: FakeClock
) -> None:
    """A record whose window is over but which the housekeeping has not removed yet is
    replaced by the new send's (a plain INSERT would fail on it)."""
    await store.create_queue("q", QueueConfig(dedup_window=10.0))
    dedup_ids = [f"id {i}" for i in range(150)]
    first, _ = await store.send_keyed("q", [b"a"] * 150, dedup_ids)
    clock.advance(10)
    assert len(_records(db_path)) == 150  # still kept
    second, duplicates = await store.send_keyed("q", [b"b"] * 150, dedup_ids)
    assert duplicates == [] and not set(first) & set(second)
    assert _records(db_path) == {d: (m, clock.now() + 10.0) for d, m in zip(dedup_ids, second)}


def test_the_insert_statements_are_well_formed() -> None:
    from leaseq.server.store.sqlite.sending import _insert_dedup_sql

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE dedup (queue, dedup_id, message_id, until)")
    for count in (1, 10, 100):
        values = [7, 99.5] + [f"{kind}{i}" for i in range(count) for kind in "dm"]
        conn.execute(_insert_dedup_sql("INSERT", count), values)
    rows = conn.execute("SELECT * FROM dedup").fetchall()
    assert len(rows) == 111
    assert rows[:2] == [(7, "d0", "m0", 99.5), (7, "d0", "m0", 99.5)]
    assert rows[-1] == (7, "d99", "m99", 99.5)
