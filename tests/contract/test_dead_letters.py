"""Dead letter queues: the move at max_delivery_count, and redrive back."""

from __future__ import annotations

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import LeaseStatus, MessageState
from leaseq.server.errors import QueueNotFound
from leaseq.server.store.base import Store

from .conftest import (
    DLQ,
    Q,
    at,
    bodies,
    change,
    delete_status,
    make_queue,
    peek_all,
    peek_one,
    receive,
    send,
)

ELSEWHERE = "elsewhere"


async def _queues(store: Store, max_deliveries: int = 2, **source_config: object) -> None:
    await make_queue(store, DLQ)
    await make_queue(
        store, Q, dead_letter_queue=DLQ, max_delivery_count=max_deliveries, **source_config
    )


async def _exhaust(store: Store, clock: FakeClock, times: int, reason: str = "failed") -> list[str]:
    """Deliver the oldest message `times` times, releasing it with a reason each time."""
    receipts = []
    for _ in range(times):
        [message] = await receive(store, Q, 1)
        await change(store, Q, message.receipt, 0.0, reason)
        receipts.append(message.receipt)
        clock.advance(1)
    return receipts


async def test_moved_instead_of_delivered_past_max_delivery_count(store: Store, clock) -> None:
    await _queues(store, max_deliveries=3)
    t0 = clock.now()
    [message_id] = await send(store, Q, "poison", attributes={"k": "v"}, channel="c")
    await _exhaust(store, clock, 3, reason="bad input")

    outcome = await store.receive(Q, 1, visibility_timeout=30.0)
    assert outcome.messages == []
    source = await store.stats(Q)
    assert (source.total, source.dead_lettered_total) == (0, 1)

    dead = await peek_one(store, DLQ)
    assert dead.message_id == message_id
    assert (dead.body, dead.attributes, dead.channel) == (b"poison", {"k": "v"}, "c")
    assert dead.enqueued_at == at(t0)
    assert (dead.delivery_count, dead.last_error) == (3, "bad input")
    assert (dead.state, dead.visible_at) == (MessageState.VISIBLE, at(clock.now()))
    assert (await store.stats(DLQ)).dead_lettered_total == 0  # counted at the source


async def test_delivered_up_to_max_delivery_count(store: Store, clock) -> None:
    await _queues(store, max_deliveries=2)
    await send(store, Q, "m")
    counts = []
    for _ in range(3):
        counts += [m.delivery_count for m in await receive(store, Q, 1, vt=5.0)]
        clock.advance(5)
    assert counts == [1, 2]
    assert (await store.stats(DLQ)).total == 1


async def test_moved_messages_do_not_count_towards_max_messages(store: Store, clock) -> None:
    await _queues(store, max_deliveries=1)
    await send(store, Q, "poison-1", "poison-2")
    await receive(store, Q, 2, vt=1.0)
    clock.advance(1)
    await send(store, Q, "fresh-1", "fresh-2")
    assert bodies(await receive(store, Q, 2)) == [b"fresh-1", b"fresh-2"]
    assert bodies(await peek_all(store, DLQ)) == [b"poison-1", b"poison-2"]
    assert (await store.stats(Q)).dead_lettered_total == 2


async def test_receipts_from_the_source_no_longer_act(store: Store, clock) -> None:
    await _queues(store, max_deliveries=1)
    await send(store, Q, "m")
    [message] = await receive(store, Q, 1, vt=1.0)
    clock.advance(1)
    await receive(store, Q, 1)  # moves it
    assert await delete_status(store, Q, message.receipt) is LeaseStatus.MESSAGE_NOT_FOUND
    assert await delete_status(store, DLQ, message.receipt) is LeaseStatus.INVALID_RECEIPT
    assert (await store.stats(DLQ)).total == 1


async def test_dead_letter_retention_runs_from_the_original_enqueue(store: Store, clock) -> None:
    await make_queue(store, DLQ, message_retention=300.0)
    await make_queue(store, Q, dead_letter_queue=DLQ, max_delivery_count=1)
    t0 = clock.now()
    await send(store, Q, "kept", "lost")
    await receive(store, Q, 1, vt=100.0)  # "kept"
    clock.advance(100)
    # "lost" (visible since t0) is delivered until t0 + 500; "kept" (since t0 + 100) is moved.
    assert bodies(await receive(store, Q, 10, vt=400.0)) == [b"lost"]
    assert (await peek_one(store, DLQ)).expires_at == at(t0 + 300.0)
    clock.advance(400)
    await receive(store, Q, 1)  # moves "lost", whose t0 + 300 is already past
    assert bodies(await peek_all(store, DLQ)) == []
    dead = await store.stats(DLQ)
    assert (dead.total, dead.expired_total) == (0, 2)
    assert (await store.stats(Q)).dead_lettered_total == 2


async def test_a_dead_letter_is_delivered_from_its_queue(store: Store, clock) -> None:
    await _queues(store, max_deliveries=1)
    await send(store, Q, "m")
    await receive(store, Q, 1, vt=1.0)
    clock.advance(1)
    await receive(store, Q, 1)
    [dead] = await receive(store, DLQ, 1)
    assert (dead.body, dead.delivery_count) == (b"m", 2)
    assert await delete_status(store, DLQ, dead.receipt) is LeaseStatus.OK


