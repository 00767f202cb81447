"""Message groups on every store: FIFO queues (order within a group, one leased run per group)
and FAIR queues (receives spread over the groups), by the rules of leaseq.server.domain.groups."""

from __future__ import annotations

from collections import Counter

import pytest

from leaseq.server.domain.types import NewMessage, Ordering, VisibilityChange
from leaseq.server.errors import InvalidArgument
from leaseq.server.store.base import Store

from .conftest import DLQ, Q, make_queue, receive

FIFO = Ordering.FIFO
FAIR = Ordering.FAIR


async def _send(store: Store, queue: str, group: str, *bodies: str, **options: object) -> None:
    await store.send(queue, [NewMessage(b.encode(), group=group, **options) for b in bodies])


def _bodies(messages) -> list[str]:  # type: ignore[no-untyped-def]
    return [m.body.decode() for m in messages]


async def _ack(store: Store, messages) -> None:  # type: ignore[no-untyped-def]
    await store.delete(Q, [m.receipt for m in messages], [])


# --- FIFO -----------------------------------------------------------------------------------


async def test_fifo_delivers_a_group_in_send_order_and_blocks_it_while_leased(
    store: Store,
) -> None:
    await make_queue(store, Q, ordering=FIFO)
    await _send(store, Q, "a", "a1", "a2", "a3")
    await _send(store, Q, "b", "b1")
    await _send(store, Q, "a", "a4")
    first = await receive(store, Q, 2)
    # The oldest ready group's run first, as far as the room goes, in send order.
    assert _bodies(first) == ["a1", "a2"]
    assert [m.group for m in first] == ["a", "a"]
    assert first[0].sequence < first[1].sequence
    # Group a is blocked while a1 and a2 are leased: only b comes out.
    assert _bodies(await receive(store, Q, 10)) == ["b1"]
    assert await receive(store, Q, 10) == []
    await _ack(store, first[:1])
    assert await receive(store, Q, 10) == []  # a2 still leased
    await _ack(store, first[1:])
    again = await receive(store, Q, 10)
    assert _bodies(again) == ["a3", "a4"]
    assert first[1].sequence < again[0].sequence < again[1].sequence


async def test_fifo_one_group_fills_the_room_with_its_run(store: Store) -> None:
    await make_queue(store, Q, ordering=FIFO)
    await _send(store, Q, "a", "a1", "a2", "a3")
    await _send(store, Q, "b", "b1")
    got = await receive(store, Q, 5)
    # a's whole run, then b's: each group's messages together, in order.
    assert _bodies(got) == ["a1", "a2", "a3", "b1"]


async def test_fifo_a_released_or_expired_message_comes_back_before_the_rest(
    store: Store, clock
) -> None:
    await make_queue(store, Q, ordering=FIFO)
    await _send(store, Q, "g", "1", "2", "3")
    [one] = await receive(store, Q, 1)
    [result] = await store.change_visibility(Q, [VisibilityChange(one.receipt, 0.0)])
    assert result.status.name == "OK"
    again = await receive(store, Q, 1, vt=10.0)
    assert _bodies(again) == ["1"] and again[0].delivery_count == 2
    clock.advance(10.0)  # the lease expires
    assert _bodies(await receive(store, Q, 5)) == ["1", "2", "3"]


async def test_fifo_sequence_increases_in_send_order_and_peek_shows_the_group(
    store: Store,
) -> None:
    await make_queue(store, Q, ordering=FIFO)
    await _send(store, Q, "x", "1", "2")
    await _send(store, Q, "y", "3")
    page = await store.peek(Q, 10)
    assert [(m.group, m.body) for m in page.messages] == [("x", b"1"), ("x", b"2"), ("y", b"3")]
    sequences = [m.sequence for m in page.messages]
    assert sequences == sorted(sequences) and len(set(sequences)) == 3 and sequences[0] > 0
    received = await receive(store, Q, 10)
    assert [m.sequence for m in received] == sequences


async def test_fifo_dead_lettering_moves_the_head_and_unblocks_the_group(
    store: Store, clock
) -> None:
    await make_queue(store, DLQ, ordering=FIFO)
    await make_queue(store, Q, ordering=FIFO, dead_letter_queue=DLQ, max_delivery_count=1)
    await _send(store, Q, "g", "1", "2")
    assert _bodies(await receive(store, Q, 1, vt=5.0)) == ["1"]
    clock.advance(5.0)
    # "1" was delivered max_delivery_count times: moved, and "2" is delivered at once.
    assert _bodies(await receive(store, Q, 1)) == ["2"]
    dead = await receive(store, DLQ, 10)
    assert _bodies(dead) == ["1"] and dead[0].group == "g"
    assert (await store.stats(Q)).dead_lettered_total == 1


