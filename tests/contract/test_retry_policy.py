"""The retry policy (redeliveries spaced by a backoff) and dead-lettering on request."""

from __future__ import annotations

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import LeaseStatus, MessageState, RetryPolicy, VisibilityChange
from leaseq.server.errors import NoDeadLetterQueue
from leaseq.server.store.base import Store

from .conftest import (
    DLQ,
    Q,
    at,
    change,
    delete_status,
    make_queue,
    peek_all,
    peek_one,
    receive,
    receive_one,
    send,
)

POLICY = RetryPolicy(minimum_backoff=1.0, maximum_backoff=4.0)
LEASE = 10.0


async def test_a_crash_looping_consumer_is_redelivered_at_1_2_4_4_seconds(
    store: Store, clock: FakeClock
) -> None:
    await make_queue(store, Q, retry_policy=POLICY)
    await send(store, Q, "poison")
    first = await receive_one(store, Q, vt=LEASE)
    assert first.visible_at == at(clock.now() + LEASE)  # the lease end, as without a policy
    gaps = []
    for _ in range(4):
        clock.advance(LEASE)  # the consumer died: its lease runs out
        assert await receive(store, Q, 1, vt=LEASE) == []
        waited = 0.0
        while not await receive(store, Q, 1, vt=LEASE):
            clock.advance(0.5)
            waited += 0.5
        gaps.append(waited)
    assert gaps == [1.0, 2.0, 4.0, 4.0]
    assert (await peek_one(store, Q)).delivery_count == 5


async def test_an_ended_lease_waits_out_its_backoff_delayed_and_no_longer_in_flight(
    store: Store, clock: FakeClock
) -> None:
    await make_queue(store, Q, retry_policy=POLICY, max_in_flight=1)
    await send(store, Q, "a")
    message = await receive_one(store, Q, vt=LEASE)
    clock.advance(LEASE + 0.5)
    [peeked] = await peek_all(store, Q)
    assert peeked.state is MessageState.DELAYED
    assert peeked.visible_at == at(message.visible_at + 1.0)
    stats = await store.stats(Q)
    assert (stats.visible, stats.leased, stats.delayed) == (0, 0, 1)
    outcome = await store.receive(Q, 1, visibility_timeout=LEASE)
    assert outcome.messages == [] and outcome.next_visible_at == at(message.visible_at + 1.0)
    # Its old receipt: the lease has ended (as without a policy), yet it still deletes.
    assert (await change(store, Q, message.receipt, 5.0))[0] is LeaseStatus.LEASE_EXPIRED
    assert await delete_status(store, Q, message.receipt) is LeaseStatus.OK


async def test_release_without_a_delay_obeys_the_policy(store: Store, clock: FakeClock) -> None:
    await make_queue(store, Q, retry_policy=POLICY)
    await send(store, Q, "a")
    for expected in (1.0, 2.0, 4.0, 4.0):
        message = await receive_one(store, Q, vt=LEASE)
        status, visible_at = await change(store, Q, message.receipt, 0.0, "failed")
        assert status is LeaseStatus.OK and visible_at == at(clock.now() + expected)
        peeked = await peek_one(store, Q)
        assert (peeked.state, peeked.last_error) == (MessageState.DELAYED, "failed")
        clock.advance(expected - 0.01)
        assert await receive(store, Q, 1, vt=LEASE) == []
        clock.advance(0.01)
        assert (await peek_one(store, Q)).state is MessageState.VISIBLE
    assert (await peek_one(store, Q)).delivery_count == 4


async def test_release_with_a_delay_does_not_obey_the_policy(
    store: Store, clock: FakeClock
) -> None:
    await make_queue(store, Q, retry_policy=POLICY)
    await send(store, Q, "a")
    message = await receive_one(store, Q, vt=LEASE)
    status, visible_at = await change(store, Q, message.receipt, 3.0, "later")
    assert status is LeaseStatus.OK and visible_at == at(clock.now() + 3.0)
    clock.advance(2.99)
    assert await receive(store, Q, 1, vt=LEASE) == []
    clock.advance(0.01)
    [again] = await receive(store, Q, 1, vt=LEASE)
    assert (again.delivery_count, again.last_error) == (2, "later")


async def test_an_explicit_release_now_skips_the_backoff(store: Store, clock: FakeClock) -> None:
    await make_queue(store, Q, retry_policy=POLICY)
    await send(store, Q, "a")
    message = await receive_one(store, Q, vt=LEASE)
    [result] = await store.change_visibility(
        Q, [VisibilityChange(message.receipt, 0.0, backoff=False)]
    )
    assert result.visible_at == at(clock.now())
    assert len(await receive(store, Q, 1, vt=LEASE)) == 1


