"""A receive's pick in one row (schema.picked_sql) and its delivered rows (DELIVERED_COLUMNS):
delivery order is (visible_at, key) whichever way the keys are read, the byte limit still cuts
after the message that reaches it, and the rarely set fields come back whole."""

from __future__ import annotations

from pathlib import Path

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import (
    AllDeleted,
    LeaseStatus,
    NewMessage,
    QueueConfig,
    VisibilityChange,
)
from leaseq.server.store.sqlite import SqliteStore
from leaseq.server.store.sqlite import schema as s

from .conftest import read_only

LEASE = 60.0


async def _mixed_order_queue(store: SqliteStore, clock: FakeClock) -> None:
    """Keys 1-10 whose visible order is not key order: 4, 5, 6-10, then 2."""
    await store.create_queue("q", QueueConfig())
    await store.send_bodies("q", [b"%d" % n for n in range(1, 6)])  # keys 1-5, visible at t0
    clock.advance(1)
    await store.send_bodies("q", [b"%d" % n for n in range(6, 11)])  # keys 6-10, t0 + 1
    held = (await store.receive("q", 3, LEASE)).messages  # keys 1-3
    assert [m.key for m in held] == [1, 2, 3]
    clock.advance(1)
    # Released at t0 + 2: key 2 is now the last visible message.
    [released] = await store.change_visibility("q", [VisibilityChange(held[1].receipt, 0.0)])
    assert released.status is LeaseStatus.OK


async def test_a_receive_delivers_by_visible_time_then_key(
    store: SqliteStore, clock: FakeClock
) -> None:
    await _mixed_order_queue(store, clock)
    outcome = await store.receive("q", 10, LEASE)
    assert [m.key for m in outcome.messages] == [4, 5, 6, 7, 8, 9, 10, 2]
    assert [m.body for m in outcome.messages] == [b"4", b"5", b"6", b"7", b"8", b"9", b"10", b"2"]
    assert {m.visible_at for m in outcome.messages} == {clock.now() + LEASE}
    assert [m.delivery_count for m in outcome.messages] == [1] * 7 + [2]


async def test_the_byte_limit_cuts_after_the_message_that_reaches_it(
    store: SqliteStore, clock: FakeClock
) -> None:
    await _mixed_order_queue(store, clock)
    # Bodies of 1 byte: the third message reaches 3 bytes, so the cut comes after it.
    first = await store.receive("q", 10, LEASE, max_bytes=3)
    assert [m.key for m in first.messages] == [4, 5, 6]
    rest = await store.receive("q", 10, LEASE, max_bytes=1_000)
    assert [m.key for m in rest.messages] == [7, 8, 9, 10, 2]
    assert (await store.receive("q", 10, LEASE)).messages == []


async def test_rarely_set_fields_come_back_whole(store: SqliteStore, clock: FakeClock) -> None:
    await store.create_queue("q", QueueConfig())
    attributes = {"kind": "order", "note": 'quote " and \\ and \u00e9\n'}
    await store.send(
        "q",
        [
            NewMessage(b"plain"),
            NewMessage(b"rich", attributes=attributes, channel="eu/orders"),
            NewMessage(b"chan", channel="x"),
        ],
    )
    held = (await store.receive("q", 3, LEASE)).messages
    # A release with a reason: last_error is set on the next delivery.
    await store.change_visibility(
        "q", [VisibilityChange(m.receipt, 0.0, "failed: \u2603") for m in held[:1]]
    )
    again = await store.receive("q", 3, LEASE, attempt_id="a1")
    [plain] = again.messages
    assert (plain.body, plain.attributes, plain.channel, plain.last_error) == (
        b"plain",
        {},
        "",
        "failed: \u2603",
    )
    rich, chan = held[1], held[2]
    assert (rich.attributes, rich.channel, rich.last_error) == (attributes, "eu/orders", "")
    assert (chan.attributes, chan.channel) == ({}, "x")
    # The attempt's replay reads the same rows, each with its own visible_at.
    clock.advance(1)
    replay = await store.receive("q", 3, LEASE, attempt_id="a1")
    assert replay.messages == again.messages


async def test_a_full_ack_answers_without_a_result_object_per_receipt(
    store: SqliteStore,
) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send_bodies("q", [b"a", b"b", b"c"])
    held = (await store.receive("q", 3, LEASE)).messages
    receipts = [m.receipt for m in reversed(held)]  # any order: each result is its receipt's
    outcome = await store.delete("q", receipts)
    assert isinstance(outcome.results, AllDeleted)
    assert [(r.receipt, r.status, r.key) for r in outcome.results] == [
        (m.receipt, LeaseStatus.OK, m.key) for m in reversed(held)
    ]
    assert outcome.results[1:] == list(outcome.results)[1:]
    assert sorted(outcome.deleted_keys) == [1, 2, 3]
    # Again: now every receipt answers ALREADY_DELETED, one result each.
    again = await store.delete("q", receipts)
    assert [r.status for r in again.results] == [LeaseStatus.ALREADY_DELETED] * 3


def test_the_one_row_pick_reads_an_index_range_without_sorting(
    store: SqliteStore, db_path: Path
) -> None:
    for channel_filter, index in (("", "messages_visible"), ("orders", "messages_channel")):
        sql = s.picked_sql(s._channel_clause(channel_filter)[0])
        with read_only(db_path) as conn:
            plan = [
                row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", [1] * sql.count("?"))
            ]
        # The subquery is a co-routine (not flattened into the aggregate): its rows reach
        # json_group_array in its ORDER BY order.
        assert plan[0].startswith("CO-ROUTINE"), plan
        assert any(step.startswith(f"SEARCH messages USING INDEX {index}") for step in plan), plan
        assert not any("TEMP B-TREE" in step for step in plan), plan
