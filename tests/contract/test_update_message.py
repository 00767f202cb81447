"""UpdateMessage: new body/attributes/visibility under a new receipt."""

from __future__ import annotations

import pytest

from leaseq.server.domain.types import LeaseStatus, MessageState
from leaseq.server.errors import InvalidArgument, LeaseRejected
from leaseq.server.store.base import Store

from .conftest import Q, at, change, delete_status, make_queue, peek_one, receive_one, send


async def _leased(store: Store, **config: object):
    await make_queue(store, Q, **config)
    await send(store, Q, "old", attributes={"a": "1"})
    return await receive_one(store, Q, vt=30.0)


async def test_the_new_receipt_supersedes_the_old(store: Store) -> None:
    message = await _leased(store)
    updated = await store.update_message(Q, message.receipt, body=b"new")
    assert updated.key == message.key
    assert updated.receipt != message.receipt
    assert await delete_status(store, Q, message.receipt) is LeaseStatus.RECEIPT_SUPERSEDED
    assert (await change(store, Q, message.receipt, 0.0))[0] is LeaseStatus.RECEIPT_SUPERSEDED
    assert await delete_status(store, Q, updated.receipt) is LeaseStatus.OK


async def test_body_and_attributes_are_replaced_separately(store: Store) -> None:
    message = await _leased(store)
    first = await store.update_message(Q, message.receipt, body=b"new")
    peeked = await peek_one(store, Q)
    assert (peeked.body, peeked.attributes) == (b"new", {"a": "1"})
    await store.update_message(Q, first.receipt, attributes={"b": "2"})
    peeked = await peek_one(store, Q)
    assert (peeked.body, peeked.attributes) == (b"new", {"b": "2"})
    assert (peeked.delivery_count, peeked.message_id) == (1, message.message_id)


async def test_without_a_visibility_the_lease_is_kept(store: Store, clock) -> None:
    message = await _leased(store)
    clock.advance(10)
    updated = await store.update_message(Q, message.receipt, body=b"new")
    assert updated.visible_at == at(message.visible_at)
    assert (await peek_one(store, Q)).state is MessageState.LEASED


async def test_a_visibility_sets_the_lease_from_now(store: Store, clock) -> None:
    message = await _leased(store)
    clock.advance(10)
    updated = await store.update_message(Q, message.receipt, visibility_timeout=100.0)
    assert updated.visible_at == at(clock.now() + 100.0)
    clock.advance(99)
    assert (await store.receive(Q, 1, visibility_timeout=5.0)).messages == []
    # The lease is the new receipt's to extend.
    assert (await change(store, Q, updated.receipt, 5.0))[0] is LeaseStatus.OK


async def test_visibility_zero_releases(store: Store, clock) -> None:
    message = await _leased(store)
    updated = await store.update_message(Q, message.receipt, body=b"retry", visibility_timeout=0.0)
    assert updated.visible_at == at(clock.now())
    again = await receive_one(store, Q)
    assert (again.body, again.delivery_count) == (b"retry", 2)


async def test_too_large_is_invalid_and_changes_nothing(store: Store) -> None:
    message = await _leased(store, max_message_bytes=1024)
    with pytest.raises(InvalidArgument) as raised:
        # 1000 + len("k") + 30: the attributes count against the limit too.
        await store.update_message(Q, message.receipt, body=b"x" * 1000, attributes={"k": "v" * 30})
    assert raised.value.field == "body"
    peeked = await peek_one(store, Q)
    assert (peeked.body, peeked.attributes) == (b"old", {"a": "1"})
    assert await delete_status(store, Q, message.receipt) is LeaseStatus.OK


async def test_exactly_the_limit_is_accepted(store: Store) -> None:
    message = await _leased(store, max_message_bytes=1024)
    await store.update_message(Q, message.receipt, body=b"x" * 1020, attributes={"k": "vvv"})
    assert (await peek_one(store, Q)).body == b"x" * 1020


async def _rejection(store: Store, receipt: str) -> LeaseStatus:
    with pytest.raises(LeaseRejected) as raised:
        await store.update_message(Q, receipt, body=b"nope")
    return raised.value.status


async def test_rejections_say_why(store: Store, clock) -> None:
    message = await _leased(store)
    assert await _rejection(store, "forged") is LeaseStatus.INVALID_RECEIPT
    clock.advance(30)
    assert await _rejection(store, message.receipt) is LeaseStatus.LEASE_EXPIRED
    again = await receive_one(store, Q)
    assert await _rejection(store, message.receipt) is LeaseStatus.RECEIPT_SUPERSEDED
    await delete_status(store, Q, again.receipt)
    assert await _rejection(store, again.receipt) is LeaseStatus.ALREADY_DELETED
    assert (await store.stats(Q)).total == 0

    await send(store, Q, "purged")
    gone = await receive_one(store, Q)
    await store.purge_queue(Q)
    assert await _rejection(store, gone.receipt) is LeaseStatus.MESSAGE_NOT_FOUND


async def test_a_released_message_cannot_be_updated(store: Store) -> None:
    message = await _leased(store)
    await change(store, Q, message.receipt, 0.0)
    assert await _rejection(store, message.receipt) is LeaseStatus.LEASE_EXPIRED
    assert (await peek_one(store, Q)).body == b"old"
