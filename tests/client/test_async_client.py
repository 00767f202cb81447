"""Every AsyncQueueClient method, round trip against a real server (memory store).

The sync tests check the semantics in depth; these check that the async client drives the same
plans correctly: each method once, with its result types.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, timedelta

import pytest

from leaseq.client import (
    AsyncQueueClient,
    InvalidArgument,
    LeaseStatus,
    MessageState,
    QueueAlreadyExists,
    QueueNotFound,
    SendEntry,
)
from tests.support.server import running_server


async def test_queue_methods(aclient: AsyncQueueClient, queue_name: str) -> None:
    created = await aclient.create_queue(queue_name, visibility_timeout=timedelta(minutes=2))
    assert created.config.visibility_timeout == timedelta(minutes=2)
    assert created.create_time.tzinfo is UTC
    assert await aclient.get_queue(queue_name) == created
    with pytest.raises(QueueAlreadyExists):
        await aclient.create_queue(queue_name, visibility_timeout=5)
    others = [f"{queue_name}-{i}" for i in range(3)]
    for name in others:
        await aclient.create_queue(name)
    listed = await aclient.list_queues(queue_name, page_size=1)
    assert [q.name for q in listed] == [queue_name, *others]
    updated = await aclient.update_queue(queue_name, max_in_flight=7)
    assert updated.config.max_in_flight == 7
    assert updated.config.visibility_timeout == timedelta(minutes=2)
    await aclient.send_batch(queue_name, ["a", "b"])
    stats = await aclient.stats(queue_name)
    assert (stats.visible, stats.total) == (2, 2)
    assert await aclient.purge_queue(queue_name) == 2
    await aclient.delete_queue(queue_name)
    with pytest.raises(QueueNotFound):
        await aclient.get_queue(queue_name)


async def test_message_methods(aclient: AsyncQueueClient, queue: str) -> None:
    message_id = await aclient.send(queue, "a", attributes={"k": "v"})
    results = await aclient.send_batch(queue, [SendEntry(b"b", channel="c"), "c"])
    assert all(r.ok for r in results)
    peeked = await aclient.peek(queue, 10)
    assert [m.body for m in peeked] == [b"a", b"b", b"c"]
    assert {m.state for m in peeked} == {MessageState.VISIBLE}

    a, b = await aclient.receive(queue, 2, visibility_timeout=60, wait_time=0)
    assert (a.message_id, a.attributes, a.delivery_count) == (message_id, {"k": "v"}, 1)
    assert (await aclient.extend(queue, a, 120)).ok
    [changed] = await aclient.change_visibility(queue, [(b.receipt, 90)])
    assert changed.status is LeaseStatus.OK
    assert (await aclient.release(queue, b, reason="later")).ok

    updated = await aclient.update_message(queue, a, body="a2", visibility_timeout=60)
    deleted = await aclient.delete(queue, [updated.receipt, a.receipt])
    assert [r.status for r in deleted.results] == [
        LeaseStatus.OK,
        LeaseStatus.RECEIPT_SUPERSEDED,  # the update superseded the old receipt
    ]

    again = await aclient.receive(queue, 10, wait_time=0, attempt_id="att")
    # c has been visible longer than the released b, so it goes first.
    assert [(m.body, m.last_error) for m in again] == [(b"c", ""), (b"b", "later")]
    removed = await aclient.delete(queue, (), attempt_ids=["att"])
    assert removed.attempt_results == {"att": 2}
    assert (await aclient.stats(queue)).total == 0


async def test_receive_long_poll(aclient: AsyncQueueClient, queue: str) -> None:
    waiting = asyncio.create_task(aclient.receive(queue, wait_time=20))
    await aclient.send(queue, "late")
    assert [m.body for m in await waiting] == [b"late"]


async def test_stream(aclient: AsyncQueueClient, queue: str) -> None:
    received = []
    async with aclient.stream(queue, max_messages=5, visibility_timeout=60) as stream:
        await aclient.send_batch(queue, ["a", "b"])
        async for batch in stream:
            received += [m.body for m in batch]
            await aclient.delete(queue, batch)
            if len(received) == 2:
                stream.cancel()
    assert received == [b"a", b"b"]


async def test_stream_cancel_from_another_task(aclient: AsyncQueueClient, queue: str) -> None:
    stream = aclient.stream(queue)

    async def drain() -> list[object]:
        return [batch async for batch in stream]

    reader = asyncio.create_task(drain())
    await asyncio.sleep(0)  # let the reader start waiting: nothing will arrive
    stream.cancel()
    assert await reader == []


async def test_task_cancellation_is_not_swallowed(aclient: AsyncQueueClient, queue: str) -> None:
    stream = aclient.stream(queue)
    reader = asyncio.create_task(stream.__anext__())
    await asyncio.sleep(0)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    stream.cancel()


async def test_redrive(aclient: AsyncQueueClient, queue_name: str) -> None:
    dlq = (await aclient.create_queue(f"{queue_name}-dlq")).name
    await aclient.create_queue(queue_name, dead_letter_queue=dlq, max_delivery_count=1)
    await aclient.send(queue_name, "poison")
    [msg] = await aclient.receive(queue_name, wait_time=0)
    await aclient.release(queue_name, msg)
    assert await aclient.receive(queue_name, wait_time=0) == []
    assert await aclient.redrive(dlq) == 1
    assert [m.body for m in await aclient.peek(queue_name)] == [b"poison"]


async def test_errors(aclient: AsyncQueueClient, queue: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await aclient.receive(queue, 0)
    assert (caught.value.field, caught.value.minimum, caught.value.maximum) == (
        "max_messages",
        "1",
        "10000",
    )
    with pytest.raises(QueueNotFound):
        async with aclient.stream(f"{queue}-missing") as stream:
            await stream.__anext__()


async def test_client_made_outside_the_loop_works_inside(server: object) -> None:
    # The channel is opened lazily on the running loop, so construction may happen anywhere.
    client = AsyncQueueClient(server.target)  # type: ignore[attr-defined]
    try:
        assert isinstance(await client.list_queues(), list)
    finally:
        await client.close()


async def test_stream_ends_when_the_server_drains() -> None:
    async with running_server() as server:
        async with AsyncQueueClient(server.target) as client:
            await client.create_queue("q")
            async with client.stream("q") as stream:
                await client.send("q", "a")
                assert [m.body for m in await stream.__anext__()] == [b"a"]
                await asyncio.to_thread(server.drain)
                assert [batch async for batch in stream] == []
