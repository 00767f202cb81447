"""AsyncConsumer against a real server: the same guarantees as Consumer, with coroutine
handlers; and its own close semantics (handlers still running at the timeout are cancelled and
their messages released)."""

from __future__ import annotations

import asyncio

import pytest

from leaseq.client import AsyncConsumer, AsyncQueueClient, Message, QueueNotFound

LEASE = 1.0
WAIT = 20.0


async def test_long_and_failing_handlers(aclient: AsyncQueueClient, queue_name: str) -> None:
    await aclient.create_queue(queue_name, visibility_timeout=LEASE)
    slow_id = await aclient.send(queue_name, "slow")
    await aclient.send(queue_name, "flaky")
    seen: list[tuple[str, int, str]] = []
    flaky_retried = asyncio.Event()

    async def handle(msg: Message) -> None:
        seen.append((msg.text, msg.delivery_count, msg.last_error))
        if msg.text == "slow":
            await asyncio.sleep(3 * LEASE)  # the work: three leases long
        elif msg.delivery_count == 1:
            raise ConnectionError("try again")
        else:
            flaky_retried.set()

    async with AsyncConsumer(aclient, queue_name, handle, concurrency=2) as consumer:
        await asyncio.wait_for(flaky_retried.wait(), WAIT)
        assert await consumer.close(timeout=WAIT)  # waits for "slow" to finish
    stats = consumer.stats()
    assert sorted(seen) == [
        ("flaky", 1, ""),
        ("flaky", 2, "ConnectionError: try again"),
        ("slow", 1, ""),
    ]
    assert stats.lost_leases == 0 and stats.extensions >= 3 and stats.succeeded == 2
    queue = await aclient.stats(queue_name)
    assert (queue.total, queue.deleted_total) == (0, 2)
    assert slow_id not in {m.message_id for m in await aclient.peek(queue_name)}


async def test_close_timeout_cancels_and_releases(aclient: AsyncQueueClient, queue: str) -> None:
    await aclient.send_batch(queue, ["stuck", "waiting"])
    started = asyncio.Event()

    async def handle(msg: Message) -> None:
        started.set()
        await asyncio.Event().wait()  # never finishes by itself

    consumer = await AsyncConsumer(aclient, queue, handle, concurrency=1).start()
    await asyncio.wait_for(started.wait(), WAIT)
    assert await consumer.close(timeout=0.1) is False
    stats = consumer.stats()
    assert (stats.running, stats.held, stats.unstarted_released) == (0, 0, 1)
    queue_stats = await aclient.stats(queue)
    assert (queue_stats.leased, queue_stats.visible) == (0, 2)
    assert {m.last_error for m in await aclient.peek(queue)} == {""}  # nothing failed


async def test_a_deleted_queue_stops_the_consumer(aclient: AsyncQueueClient, queue: str) -> None:
    async def handle(msg: Message) -> None:
        pass

    consumer = await AsyncConsumer(aclient, queue, handle).start()
    await aclient.delete_queue(queue)
    with pytest.raises(QueueNotFound):
        await consumer.wait(WAIT)
    assert await consumer.close(timeout=WAIT)