async def test_a_fifo_queue_needs_a_fifo_dead_letter_queue(store: Store) -> None:
    await make_queue(store, DLQ)
    with pytest.raises(InvalidArgument, match="FIFO"):
        await make_queue(store, Q, ordering=FIFO, dead_letter_queue=DLQ, max_delivery_count=3)
    await make_queue(store, "fifo-dlq", ordering=FIFO)
    with pytest.raises(InvalidArgument, match="FIFO"):
        await make_queue(store, Q, dead_letter_queue="fifo-dlq", max_delivery_count=3)


async def test_fifo_a_delayed_head_blocks_its_group(store: Store, clock) -> None:
    await make_queue(store, Q, ordering=FIFO)
    await _send(store, Q, "g", "late", delay=10.0)
    await _send(store, Q, "g", "next")
    await _send(store, Q, "h", "other")
    assert _bodies(await receive(store, Q, 10)) == ["other"]
    clock.advance(10.0)
    assert _bodies(await receive(store, Q, 10)) == ["late", "next"]


async def test_fifo_runs_of_several_groups_in_one_receive_oldest_group_first(
    store: Store, clock
) -> None:
    await make_queue(store, Q, ordering=FIFO)
    await _send(store, Q, "old", "o1", "o2")
    clock.advance(1.0)
    await _send(store, Q, "new", "n1", "n2")
    got = await receive(store, Q, 10)
    assert _bodies(got) == ["o1", "o2", "n1", "n2"]


async def test_fifo_channel_filter_ends_a_run_at_another_channel(store: Store) -> None:
    await make_queue(store, Q, ordering=FIFO)
    await _send(store, Q, "g", "r1", "r2", channel="red")
    await _send(store, Q, "g", "b1", channel="blue")
    await _send(store, Q, "g", "r3", channel="red")
    assert _bodies(await receive(store, Q, 10, channel_filter="blue")) == []
    red = await receive(store, Q, 10, channel_filter="red")
    assert _bodies(red) == ["r1", "r2"]
    await _ack(store, red)
    assert _bodies(await receive(store, Q, 10, channel_filter="blue")) == ["b1"]


async def test_fifo_stats_count_groups_and_blocked_groups(store: Store) -> None:
    await make_queue(store, Q, ordering=FIFO)
    await _send(store, Q, "a", "1", "2")
    await _send(store, Q, "b", "3")
    await _send(store, Q, "c", "4")
    stats = await store.stats(Q)
    assert (stats.groups, stats.blocked_groups) == (3, 0)
    got = await receive(store, Q, 1)
    assert _bodies(got) == ["1"]
    stats = await store.stats(Q)
    assert (stats.groups, stats.blocked_groups, stats.leased) == (3, 1, 1)
    await _ack(store, got)
    await _ack(store, await receive(store, Q, 10))
    stats = await store.stats(Q)
    assert (stats.groups, stats.blocked_groups, stats.total) == (0, 0, 0)


async def test_fifo_in_flight_limit_counts_group_leases(store: Store) -> None:
    await make_queue(store, Q, ordering=FIFO, max_in_flight=3)
    await _send(store, Q, "a", "1", "2")
    await _send(store, Q, "b", "3", "4")
    got = await receive(store, Q, 10)
    assert _bodies(got) == ["1", "2", "3"]
    assert (await store.stats(Q)).leased == 3


async def test_fifo_update_message_and_attempt_ids_keep_the_group_blocked(store: Store) -> None:
    await make_queue(store, Q, ordering=FIFO)
    await _send(store, Q, "g", "1", "2")
    [one] = (await store.receive(Q, 1, 30.0, attempt_id="t1")).messages
    # A repeat of the attempt returns the same message and makes no delivery.
    [replayed] = (await store.receive(Q, 1, 30.0, attempt_id="t1")).messages
    assert replayed.receipt == one.receipt
    updated = await store.update_message(Q, one.receipt, b"1b", None, 60.0)
    assert updated.visible_at > one.enqueued_at
    assert await receive(store, Q, 10) == []
    outcome = await store.delete(Q, [updated.receipt], [])
    assert outcome.results[0].status.name == "OK"
    assert _bodies(await receive(store, Q, 10)) == ["2"]