async def test_without_a_policy_an_ended_lease_is_visible_at_once(
    store: Store, clock: FakeClock
) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a")
    await receive_one(store, Q, vt=LEASE)
    clock.advance(LEASE)
    assert len(await receive(store, Q, 1, vt=LEASE)) == 1


# --- dead-lettering on request ---------------------------------------------------------------


async def _with_dlq(store: Store) -> None:
    await make_queue(store, DLQ)
    await make_queue(store, Q, dead_letter_queue=DLQ, max_delivery_count=5)


async def test_dead_letter_moves_now_with_the_reason(store: Store, clock: FakeClock) -> None:
    await _with_dlq(store)
    t0 = clock.now()
    [message_id] = await send(store, Q, "poison", attributes={"k": "v"})
    clock.advance(1)
    first = await receive_one(store, Q)
    await change(store, Q, first.receipt, 0.0, "try again")
    message = await receive_one(store, Q)
    outcome = await store.dead_letter(Q, [message.receipt], "cannot parse")
    assert [r.status for r in outcome.results] == [LeaseStatus.OK]
    assert outcome.dead_letter_queue == DLQ
    assert (await store.stats(Q)).total == 0
    assert (await store.stats(Q)).dead_lettered_total == 1
    dead = await peek_one(store, DLQ)
    assert (dead.message_id, dead.body, dead.attributes) == (message_id, b"poison", {"k": "v"})
    assert (dead.delivery_count, dead.last_error) == (2, "cannot parse")
    assert dead.enqueued_at == at(t0)
    assert dead.state is MessageState.VISIBLE and dead.source_queue == Q
    # The old receipt: gone from the queue, as after a receive's move.
    assert await delete_status(store, Q, message.receipt) is LeaseStatus.MESSAGE_NOT_FOUND
    # Redrive brings it back.
    assert await store.redrive(DLQ) == 1
    assert len(await receive(store, Q)) == 1


async def test_dead_letter_after_the_lease_ended_and_without_a_reason(
    store: Store, clock: FakeClock
) -> None:
    await _with_dlq(store)
    await send(store, Q, "a")
    message = await receive_one(store, Q, vt=5.0)
    await change(store, Q, message.receipt, 5.0, "kept")
    clock.advance(6)
    # Like a delete: the latest receipt works after its lease ended.
    outcome = await store.dead_letter(Q, [message.receipt], "")
    assert outcome.results[0].status is LeaseStatus.OK
    assert (await peek_one(store, DLQ)).last_error == "kept"


async def test_dead_letter_stale_receipts_get_the_statuses_of_delete(
    store: Store, clock: FakeClock
) -> None:
    await _with_dlq(store)
    await send(store, Q, "superseded", "deleted", "moved")
    old = await receive_one(store, Q, vt=1.0)
    clock.advance(1)
    deleted, moved, new = await receive(store, Q, 3)
    assert new.message_id == old.message_id
    assert await delete_status(store, Q, deleted.receipt) is LeaseStatus.OK
    other_queue_receipt = await _receipt_of_another_queue(store)
    outcome = await store.dead_letter(
        Q,
        [old.receipt, deleted.receipt, moved.receipt, moved.receipt, "junk", other_queue_receipt],
        "why",
    )
    assert [r.status for r in outcome.results] == [
        LeaseStatus.RECEIPT_SUPERSEDED,
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.OK,
        LeaseStatus.MESSAGE_NOT_FOUND,
        LeaseStatus.INVALID_RECEIPT,
        LeaseStatus.INVALID_RECEIPT,
    ]
    assert [m.body for m in await peek_all(store, DLQ)] == [b"moved"]
    assert (await store.stats(Q)).dead_lettered_total == 1


async def _receipt_of_another_queue(store: Store) -> str:
    await make_queue(store, "another")
    await send(store, "another", "x")
    return (await receive_one(store, "another")).receipt


async def test_dead_letter_without_a_dead_letter_queue_fails(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a")
    message = await receive_one(store, Q)
    with pytest.raises(NoDeadLetterQueue):
        await store.dead_letter(Q, [message.receipt], "why")
    # Nothing changed: the lease still holds.
    assert (await peek_one(store, Q)).state is MessageState.LEASED
