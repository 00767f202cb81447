"""Message TTL: expired messages are never delivered, peeked or counted."""

from __future__ import annotations

import pytest

from leaseq.server.domain import limits, rules
from leaseq.server.domain.types import LeaseStatus, NewMessage, QueueConfig
from leaseq.server.errors import OutOfRange
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


async def test_a_message_that_never_expires_outlives_the_retention(store: Store, clock) -> None:
    """ttl NEVER_EXPIRES (Azure's messagettl=-1): the one ttl above the retention; the message
    stays past every retention, and the domain tells it apart from any other ttl."""
    await make_queue(store, Q, message_retention=60.0)
    await send(store, Q, "forever", ttl=limits.NEVER_EXPIRES)
    await send(store, Q, "minute")
    clock.advance(14 * 86400.0 + 60)
    (peeked,) = await peek_all(store, Q)
    assert peeked.body == b"forever"
    assert rules.never_expires(peeked.enqueued_at, peeked.expires_at)
    assert (await store.stats(Q)).expired_total == 1
    assert bodies(await receive(store, Q, 10)) == [b"forever"]


def test_only_never_expires_may_exceed_the_retention() -> None:
    config = QueueConfig(message_retention=60.0)
    never = NewMessage(b"x", ttl=limits.NEVER_EXPIRES)
    assert rules.check_message(never, 0, config) is never
    with pytest.raises(OutOfRange):
        rules.check_message(NewMessage(b"x", ttl=61.0), 0, config)
    assert not rules.never_expires(0.0, 14 * 86400.0)
