"""Receipts and fencing: every LeaseStatus of DeleteMessages, Azure's late delete, isolation."""

from __future__ import annotations

import pytest

from leaseq.server.domain.limits import TOMBSTONE_SECONDS
from leaseq.server.domain.types import LeaseStatus, MessageState
from leaseq.server.store.base import Store

from .conftest import Q, change, delete_status, make_queue, peek_one, receive, receive_one, send

OK = LeaseStatus.OK
OTHER = "other"


async def test_delete_with_the_current_receipt(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q)
    outcome = await store.delete(Q, [message.receipt])
    assert [(r.receipt, r.status, r.key) for r in outcome.results] == [
        (message.receipt, OK, message.key)
    ]
    assert outcome.deleted_keys == [message.key]
    assert (await store.stats(Q)).total == 0


async def test_a_repeated_delete_is_already_deleted(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q)
    assert await delete_status(store, Q, message.receipt) is OK
    outcome = await store.delete(Q, [message.receipt])
    assert outcome.results[0].status is LeaseStatus.ALREADY_DELETED
    assert outcome.deleted_keys == []
    assert (await store.stats(Q)).deleted_total == 1


async def test_late_delete_succeeds_when_not_redelivered(store: Store, clock) -> None:
    """Azure's rule: the latest receipt deletes even after its lease expired."""
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q, vt=10.0)
    clock.advance(100)
    assert (await peek_one(store, Q)).state is MessageState.VISIBLE
    assert await delete_status(store, Q, message.receipt) is OK
    assert await receive(store, Q) == []


async def test_late_delete_is_superseded_once_redelivered(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    first = await receive_one(store, Q, vt=10.0)
    clock.advance(10)
    second = await receive_one(store, Q, vt=10.0)
    assert await delete_status(store, Q, first.receipt) is LeaseStatus.RECEIPT_SUPERSEDED
    assert (await change(store, Q, first.receipt, 60.0))[0] is LeaseStatus.RECEIPT_SUPERSEDED
    # The holder of the new lease is untouched.
    assert (await peek_one(store, Q)).state is MessageState.LEASED
    assert await delete_status(store, Q, second.receipt) is OK
    # Once deleted, the old receipt is still superseded (it does not name the deleting delivery).
    assert await delete_status(store, Q, first.receipt) is LeaseStatus.RECEIPT_SUPERSEDED
    assert await delete_status(store, Q, second.receipt) is LeaseStatus.ALREADY_DELETED


async def test_delete_of_a_released_message_with_its_receipt(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    message = await receive_one(store, Q)
    await change(store, Q, message.receipt, 0.0)
    assert await delete_status(store, Q, message.receipt) is OK


async def test_tombstones_answer_for_an_hour(store: Store, clock) -> None:
    await make_queue(store, Q, message_retention=14 * 86400.0)
    await send(store, Q, "m")
    first = await receive_one(store, Q, vt=1.0)
    clock.advance(1)
    second = await receive_one(store, Q, vt=1.0)
    assert await delete_status(store, Q, second.receipt) is OK
    clock.advance(TOMBSTONE_SECONDS - 1)
    assert await delete_status(store, Q, second.receipt) is LeaseStatus.ALREADY_DELETED
    assert await delete_status(store, Q, first.receipt) is LeaseStatus.RECEIPT_SUPERSEDED
    clock.advance(2)
    assert await delete_status(store, Q, second.receipt) is LeaseStatus.MESSAGE_NOT_FOUND
    assert await delete_status(store, Q, first.receipt) is LeaseStatus.MESSAGE_NOT_FOUND


async def _a_receipt(store: Store, queue: str) -> str:
    await send(store, queue, "m")
    return (await receive_one(store, queue)).receipt


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda r: "", id="empty"),
        pytest.param(lambda r: "not-a-receipt", id="garbage"),
        pytest.param(lambda r: r[:-3], id="truncated"),
        pytest.param(lambda r: r + "AAAA", id="extended"),
        pytest.param(lambda r: r[:5] + ("B" if r[5] != "B" else "C") + r[6:], id="tampered"),
        pytest.param(lambda r: r * 3, id="too-long"),
        pytest.param(lambda r: r[:-1] + "\u00e9", id="non-ascii"),
    ],
)
async def test_a_forged_receipt_is_invalid(store: Store, mangle) -> None:
    await make_queue(store, Q)
    receipt = await _a_receipt(store, Q)
    forged = mangle(receipt)
    assert forged != receipt
    outcome = await store.delete(Q, [forged])
    assert (outcome.results[0].status, outcome.deleted_keys) == (LeaseStatus.INVALID_RECEIPT, [])
    assert (await change(store, Q, forged, 0.0))[0] is LeaseStatus.INVALID_RECEIPT
    assert (await peek_one(store, Q)).state is MessageState.LEASED


async def test_another_queues_receipt_is_invalid(store: Store) -> None:
    await make_queue(store, Q)
    await make_queue(store, OTHER)
    theirs = await _a_receipt(store, OTHER)
    await send(store, Q, "mine")
    await receive_one(store, Q)
    assert await delete_status(store, Q, theirs) is LeaseStatus.INVALID_RECEIPT
    assert (await change(store, Q, theirs, 0.0))[0] is LeaseStatus.INVALID_RECEIPT
    # Neither queue lost anything.
    assert (await store.stats(Q)).leased == 1
    assert (await store.stats(OTHER)).leased == 1
    assert await delete_status(store, OTHER, theirs) is OK


async def test_a_recreated_queue_rejects_the_old_queues_receipts(store: Store) -> None:
    await make_queue(store, Q)
    old = await _a_receipt(store, Q)
    await store.delete_queue(Q)
    await make_queue(store, Q)
    await send(store, Q, "new")
    await receive_one(store, Q)
    assert await delete_status(store, Q, old) is LeaseStatus.INVALID_RECEIPT
    assert (await change(store, Q, old, 0.0))[0] is LeaseStatus.INVALID_RECEIPT
    assert (await store.stats(Q)).leased == 1


async def test_messages_never_cross_queues(store: Store) -> None:
    await make_queue(store, Q)
    await make_queue(store, OTHER)
    await send(store, OTHER, "theirs")
    assert await receive(store, Q, 10) == []
    assert (await store.peek(Q, 10, include_leased=True, include_delayed=True)).messages == []
    assert (await store.stats(Q)).total == 0
    assert await store.purge_queue(Q) == 0
    assert [m.body for m in await receive(store, OTHER, 10)] == [b"theirs"]


async def test_a_receipt_is_not_found_after_its_message_expired(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m", ttl=60.0)
    message = await receive_one(store, Q, vt=300.0)
    clock.advance(60)
    assert await delete_status(store, Q, message.receipt) is LeaseStatus.MESSAGE_NOT_FOUND
    assert (await change(store, Q, message.receipt, 0.0))[0] is LeaseStatus.MESSAGE_NOT_FOUND
