"""Send receipts: the receipt of receipt_seq 0 of a message never delivered nor updated
(`Store.receipt_of(name, key, 0)` over the key a per-message send returns). Deletes take it as
any current receipt; UpdateMessage takes it as holding the message (Azure's Put Message pop
receipt); a delivery supersedes it."""

from __future__ import annotations

import pytest

from leaseq.server.domain.types import LeaseStatus, MessageState, NewMessage
from leaseq.server.errors import LeaseRejected, OverLimit
from leaseq.server.store.base import Store

from .conftest import Q, at, change, delete_status, make_queue, peek_one, receive_one


async def _sent(store: Store, body: bytes = b"old", **options: object) -> tuple[str, int]:
    """(message id, send receipt) of one message sent the per-message way (a ttl)."""
    await make_queue(store, Q)
    [outcome] = await store.send(Q, [NewMessage(body, ttl=600.0, **options)])
    assert outcome.key is not None and not outcome.duplicate
    return outcome.message_id, outcome.key


async def test_each_sent_message_gets_its_own_key_in_order(store: Store) -> None:
    await make_queue(store, Q)
    messages = [NewMessage(str(i).encode(), attributes={"i": str(i)}) for i in range(7)]
    outcomes = await store.send(Q, messages)
    keys = [o.key for o in outcomes]
    assert None not in keys and len(set(keys)) == 7
    for outcome, message in zip(outcomes, messages):
        receipt = await store.receipt_of(Q, outcome.key or 0, 0)
        updated = await store.update_message(Q, receipt, body=message.body + b"!")
        assert updated.key == outcome.key
    peeked = await store.peek(Q, 10)
    assert {(m.body, m.attributes["i"]) for m in peeked.messages} == {
        (f"{i}!".encode(), str(i)) for i in range(7)
    }


async def test_a_duplicate_has_no_key(store: Store) -> None:
    await make_queue(store, Q)
    first, again = await store.send(
        Q, [NewMessage(b"a", dedup_id="d"), NewMessage(b"a", dedup_id="d")]
    )
    assert first.key is not None and (again.duplicate, again.key) == (True, None)


async def test_the_send_receipt_deletes_a_message_never_delivered(store: Store) -> None:
    _, key = await _sent(store)
    receipt = await store.receipt_of(Q, key, 0)
    assert await delete_status(store, Q, receipt) is LeaseStatus.OK
    assert await delete_status(store, Q, receipt) is LeaseStatus.ALREADY_DELETED
    assert (await store.stats(Q)).total == 0


async def test_the_send_receipt_updates_and_leaves_the_message_visible(store: Store) -> None:
    message_id, key = await _sent(store)
    updated = await store.update_message(Q, await store.receipt_of(Q, key, 0), body=b"new")
    assert updated.key == key
    peeked = await peek_one(store, Q)
    assert (peeked.message_id, peeked.body, peeked.state) == (
        message_id,
        b"new",
        MessageState.VISIBLE,
    )
    # The message holds no lease, so the receipt the update gave does not hold it either.
    with pytest.raises(LeaseRejected) as raised:
        await store.update_message(Q, updated.receipt, body=b"again")
    assert raised.value.status is LeaseStatus.LEASE_EXPIRED
    assert await delete_status(store, Q, updated.receipt) is LeaseStatus.OK


async def test_an_update_with_a_visibility_leases_it(store: Store, clock) -> None:
    _, key = await _sent(store)
    send_receipt = await store.receipt_of(Q, key, 0)
    updated = await store.update_message(Q, send_receipt, body=b"new", visibility_timeout=60.0)
    assert updated.visible_at == at(clock.now() + 60.0)
    assert (await peek_one(store, Q)).state is MessageState.LEASED
    assert (await store.stats(Q)).leased == 1
    assert (await store.receive(Q, 1, visibility_timeout=5.0)).messages == []
    # The send receipt is superseded; the new one updates and deletes while invisible.
    assert await delete_status(store, Q, send_receipt) is LeaseStatus.RECEIPT_SUPERSEDED
    clock.advance(30)
    again = await store.update_message(Q, updated.receipt, body=b"newer", visibility_timeout=60.0)
    assert (await change(store, Q, again.receipt, 90.0))[0] is LeaseStatus.OK
    assert (await peek_one(store, Q)).body == b"newer"
    assert await delete_status(store, Q, again.receipt) is LeaseStatus.OK
    assert (await store.stats(Q)).total == 0


async def test_a_leased_update_counts_against_max_in_flight(store: Store) -> None:
    await make_queue(store, Q, max_in_flight=2)
    _, b, _ = await store.send(Q, [NewMessage(x, ttl=600.0) for x in (b"a", b"b", b"c")])
    await receive_one(store, Q, vt=60.0)  # a: one lease, counted
    assert b.key is not None
    await store.update_message(Q, await store.receipt_of(Q, b.key, 0), visibility_timeout=60.0)
    # b's lease counts as a delivery's would: c waits for room.
    with pytest.raises(OverLimit):
        await store.receive(Q, 1, visibility_timeout=60.0)
    assert (await store.stats(Q)).leased == 2


async def test_a_delivery_supersedes_the_send_receipt(store: Store) -> None:
    _, key = await _sent(store)
    receipt = await store.receipt_of(Q, key, 0)
    delivered = await receive_one(store, Q, vt=30.0)
    with pytest.raises(LeaseRejected) as raised:
        await store.update_message(Q, receipt, body=b"late")
    assert raised.value.status is LeaseStatus.RECEIPT_SUPERSEDED
    assert await delete_status(store, Q, receipt) is LeaseStatus.RECEIPT_SUPERSEDED
    assert (await change(store, Q, receipt, 0.0))[0] is LeaseStatus.RECEIPT_SUPERSEDED
    assert await delete_status(store, Q, delivered.receipt) is LeaseStatus.OK
