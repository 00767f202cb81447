"""Leases: invisibility while held, expiry, and ChangeVisibility (extend, shorten, release)."""

from __future__ import annotations

from leaseq.server.domain.types import LeaseStatus, MessageState, VisibilityChange
from leaseq.server.store.base import Store

from .conftest import Q, at, change, delete_status, make_queue, peek_one, receive, receive_one, send

OK = LeaseStatus.OK


async def test_a_leased_message_is_invisible_until_the_lease_ends(store: Store, clock) -> None:
    await make_queue(store, Q)
    t0 = clock.now()
    await send(store, Q, "m")
    first = await receive_one(store, Q, vt=30.0)
    assert first.visible_at == at(t0 + 30.0)

    outcome = await store.receive(Q, 1, visibility_timeout=30.0)
    assert outcome.messages == []
    assert outcome.next_visible_at == at(t0 + 30.0)
    clock.advance(29.9)
    assert await receive(store, Q) == []

    clock.advance(0.1)  # the lease ends exactly at visible_at
    second = await receive_one(store, Q)
    assert second.message_id == first.message_id
    assert second.delivery_count == 2
    assert second.receipt != first.receipt


async def test_the_queue_visibility_timeout_is_the_default(store: Store, clock) -> None:
    await make_queue(store, Q, visibility_timeout=45.0)
    await send(store, Q, "m")
    message = await receive_one(store, Q, vt=None)
    assert message.visible_at == at(clock.now() + 45.0)


async def test_delivery_count_counts_every_delivery(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    counts = []
    for _ in range(4):
        counts.append((await receive_one(store, Q, vt=10.0)).delivery_count)
        clock.advance(10)
    assert counts == [1, 2, 3, 4]


async def test_extend_counts_from_the_call(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q, vt=30.0)
    clock.advance(20)
    assert await change(store, Q, message.receipt, 30.0) == (OK, at(clock.now() + 30.0))
    clock.advance(29)  # 49 s after delivery: past the first lease, inside the extension
    assert await receive(store, Q) == []
    assert (await peek_one(store, Q)).state is MessageState.LEASED
    clock.advance(1)
    assert (await receive_one(store, Q)).delivery_count == 2


async def test_shorten(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q, vt=300.0)
    clock.advance(10)
    assert await change(store, Q, message.receipt, 5.0) == (OK, at(clock.now() + 5.0))
    clock.advance(4.9)
    assert await receive(store, Q) == []
    clock.advance(0.1)
    assert (await receive_one(store, Q)).message_id == message.message_id


async def test_release_makes_it_visible_now_and_records_the_reason(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q, vt=300.0)
    clock.advance(1)
    assert await change(store, Q, message.receipt, 0.0, "boom: handler failed") == (
        OK,
        at(clock.now()),
    )
    peeked = await peek_one(store, Q)
    assert (peeked.state, peeked.last_error) == (MessageState.VISIBLE, "boom: handler failed")
    again = await receive_one(store, Q)
    assert (again.delivery_count, again.last_error) == (2, "boom: handler failed")


async def test_a_reason_is_kept_until_a_new_one_is_given(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q)
    await change(store, Q, message.receipt, 0.0, "first")
    message = await receive_one(store, Q)
    await change(store, Q, message.receipt, 60.0)  # no reason: last_error stays
    assert (await peek_one(store, Q)).last_error == "first"
    await change(store, Q, message.receipt, 60.0, "second")  # a reason with an extension counts
    assert (await peek_one(store, Q)).last_error == "second"


async def test_change_after_the_lease_ended_is_lease_expired(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q, vt=10.0)
    clock.advance(10)
    assert await change(store, Q, message.receipt, 30.0) == (LeaseStatus.LEASE_EXPIRED, None)
    assert await change(store, Q, message.receipt, 0.0) == (LeaseStatus.LEASE_EXPIRED, None)
    # Nothing changed: it is visible and deliverable.
    assert (await receive_one(store, Q)).delivery_count == 2


async def test_change_after_a_release_is_lease_expired(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q)
    assert (await change(store, Q, message.receipt, 0.0))[0] is OK
    assert (await change(store, Q, message.receipt, 30.0))[0] is LeaseStatus.LEASE_EXPIRED
    assert (await peek_one(store, Q)).state is MessageState.VISIBLE


async def test_visibility_zero_delivers_without_a_lease(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q, vt=0.0)
    assert (message.delivery_count, message.visible_at) == (1, at(clock.now()))
    stats = await store.stats(Q)
    assert (stats.visible, stats.leased) == (1, 0)
    assert (await change(store, Q, message.receipt, 30.0))[0] is LeaseStatus.LEASE_EXPIRED
    again = await receive_one(store, Q, vt=0.0)
    assert again.delivery_count == 2
    assert await delete_status(store, Q, message.receipt) is LeaseStatus.RECEIPT_SUPERSEDED
    assert await delete_status(store, Q, again.receipt) is OK


async def test_visibility_zero_never_delivers_a_message_twice_in_one_receive(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b")
    messages = await receive(store, Q, 10, vt=0.0)
    assert [m.body for m in messages] == [b"a", b"b"]
    assert [m.delivery_count for m in messages] == [1, 1]


async def test_change_visibility_answers_each_entry(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b", "c")
    a, b, c = await receive(store, Q, 3, vt=10.0)
    assert await delete_status(store, Q, c.receipt) is OK
    results = await store.change_visibility(
        Q,
        [
            VisibilityChange(a.receipt, 60.0),
            VisibilityChange("garbage", 60.0),
            VisibilityChange(b.receipt, 0.0, "why"),
            VisibilityChange(c.receipt, 60.0),
            VisibilityChange(b.receipt, 60.0),  # released by the entry before it
        ],
    )
    assert [r.status for r in results] == [
        OK,
        LeaseStatus.INVALID_RECEIPT,
        OK,
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.LEASE_EXPIRED,
    ]
    assert [r.receipt for r in results] == [a.receipt, "garbage", b.receipt, c.receipt, b.receipt]
    assert results[0].visible_at == at(clock.now() + 60.0)
    assert (results[0].key, results[2].key) == (a.key, b.key)
