"""What the contract suite cannot see: how the PostgreSQL store gets its semantics.

- the expiry sweep is bounded per operation, and counts stay exact past the bound;
- the in-flight limit: far from it no live lease is counted, near it the count is exact;
- housekeeping deletes stale tombstone/dedup/attempt rows and changes no answer;
- the head of the queue after many deletes: what a receive reads, before and after VACUUM.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.limits import TOMBSTONE_SECONDS
from leaseq.server.domain.types import LeaseStatus, NewMessage, QueueConfig
from leaseq.server.errors import OverLimit
from leaseq.server.store import postgres as pg
from leaseq.server.store.postgres import PostgresStore
from tests.support.postgres import connect


def _count(schema: str, table: str) -> int:
    with connect() as conn:
        [[n]] = conn.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchall()
    return n


def _ceiling(schema: str) -> tuple[int, int]:
    with connect() as conn:
        [row] = conn.execute(f'SELECT leases_counted, grants_at_count FROM "{schema}".queues')
    return row


@pytest.mark.parametrize("tuning", [pg.Tuning(sweep_limit=3)])
async def test_expired_messages_past_the_sweep_bound_are_never_seen_and_always_counted(
    store: PostgresStore, clock: FakeClock, schema: str
) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"old", ttl=60.0) for _ in range(10)])
    await store.send("q", [NewMessage(body=b"new")])
    clock.advance(60)
    stats = await store.stats("q")  # sweeps 3, counts the other 7 as expired all the same
    assert (stats.visible, stats.total, stats.expired_total) == (1, 1, 10)
    assert _count(schema, "messages") == 8
    assert [m.body for m in (await store.receive("q", 10, 30.0)).messages] == [b"new"]
    assert [m.body for m in (await store.peek("q", 10, include_delayed=True)).messages] == []
    while _count(schema, "messages") > 1:
        await store.stats("q")
    assert (await store.stats("q")).expired_total == 10


@pytest.mark.parametrize("tuning", [pg.Tuning(sweep_limit=3)])
async def test_a_purge_counts_unswept_expired_messages_as_expired(
    store: PostgresStore, clock: FakeClock
) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"old", ttl=60.0) for _ in range(10)])
    await store.send("q", [NewMessage(body=b"new"), NewMessage(body=b"new")])
    clock.advance(60)
    assert await store.purge_queue("q") == 2
    stats = await store.stats("q")
    assert (stats.total, stats.expired_total, stats.deleted_total) == (0, 10, 0)


async def test_far_from_the_in_flight_limit_no_lease_is_counted(
    store: PostgresStore, schema: str
) -> None:
    await store.create_queue("q", QueueConfig(max_in_flight=100))
    await store.send("q", [NewMessage(body=b"m") for _ in range(150)])
    for _ in range(4):
        assert len((await store.receive("q", 20, 30.0)).messages) == 20
    assert _ceiling(schema) == (0, 0)  # 80 granted, ceiling 80: never counted
    # Near the limit: counted exactly (80 live), the remaining room delivered, then refused.
    assert len((await store.receive("q", 50, 30.0)).messages) == 20
    assert _ceiling(schema) == (80, 80)
    with pytest.raises(OverLimit) as refused:
        await store.receive("q", 1, 30.0)
    assert refused.value.limit == 100
    # Deliveries without a lease are not limited.
    assert len((await store.receive("q", 10, 0.0)).messages) == 10


async def test_in_flight_limit_counts_only_live_leases(
    store: PostgresStore, clock: FakeClock
) -> None:
    await store.create_queue("q", QueueConfig(max_in_flight=10))
    await store.send("q", [NewMessage(body=b"m") for _ in range(30)])
    first = (await store.receive("q", 10, 30.0)).messages
    with pytest.raises(OverLimit):
        await store.receive("q", 1, 30.0)
    await store.delete("q", [m.receipt for m in first[:4]])
    assert len((await store.receive("q", 10, 30.0)).messages) == 4
    clock.advance(30)  # every lease ended
    assert len((await store.receive("q", 10, 30.0)).messages) == 10


async def test_housekeeping_removes_stale_rows_and_changes_no_answer(
    store: PostgresStore, clock: FakeClock, schema: str
) -> None:
    await store.create_queue("q", QueueConfig(dedup_window=60.0))
    await store.send("q", [NewMessage(body=b"a", dedup_id="d1"), NewMessage(body=b"b")])
    [a, b] = (await store.receive("q", 2, 30.0, attempt_id="x")).messages
    await store.delete("q", [a.receipt])
    assert await store.housekeep() == 0  # nothing stale yet
    clock.advance(TOMBSTONE_SECONDS + 1)
    before = (await store.delete("q", [a.receipt])).results[0].status
    assert await store.housekeep() == 3  # the tombstone, the dedup record, the attempt record
    assert (_count(schema, "tombstones"), _count(schema, "dedup"), _count(schema, "attempts")) == (
        0,
        0,
        0,
    )
    after = (await store.delete("q", [a.receipt])).results[0].status
    assert before == after == LeaseStatus.MESSAGE_NOT_FOUND
    [again] = await store.send("q", [NewMessage(body=b"a2", dedup_id="d1")])
    assert not again.duplicate


def _receive_buffers(schema: str, queue_id: int, now: float) -> int:
    """Shared buffers the index scan of a receive of 100 touches (EXPLAIN ANALYZE, rolled
    back). Locking the rows costs a buffer or two per row on top, whatever the head."""
    with connect(options=f"-c search_path={schema}") as conn:
        conn.execute("BEGIN")
        [[document]] = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + pg.candidates_sql(),
            {"queue": queue_id, "now": now, "limit": 100},
        ).fetchall()
        conn.execute("ROLLBACK")  # EXPLAIN ANALYZE took the row locks
    plan = (document if isinstance(document, list) else json.loads(document))[0]["Plan"]
    while plan.get("Index Name") != "messages_visible":
        [plan] = plan["Plans"]
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


def _vacuumed_buffers(schema: str, settled_buffers: Callable[[], int], few: int) -> int:
    """VACUUM, then the buffers a receive reads. VACUUM removes only the rows that no open
    transaction of the database can still see: another session's long transaction (a benchmark
    beside the tests) holds them back, so VACUUM is repeated, for up to a minute, until the
    figure comes down to `few` or that time is spent (then the caller's assertion says so)."""
    deadline = time.monotonic() + 60
    while True:
        with connect() as conn:
            conn.execute(f'VACUUM "{schema}".messages')
        vacuumed = settled_buffers()
        if vacuumed <= few or time.monotonic() > deadline:
            return vacuumed
        time.sleep(1)  # another session's transaction: nothing here can signal its end


@pytest.mark.slow
async def test_the_head_of_the_queue_after_many_deletes(store: PostgresStore, schema: str) -> None:
    """Every delivery leaves a dead index entry at the head of messages_visible (the row's
    former version) and every ack a dead row. Index scans mark dead entries on their first visit
    and later scans skip them without visiting the heap, so what a receive reads grows by about
    a leaf page per couple of hundred unvacuumed deletes, not by a heap page per delete; VACUUM
    (the table's autovacuum runs after every AUTOVACUUM_THRESHOLD dead rows, whatever the table
    size; disabled here to look at the worst case) brings it back."""
    with connect() as conn:
        conn.execute(f'ALTER TABLE "{schema}".messages SET (autovacuum_enabled = false)')
    await store.create_queue("q", QueueConfig())
    for _ in range(8):
        await store.send("q", [NewMessage(body=b"x" * 100) for _ in range(5_000)])
    with connect() as conn:
        conn.execute(f'ANALYZE "{schema}".messages')  # what autovacuum's analyze would do
        [[queue_id]] = conn.execute(f'SELECT id FROM "{schema}".queues').fetchall()

    async def consume(count: int) -> None:
        for _ in range(count // 500):
            outcome = await store.receive("q", 500, 30.0)
            await store.delete("q", [m.receipt for m in outcome.messages])

    def settled_buffers() -> int:
        _receive_buffers(schema, queue_id, now)  # the first visit marks dead entries
        return _receive_buffers(schema, queue_id, now)

    now = store.clock.now()
    await consume(1_000)
    few = settled_buffers()
    deletes = 20_000
    await consume(deletes)
    many = settled_buffers()
    vacuumed = _vacuumed_buffers(schema, settled_buffers, few)
    print(
        f"buffers read by the index scan of a receive of 100: {few} after 1,000 deletes,"
        f" {many} after {1_000 + deletes:,}, {vacuumed} after VACUUM"
    )
    assert many - few < deletes / 100, (few, many)  # not a heap page per dead row
    assert vacuumed <= few, (few, vacuumed)