# --- redrive -------------------------------------------------------------------------------------


async def _dead_letters(store: Store, clock: FakeClock, *names: str, channel: str = "") -> None:
    """Put one message per name into DLQ via the source queue (max_delivery_count 1)."""
    for name in names:
        await send(store, Q, name, channel=channel)
    await receive(store, Q, len(names), vt=1.0)
    clock.advance(1)
    await receive(store, Q, len(names))
    assert {n.encode() for n in names} <= set(bodies(await peek_all(store, DLQ)))


async def test_redrive_to_the_source(store: Store, clock) -> None:
    await _queues(store, max_deliveries=1, message_retention=1000.0)
    t0 = clock.now()
    await send(store, Q, "m")
    [first] = await receive(store, Q, 1, vt=1.0)
    await change(store, Q, first.receipt, 0.0, "why")
    clock.advance(1)
    await receive(store, Q, 1)  # moved
    [in_dlq] = await receive(store, DLQ, 1, vt=1.0)
    clock.advance(5)

    assert await store.redrive(DLQ) == 1

    back = await peek_one(store, Q)
    assert (back.message_id, back.body, back.enqueued_at) == (first.message_id, b"m", at(t0))
    assert (back.delivery_count, back.last_error, back.state) == (0, "why", MessageState.VISIBLE)
    assert back.visible_at == at(clock.now())
    assert back.expires_at == at(clock.now() + 1000.0)
    assert (await store.stats(DLQ)).total == 0
    # Old receipts: the source's is superseded, the dead letter queue's names nothing there now.
    assert await delete_status(store, Q, first.receipt) is LeaseStatus.RECEIPT_SUPERSEDED
    assert await delete_status(store, DLQ, in_dlq.receipt) is LeaseStatus.MESSAGE_NOT_FOUND
    [again] = await receive(store, Q, 1)
    assert again.delivery_count == 1


async def test_redrive_to_a_named_queue(store: Store, clock) -> None:
    await _queues(store, max_deliveries=1)
    await make_queue(store, ELSEWHERE, message_retention=500.0)
    await _dead_letters(store, clock, "a", "b")
    assert await store.redrive(DLQ, destination=ELSEWHERE) == 2
    moved = await peek_all(store, ELSEWHERE)
    assert bodies(moved) == [b"a", b"b"]
    assert all(m.delivery_count == 0 for m in moved)
    assert all(m.expires_at == at(clock.now() + 500.0) for m in moved)
    assert (await store.stats(Q)).total == 0


async def test_redrive_max_messages_takes_the_oldest(store: Store, clock) -> None:
    await _queues(store, max_deliveries=1)
    await _dead_letters(store, clock, "a", "b", "c")
    assert await store.redrive(DLQ, max_messages=2) == 2
    assert bodies(await peek_all(store, Q)) == [b"a", b"b"]
    assert bodies(await peek_all(store, DLQ)) == [b"c"]
    assert await store.redrive(DLQ, max_messages=0) == 1  # 0: all


async def test_redrive_by_channel(store: Store, clock) -> None:
    await _queues(store, max_deliveries=1)
    await _dead_letters(store, clock, "x", channel="x.1")
    await _dead_letters(store, clock, "y", channel="y")
    assert await store.redrive(DLQ, channel_filter="x.*") == 1
    assert bodies(await peek_all(store, Q)) == [b"x"]
    assert bodies(await peek_all(store, DLQ)) == [b"y"]


async def test_redrive_moves_visible_messages_only(store: Store, clock) -> None:
    await _queues(store, max_deliveries=1)
    await _dead_letters(store, clock, "held", "free")
    await receive(store, DLQ, 1)  # leases "held"
    assert await store.redrive(DLQ) == 1
    assert bodies(await peek_all(store, Q)) == [b"free"]
    assert bodies(await peek_all(store, DLQ)) == [b"held"]


async def test_a_message_without_a_source_stays(store: Store, clock) -> None:
    await _queues(store, max_deliveries=1)
    await _dead_letters(store, clock, "orphan")
    await send(store, DLQ, "sent-directly")
    await store.delete_queue(Q)
    assert await store.redrive(DLQ) == 0
    assert bodies(await peek_all(store, DLQ)) == [b"orphan", b"sent-directly"]


async def test_redrive_from_or_to_a_missing_queue(store: Store) -> None:
    await _queues(store)
    with pytest.raises(QueueNotFound):
        await store.redrive("missing")
    with pytest.raises(QueueNotFound):
        await store.redrive(DLQ, destination="missing")


async def test_a_redriven_message_can_be_dead_lettered_again(store: Store, clock) -> None:
    await _queues(store, max_deliveries=1)
    await _dead_letters(store, clock, "m")
    await store.redrive(DLQ)
    await receive(store, Q, 1, vt=1.0)
    clock.advance(1)
    assert await receive(store, Q, 1) == []
    assert (await peek_one(store, DLQ)).delivery_count == 1
    assert (await store.stats(Q)).dead_lettered_total == 2
