"""Message TTL: expired messages are never delivered, peeked or counted."""

from __future__ import annotations

from leaseq.server.domain.types import LeaseStatus, NewMessage
from leaseq.server.store.base import Store

from .conftest import Q, bodies, make_queue, peek_all, receive, receive_one, send


async def test_an_expired_message_is_never_delivered(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "short", ttl=60.0)
    await send(store, Q, "long", ttl=120.0)
    clock.advance(59.9)
    assert bodies(await peek_all(store, Q)) == [b"short", b"long"]
    clock.advance(0.1)  # expired exactly at expires_at
    assert bodies(await peek_all(store, Q)) == [b"long"]
    assert bodies(await receive(store, Q, 10)) == [b"long"]
    stats = await store.stats(Q)
    assert (stats.total, stats.expired_total, stats.deleted_total) == (1, 1, 0)


async def test_a_leased_message_expires_too(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m", ttl=60.0)
    message = await receive_one(store, Q, vt=600.0)
    clock.advance(60)
    stats = await store.stats(Q)
    assert (stats.leased, stats.total, stats.expired_total) == (0, 0, 1)
    assert (await store.delete(Q, [message.receipt])).results[0].status is (
        LeaseStatus.MESSAGE_NOT_FOUND
    )
    clock.advance(600)
    assert await receive(store, Q) == []


async def test_a_delayed_message_can_expire_before_it_is_visible(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "never", delay=100.0, ttl=50.0)
    clock.advance(100)
    assert await receive(store, Q) == []
    assert (await store.stats(Q)).expired_total == 1


async def test_expired_totals_count_each_message_once(store: Store, clock) -> None:
    await make_queue(store, Q, message_retention=60.0)
    await store.send(Q, [NewMessage(body=f"m{i}".encode()) for i in range(5)])
    clock.advance(30)
    await send(store, Q, "younger")
    clock.advance(30)
    # Read the total twice and through other operations: the sweep counts each message once.
    assert (await store.stats(Q)).expired_total == 5
    await receive(store, Q, 10)
    assert (await store.stats(Q)).expired_total == 5
    clock.advance(30)
    assert (await store.stats(Q)).expired_total == 6