async def test_fifo_purge_and_redrive_keep_groups_consistent(store: Store, clock) -> None:
    await make_queue(store, DLQ, ordering=FIFO)
    await make_queue(store, Q, ordering=FIFO, dead_letter_queue=DLQ, max_delivery_count=1)
    await _send(store, Q, "g", "1")
    await receive(store, Q, 1, vt=1.0)
    clock.advance(1.0)
    assert await receive(store, Q, 1) == []  # moved to the DLQ
    assert await store.redrive(DLQ, None, 0, "") == 1
    back = await receive(store, Q, 1)
    assert _bodies(back) == ["1"] and back[0].group == "g"
    await _send(store, Q, "h", "2")
    assert await store.purge_queue(Q) == 2
    assert (await store.stats(Q)).groups == 0
    await _send(store, Q, "g", "3")
    assert _bodies(await receive(store, Q, 5)) == ["3"]


async def test_fifo_expired_messages_leave_their_group(store: Store, clock) -> None:
    await make_queue(store, Q, ordering=FIFO)
    await _send(store, Q, "g", "short", ttl=5.0)
    await _send(store, Q, "g", "long")
    [short] = await receive(store, Q, 1, vt=60.0)
    assert _bodies([short]) == ["short"]
    clock.advance(5.0)  # the leased head expires
    assert _bodies(await receive(store, Q, 5)) == ["long"]


# --- FAIR -----------------------------------------------------------------------------------


async def test_fair_a_small_group_is_not_delayed_by_a_backlog(store: Store) -> None:
    await make_queue(store, Q, ordering=FAIR)
    await _send(store, Q, "big", *[f"b{i}" for i in range(500)])
    await _send(store, Q, "small", *[f"s{i}" for i in range(5)])
    got = await receive(store, Q, 10)
    # Round robin over the two ready groups: half the receive each.
    assert Counter(m.group for m in got) == {"big": 5, "small": 5}


async def test_fair_spreads_each_receive_over_the_ready_groups(store: Store) -> None:
    await make_queue(store, Q, ordering=FAIR)
    for g in range(4):
        await _send(store, Q, f"g{g}", *[f"{g}-{i}" for i in range(50)])
    await _send(store, Q, "", "plain")  # no group: the group ""
    counts = Counter(m.group for m in await receive(store, Q, 10))
    assert set(counts) == {"g0", "g1", "g2", "g3", ""} and sum(counts.values()) == 10
    # Served groups move to the back: a receive of 2 serves two groups once each.
    again = Counter(m.group for m in await receive(store, Q, 2))
    assert sum(again.values()) == 2 and max(again.values()) == 1


async def test_fair_bound_every_ready_group_served_within_groups_over_room_receives(
    store: Store,
) -> None:
    await make_queue(store, Q, ordering=FAIR)
    groups = [f"g{i}" for i in range(9)]
    for g in groups:
        await _send(store, Q, g, *[f"{g}-{i}" for i in range(20)])
    served: set[str] = set()
    for _ in range(3):  # ceil(9 / 3) receives of room 3
        served |= {m.group for m in await receive(store, Q, 3)}
    assert served == set(groups)


async def test_fair_fills_the_room_left_by_small_groups(store: Store) -> None:
    await make_queue(store, Q, ordering=FAIR)
    await _send(store, Q, "big", *[f"b{i}" for i in range(100)])
    await _send(store, Q, "one", "o")
    got = await receive(store, Q, 10)
    assert len(got) == 10 and Counter(m.group for m in got) == {"big": 9, "one": 1}


async def test_fair_stats_and_no_blocking_within_a_group(store: Store) -> None:
    await make_queue(store, Q, ordering=FAIR)
    await _send(store, Q, "a", "1", "2")
    first = await receive(store, Q, 1)
    assert len(first) == 1
    assert len(await receive(store, Q, 1)) == 1  # FAIR does not block a group while leased
    stats = await store.stats(Q)
    assert (stats.groups, stats.blocked_groups) == (1, 1)  # nothing visible in "a" now


async def test_a_group_on_a_queue_without_ordering_is_carried(store: Store) -> None:
    await make_queue(store, Q)
    await _send(store, Q, "g", "1", "2")
    got = await receive(store, Q, 10)
    assert [m.group for m in got] == ["g", "g"]
    assert (await store.stats(Q)).groups == 0
