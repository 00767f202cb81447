"""AsyncConsumer against a real server: the same guarantees as Consumer, with coroutine
handlers; and its own close semantics (handlers still running at the timeout are cancelled and
their messages released)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from leaseq.client import AsyncConsumer, AsyncQueueClient, Message, QueueNotFound
from leaseq.server.clock import FakeClock
from tests.support.server import running_server

from .conftest import FAST_RETRY

LEASE = 1.0
WAIT = 20.0

PACE_TICK = 0.01
PACE_STEP = 0.05


@pytest.fixture
async def paced_client() -> AsyncIterator[AsyncQueueClient]:
    """A client of a server whose clock is paced by this test's event loop: it follows real time
    while the loop runs, but moves at most PACE_STEP per tick of the loop. A stall of the whole
    machine (a full run under CPU load once kept the consumer's extension of a 1 s lease more
    than its 0.5 s margin late: lost_leases == 1) then passes no lease time the consumer did not
    also have; a consumer that is late while its loop runs still loses the lease."""
    clock = FakeClock(start=time.time())

    async def pace() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(PACE_TICK)
            now = time.monotonic()
            clock.advance(min(now - last, PACE_STEP))
            last = now

    pacer = asyncio.create_task(pace())
    try:
        async with running_server(clock=clock) as server:
            async with AsyncQueueClient(server.target, retry=FAST_RETRY, timeout=10) as client:
                yield client
    finally:
        pacer.cancel()


async def test_long_and_failing_handlers(paced_client: AsyncQueueClient, queue_name: str) -> None:
    aclient = paced_client
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
