"""Stats: exact counts by state and channel, ages and lifetime totals."""

from __future__ import annotations

from leaseq.server.domain.types import CountsByState, LeaseStatus
from leaseq.server.store.base import Store

from .conftest import Q, at, delete_status, make_queue, receive, receive_one, send


async def test_an_empty_queue(store: Store) -> None:
    await make_queue(store, Q)
    stats = await store.stats(Q)
    assert (stats.visible, stats.leased, stats.delayed, stats.total) == (0, 0, 0, 0)
    assert stats.oldest_visible_age == 0
    assert (stats.dead_lettered_total, stats.expired_total, stats.deleted_total) == (0, 0, 0)
    assert stats.channels == {}


async def test_exact_counts_by_state_and_channel(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "leased-a", channel="a")
    await send(store, Q, "visible-a", channel="a")
    await send(store, Q, "visible-default", "visible-default-2")
    await send(store, Q, "delayed-b", channel="b", delay=100.0)
    await receive_one(store, Q, vt=60.0)  # takes "leased-a"

    stats = await store.stats(Q)
    assert (stats.visible, stats.leased, stats.delayed, stats.total) == (3, 1, 1, 5)
    assert stats.channels == {
        "a": CountsByState(visible=1, leased=1, delayed=0),
        "": CountsByState(visible=2, leased=0, delayed=0),
        "b": CountsByState(visible=0, leased=0, delayed=1),
    }
    assert stats.channels["a"].total == 2

    clock.advance(60)  # the lease ends: leased -> visible
    stats = await store.stats(Q)
    assert (stats.visible, stats.leased, stats.delayed) == (4, 0, 1)
    clock.advance(40)  # the delay ends
    stats = await store.stats(Q)
    assert (stats.visible, stats.leased, stats.delayed, stats.total) == (5, 0, 0, 5)


async def test_oldest_visible_age_counts_visible_messages_only(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "oldest")
    clock.advance(10)
    await send(store, Q, "middle")
    clock.advance(5)
    await send(store, Q, "delayed", delay=1.0)
    assert (await store.stats(Q)).oldest_visible_age == at(15.0)
    await receive_one(store, Q, vt=100.0)  # "oldest" is leased now
    assert (await store.stats(Q)).oldest_visible_age == at(5.0)
    clock.advance(2)  # "delayed" is visible but younger
    assert (await store.stats(Q)).oldest_visible_age == at(7.0)
    await receive(store, Q, 10, vt=100.0)
    assert (await store.stats(Q)).oldest_visible_age == 0


async def test_totals(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b", "c")
    await send(store, Q, "dies", ttl=5.0)
    a, b = await receive(store, Q, 2)
    assert await delete_status(store, Q, a.receipt) is LeaseStatus.OK
    # A repeated delete is not counted twice.
    assert await delete_status(store, Q, a.receipt) is LeaseStatus.ALREADY_DELETED
    await store.delete(Q, [b.receipt])
    clock.advance(5)
    stats = await store.stats(Q)
    assert (stats.deleted_total, stats.expired_total, stats.total) == (2, 1, 1)
    await store.purge_queue(Q)  # purging is neither deleting nor expiring
    stats = await store.stats(Q)
    assert (stats.deleted_total, stats.expired_total, stats.total) == (2, 1, 0)
