"""Sending: stored fields, delays, defaults."""

from __future__ import annotations

from leaseq.server.domain.types import MessageState, NewMessage
from leaseq.server.store.base import Store

from .conftest import Q, at, make_queue, peek_all, peek_one, receive, receive_one, send


async def test_send_stores_what_was_sent(store: Store, clock) -> None:
    await make_queue(store, Q, message_retention=1000.0)
    t0 = clock.now()
    [result] = await store.send(
        Q, [NewMessage(body=b"\x00hello", attributes={"k": "v", "n": "1"}, channel="orders")]
    )
    assert not result.duplicate
    clock.advance(3)
    message = await receive_one(store, Q)
    assert message.message_id == result.message_id
    assert message.body == b"\x00hello"
    assert message.attributes == {"k": "v", "n": "1"}
    assert message.channel == "orders"
    assert message.enqueued_at == at(t0)
    assert message.expires_at == at(t0 + 1000.0)
    assert message.delivery_count == 1
    assert message.last_error == ""


async def test_each_message_gets_its_own_id(store: Store) -> None:
    await make_queue(store, Q)
    ids = await send(store, Q, *[f"m{i}" for i in range(50)])
    ids += await send(store, Q, *[f"n{i}" for i in range(50)])
    assert len(set(ids)) == 100
    assert all(isinstance(i, str) and i for i in ids)


async def test_one_outcome_per_entry_in_order(store: Store) -> None:
    await make_queue(store, Q)
    ids = await send(store, Q, "a", "b", "c")
    delivered = await receive(store, Q, 3)
    assert [m.message_id for m in delivered] == ids
    assert [m.body for m in delivered] == [b"a", b"b", b"c"]


async def test_a_delayed_message_waits_then_becomes_visible(store: Store, clock) -> None:
    await make_queue(store, Q)
    t0 = clock.now()
    await send(store, Q, "later", delay=10.0)

    outcome = await store.receive(Q, 1, visibility_timeout=30.0)
    assert outcome.messages == []
    assert outcome.next_visible_at == at(t0 + 10.0)
    [peeked] = await peek_all(store, Q)
    assert (peeked.state, peeked.visible_at) == (MessageState.DELAYED, at(t0 + 10.0))
    stats = await store.stats(Q)
    assert (stats.delayed, stats.visible) == (1, 0)

    clock.advance(9.5)
    assert await receive(store, Q) == []
    clock.advance(0.5)
    message = await receive_one(store, Q)
    assert (message.body, message.delivery_count) == (b"later", 1)


async def test_the_queue_default_delay_applies_unless_set(store: Store, clock) -> None:
    await make_queue(store, Q, default_delay=20.0)
    await send(store, Q, "default")
    await send(store, Q, "now", delay=0.0)
    assert [m.body for m in await receive(store, Q, 10)] == [b"now"]
    clock.advance(20)
    assert [m.body for m in await receive(store, Q, 10)] == [b"default"]


async def test_ttl_defaults_to_the_queue_retention(store: Store, clock) -> None:
    await make_queue(store, Q, message_retention=120.0)
    t0 = clock.now()
    await send(store, Q, "default")
    await send(store, Q, "short", ttl=30.0)
    expiries = {m.body: m.expires_at for m in await peek_all(store, Q)}
    assert expiries == {b"default": at(t0 + 120.0), b"short": at(t0 + 30.0)}


async def test_a_new_message_has_delivery_count_zero(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "fresh")
    peeked = await peek_one(store, Q)
    assert (peeked.delivery_count, peeked.state, peeked.last_error) == (0, MessageState.VISIBLE, "")
