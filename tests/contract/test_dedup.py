"""Deduplication by dedup_id inside the queue's dedup window."""

from __future__ import annotations

from leaseq.server.domain.types import NewMessage
from leaseq.server.store.base import Store

from .conftest import Q, delete_status, make_queue, receive_one


async def _send(store: Store, queue: str, body: str, dedup_id: str) -> tuple[str, bool]:
    [outcome] = await store.send(queue, [NewMessage(body=body.encode(), dedup_id=dedup_id)])
    return outcome.message_id, outcome.duplicate


async def test_a_repeat_inside_the_window_is_a_duplicate(store: Store, clock) -> None:
    await make_queue(store, Q, dedup_window=60.0)
    first, duplicate = await _send(store, Q, "one", "d1")
    assert not duplicate
    clock.advance(59.9)
    again, duplicate = await _send(store, Q, "two", "d1")
    assert (again, duplicate) == (first, True)
    assert (await store.stats(Q)).total == 1
    assert (await receive_one(store, Q)).body == b"one"


async def test_a_duplicate_of_a_deleted_message_is_still_a_duplicate(store: Store, clock) -> None:
    await make_queue(store, Q, dedup_window=60.0)
    first, _ = await _send(store, Q, "one", "d1")
    message = await receive_one(store, Q)
    assert (await delete_status(store, Q, message.receipt)).name == "OK"
    clock.advance(10)
    assert await _send(store, Q, "two", "d1") == (first, True)
    assert (await store.stats(Q)).total == 0


async def test_after_the_window_the_same_id_enqueues_a_new_message(store: Store, clock) -> None:
    await make_queue(store, Q, dedup_window=60.0)
    first, _ = await _send(store, Q, "one", "d1")
    clock.advance(60)
    second, duplicate = await _send(store, Q, "two", "d1")
    assert not duplicate and second != first
    assert (await store.stats(Q)).total == 2
    # The new message opens a new window.
    clock.advance(30)
    assert await _send(store, Q, "three", "d1") == (second, True)


async def test_a_repeat_inside_one_batch_is_a_duplicate_of_the_earlier_entry(store: Store) -> None:
    await make_queue(store, Q)
    outcomes = await store.send(
        Q,
        [
            NewMessage(body=b"a", dedup_id="x"),
            NewMessage(body=b"b", dedup_id="y"),
            NewMessage(body=b"c", dedup_id="x"),
        ],
    )
    assert [o.duplicate for o in outcomes] == [False, False, True]
    assert outcomes[2].message_id == outcomes[0].message_id
    assert outcomes[0].message_id != outcomes[1].message_id
    assert (await store.stats(Q)).total == 2


async def test_dedup_is_per_queue_and_needs_an_id(store: Store) -> None:
    await make_queue(store, Q)
    await make_queue(store, "other")
    first, _ = await _send(store, Q, "one", "d1")
    other, duplicate = await _send(store, "other", "one", "d1")
    assert not duplicate and other != first
    # Without a dedup_id identical bodies are distinct messages.
    assert (await _send(store, Q, "same", ""))[1] is False
    assert (await _send(store, Q, "same", ""))[1] is False
    assert (await store.stats(Q)).total == 3
