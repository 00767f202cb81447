"""Receive attempts: a retried receive returns the same delivery; ack by attempt id."""

from __future__ import annotations

from leaseq.server.domain.types import DeliveredMessage, LeaseStatus
from leaseq.server.store.base import Store

from .conftest import Q, bodies, change, delete_status, make_queue, peek_all, receive, send


async def _attempt(
    store: Store, attempt_id: str, n: int = 10, vt: float = 30.0
) -> list[DeliveredMessage]:
    return await receive(store, Q, n, vt=vt, attempt_id=attempt_id)


async def test_a_replay_returns_the_same_messages_and_receipts(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b", "c")
    first = await _attempt(store, "att-1", n=2)
    await send(store, Q, "late")
    clock.advance(10)
    replay = await _attempt(store, "att-1", n=2)
    assert [(m.key, m.receipt, m.delivery_count) for m in replay] == [
        (m.key, m.receipt, 1) for m in first
    ]
    assert bodies(replay) == [b"a", b"b"]
    # No new delivery happened: counts and receipts are unchanged, "c" and "late" untouched.
    assert [m.delivery_count for m in await peek_all(store, Q)] == [0, 0, 1, 1]
    assert await delete_status(store, Q, first[0].receipt) is LeaseStatus.OK


async def test_a_replay_ignores_the_new_requests_limits(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b", "c")
    first = await _attempt(store, "att-1", n=3)
    replay = await receive(store, Q, 1, vt=5.0, channel_filter="nothing", attempt_id="att-1")
    assert [m.receipt for m in replay] == [m.receipt for m in first]


async def test_a_replay_returns_only_what_is_still_held(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b", "c")
    a, b, c = await _attempt(store, "att-1")
    await delete_status(store, Q, b.receipt)
    await change(store, Q, c.receipt, 0.0)  # released: no longer part of the attempt
    replay = await _attempt(store, "att-1")
    assert [m.receipt for m in replay] == [a.receipt]


async def test_a_settled_attempt_returns_nothing_until_it_expires(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a")
    [a] = await _attempt(store, "att-1", vt=30.0)
    await delete_status(store, Q, a.receipt)
    await send(store, Q, "b")
    clock.advance(29)
    outcome = await store.receive(Q, 10, visibility_timeout=30.0, attempt_id="att-1")
    assert outcome.messages == []
    assert (await store.stats(Q)).visible == 1  # "b" was not delivered
    clock.advance(1)
    assert bodies(await _attempt(store, "att-1")) == [b"b"]


async def test_after_the_leases_expire_the_id_receives_anew(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a")
    [first] = await _attempt(store, "att-1", vt=10.0)
    clock.advance(10)
    [again] = await _attempt(store, "att-1", vt=10.0)
    assert (again.key, again.delivery_count) == (first.key, 2)
    assert again.receipt != first.receipt


async def test_an_extended_lease_keeps_the_attempt_replayable(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a")
    [first] = await _attempt(store, "att-1", vt=10.0)
    await change(store, Q, first.receipt, 100.0)
    clock.advance(50)
    [replay] = await _attempt(store, "att-1", vt=10.0)
    assert (replay.receipt, replay.delivery_count) == (first.receipt, 1)


async def test_attempts_are_independent(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b")
    [a] = await _attempt(store, "att-1", n=1)
    [b] = await _attempt(store, "att-2", n=1)
    assert (a.body, b.body) == (b"a", b"b")
    assert [m.receipt for m in await _attempt(store, "att-1")] == [a.receipt]


async def test_an_empty_attempt_does_not_block_a_retry(store: Store) -> None:
    """A receive that delivered nothing leaves nothing to replay (a long poll retries it)."""
    await make_queue(store, Q)
    assert await _attempt(store, "att-1") == []
    await send(store, Q, "a")
    assert bodies(await _attempt(store, "att-1")) == [b"a"]


async def test_delete_by_attempt_id(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b", "c", "d")
    a, b, c = await _attempt(store, "att-1", n=3, vt=10.0)
    [d] = await _attempt(store, "att-2", n=1, vt=10.0)
    await change(store, Q, c.receipt, 0.0)  # released: not the attempt's any more
    clock.advance(10)  # the leases of a, b and d ended; nobody takes b or d again, but
    retaken = await receive(store, Q, 2)  # c (visible since its release) and a are redelivered
    assert [m.key for m in retaken] == [c.key, a.key]

    outcome = await store.delete(Q, [], ["att-1", "unknown", "att-2"])
    assert outcome.attempt_counts == [("att-1", 1), ("unknown", 0), ("att-2", 1)]
    assert sorted(outcome.deleted_keys) == sorted([b.key, d.key])
    assert bodies(await peek_all(store, Q)) == [b"a", b"c"]
    # Deleting by attempt leaves tombstones like deleting by receipt.
    assert await delete_status(store, Q, b.receipt) is LeaseStatus.ALREADY_DELETED
    stats = await store.stats(Q)
    assert (stats.deleted_total, stats.total) == (2, 2)
    assert (await store.delete(Q, [], ["att-1"])).attempt_counts == [("att-1", 0)]


async def test_delete_by_receipt_and_attempt_in_one_call(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b", "c")
    a, b = await _attempt(store, "att-1", n=2)
    [c] = await receive(store, Q, 1)
    outcome = await store.delete(Q, [c.receipt, a.receipt], ["att-1"])
    assert [r.status for r in outcome.results] == [LeaseStatus.OK, LeaseStatus.OK]
    assert outcome.attempt_counts == [("att-1", 1)]
    assert sorted(outcome.deleted_keys) == sorted([a.key, b.key, c.key])
    assert (await store.stats(Q)).total == 0


async def test_a_released_message_leaves_its_attempt(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b")
    a, b = await _attempt(store, "att-1")
    await change(store, Q, b.receipt, 0.0)
    outcome = await store.delete(Q, [], ["att-1"])
    assert (outcome.attempt_counts, outcome.deleted_keys) == ([("att-1", 1)], [a.key])
    assert bodies(await peek_all(store, Q)) == [b"b"]


async def test_a_replay_is_not_refused_by_the_in_flight_limit(store: Store) -> None:
    """The replay delivers nothing new, so a queue full of its own leases still answers it."""
    await make_queue(store, Q, max_in_flight=2)
    await send(store, Q, "a", "b", "c")
    first = await _attempt(store, "att-1")
    assert len(first) == 2
    replay = await _attempt(store, "att-1")
    assert [m.receipt for m in replay] == [m.receipt for m in first]
