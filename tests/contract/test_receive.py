"""Receiving: delivery order, channel filters, empty answers, concurrent receivers."""

from __future__ import annotations

import asyncio

from leaseq.server.store.base import Store

from .conftest import Q, at, bodies, change, make_queue, receive, receive_one, send


async def test_oldest_first(store: Store, clock) -> None:
    await make_queue(store, Q)
    for i in range(5):
        await send(store, Q, f"m{i}")
        clock.advance(1)
    assert bodies(await receive(store, Q, 2)) == [b"m0", b"m1"]
    assert bodies(await receive(store, Q, 10)) == [b"m2", b"m3", b"m4"]


async def test_same_instant_goes_in_enqueue_order(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, *[f"m{i:02}" for i in range(20)])
    await send(store, Q, "last")
    expected = [f"m{i:02}".encode() for i in range(20)] + [b"last"]
    assert bodies(await receive(store, Q, 21)) == expected


async def test_order_is_by_visible_at_then_key(store: Store, clock) -> None:
    """A message whose lease ended is as old as the end of its lease, not its enqueue."""
    await make_queue(store, Q)
    await send(store, Q, "a", "b")  # t0
    await receive(store, Q, 1, vt=5.0)  # a: visible again at t0 + 5
    clock.advance(2)
    await send(store, Q, "c")  # visible at t0 + 2
    await send(store, Q, "d", delay=6.0)  # visible at t0 + 8
    clock.advance(10)
    await send(store, Q, "e")  # visible at t0 + 12
    assert bodies(await receive(store, Q, 10)) == [b"b", b"c", b"a", b"d", b"e"]


async def test_a_released_message_queues_behind_older_ones(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a")
    clock.advance(1)
    await send(store, Q, "b")
    clock.advance(1)
    a = await receive_one(store, Q)
    assert a.body == b"a"
    clock.advance(1)
    await change(store, Q, a.receipt, 0.0)
    assert bodies(await receive(store, Q, 10)) == [b"b", b"a"]


async def test_an_empty_answer_says_when_to_look_again(store: Store, clock) -> None:
    await make_queue(store, Q)
    outcome = await store.receive(Q, 1, visibility_timeout=30.0)
    assert (outcome.messages, outcome.next_visible_at) == ([], None)
    t0 = clock.now()
    await send(store, Q, "delayed", delay=50.0)
    await send(store, Q, "leased")
    await receive_one(store, Q, vt=20.0)
    outcome = await store.receive(Q, 1, visibility_timeout=30.0)
    assert (outcome.messages, outcome.next_visible_at) == ([], at(t0 + 20.0))


async def test_exact_channel_filter(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "o1", channel="orders")
    await send(store, Q, "d1")
    await send(store, Q, "o2", channel="orders")
    await send(store, Q, "x1", channel="orders.eu")
    got = await receive(store, Q, 10, channel_filter="orders")
    assert bodies(got) == [b"o1", b"o2"]
    assert {m.channel for m in got} == {"orders"}
    assert bodies(await receive(store, Q, 10)) == [b"d1", b"x1"]


async def test_prefix_channel_filter(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "eu", channel="orders.eu")
    await send(store, Q, "plain", channel="orders")
    await send(store, Q, "other", channel="billing")
    await send(store, Q, "us", channel="orders.us")
    assert bodies(await receive(store, Q, 10, channel_filter="orders.*")) == [b"eu", b"us"]
    assert bodies(await receive(store, Q, 10, channel_filter="orders*")) == [b"plain"]
    assert bodies(await receive(store, Q, 10, channel_filter="*")) == [b"other"]


async def test_a_filtered_empty_answer_still_says_when_to_look_again(store: Store, clock) -> None:
    await make_queue(store, Q)
    t0 = clock.now()
    await send(store, Q, "visible-elsewhere", channel="b")
    await send(store, Q, "later", channel="a", delay=7.0)
    outcome = await store.receive(Q, 1, visibility_timeout=30.0, channel_filter="a")
    assert (outcome.messages, outcome.next_visible_at) == ([], at(t0 + 7.0))


async def test_max_messages_is_respected(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, *[f"m{i}" for i in range(7)])
    assert len(await receive(store, Q, 3)) == 3
    assert len(await receive(store, Q, 3)) == 3
    assert len(await receive(store, Q, 3)) == 1


async def test_concurrent_receivers_never_share_a_live_lease(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, *[f"m{i}" for i in range(50)])
    batches = await asyncio.gather(*[receive(store, Q, 3, vt=60.0) for _ in range(25)])
    keys = [m.key for batch in batches for m in batch]
    ids = [m.message_id for batch in batches for m in batch]
    assert len(keys) == len(set(keys)) == 50
    assert len(set(ids)) == 50
    assert all(m.delivery_count == 1 for batch in batches for m in batch)
    assert (await store.stats(Q)).leased == 50
