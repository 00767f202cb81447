"""Long polls and follow streams over real gRPC: woken by events, flow-controlled, cancellable.

Tests synchronise on events (a stream parked on the server, a response arriving); time bounds
are only safety nets that turn a broken wake-up into a failure instead of a hang."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.server.clock import FakeClock
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import running_server

from .conftest import (
    SAFETY_TIMEOUT,
    create,
    receive_once,
    send,
    stats,
    until_parked_again,
    until_sleeping,
)

D = duration_pb2.Duration
LONG_WAIT = D(seconds=30)  # longer than SAFETY_TIMEOUT: only a wake-up can answer in time


async def next_response(stream) -> pb.GetMessagesResponse:
    return await asyncio.wait_for(stream.read(), SAFETY_TIMEOUT)


async def test_wait_time_zero_answers_at_once_with_one_empty_response(stub) -> None:
    await create(stub)
    responses = await receive_once(stub, queue="q", wait_time=D())
    assert len(responses) == 1
    assert list(responses[0].messages) == []
    assert responses[0].server_time.seconds > 0


async def test_a_waiting_receive_wakes_on_send(server, stub) -> None:
    await create(stub)
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(server, "q")
    await send(stub, "q", b"hello")
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [m.body for m in response.messages] == [b"hello"]
    assert response.messages[0].delivery_count == 1


async def test_a_waiting_receive_wakes_on_release(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"m")
    [held] = await receive_once(stub, queue="q", visibility_timeout=D(seconds=600))
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(server, "q")
    await stub.ChangeVisibility(
        pb.ChangeVisibilityRequest(
            queue="q",
            entries=[
                pb.ChangeVisibilityEntry(
                    receipt=held.messages[0].receipt, visibility_timeout=D(), reason="boom"
                )
            ],
        )
    )
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [(m.body, m.delivery_count, m.last_error) for m in response.messages] == [
        (b"m", 2, "boom")
    ]


async def test_a_waiting_receive_wakes_when_a_lease_expires(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"m")
    # A short real lease: the store has no event for time passing, the waiter's timer is it.
    [held] = await receive_once(stub, queue="q", visibility_timeout=D(nanos=200_000_000))
    [response] = await asyncio.wait_for(
        receive_once(stub, queue="q", wait_time=LONG_WAIT), SAFETY_TIMEOUT
    )
    assert [m.message_id for m in response.messages] == [held.messages[0].message_id]
    assert response.messages[0].delivery_count == 2
    assert response.messages[0].receipt != held.messages[0].receipt


async def test_a_waiting_receive_wakes_when_a_delay_ends(stub) -> None:
    await create(stub)
    await stub.SendMessages(
        pb.SendMessagesRequest(
            queue="q", entries=[pb.SendEntry(body=b"later", delay=D(nanos=200_000_000))]
        )
    )
    [response] = await asyncio.wait_for(
        receive_once(stub, queue="q", wait_time=LONG_WAIT), SAFETY_TIMEOUT
    )
    assert [m.body for m in response.messages] == [b"later"]


async def test_a_long_poll_ends_empty_after_wait_time(stub) -> None:
    await create(stub)
    responses = await asyncio.wait_for(
        receive_once(stub, queue="q", wait_time=D(nanos=100_000_000)), SAFETY_TIMEOUT
    )
    assert len(responses) == 1 and list(responses[0].messages) == []


async def test_cancelling_a_long_poll_frees_it_at_once(server, stub) -> None:
    await create(stub)
    call = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=1, wait_time=LONG_WAIT))
    await until_sleeping(server, "q")
    call.cancel()
    await until_sleeping(server, "q", 0)
    await send(stub, "q", b"m")
    current = await stats(stub)
    assert (current.visible, current.leased) == (1, 0)  # the cancelled poll took nothing


async def test_deleting_the_queue_ends_a_waiting_receive_with_not_found(server, stub) -> None:
    await create(stub)
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(server, "q")
    await stub.DeleteQueue(pb.DeleteQueueRequest(name="q"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


# --- follow streams ---------------------------------------------------------------------------


def follow(stub, **request) -> grpc.aio.UnaryStreamCall:
    request.setdefault("max_messages", 10)
    request.setdefault("visibility_timeout", D(seconds=600))
    return stub.GetMessages(pb.GetMessagesRequest(queue="q", follow=True, **request))


async def read_messages(stream, count: int) -> list[pb.ReceivedMessage]:
    messages: list[pb.ReceivedMessage] = []
    while len(messages) < count:
        messages.extend((await next_response(stream)).messages)
    return messages


async def test_follow_streams_batches_as_messages_arrive(server, stub) -> None:
    await create(stub)
    stream = follow(stub)
    await until_sleeping(server, "q")
    await send(stub, "q", b"1")
    assert [m.body for m in await read_messages(stream, 1)] == [b"1"]
    await until_sleeping(server, "q")
    await send(stub, "q", b"2", b"3")
    assert [m.body for m in await read_messages(stream, 2)] == [b"2", b"3"]
    stream.cancel()


async def test_follow_pauses_at_max_outstanding_and_resumes_on_delete(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2", b"3")
    stream = follow(stub, max_outstanding=2)
    first = await read_messages(stream, 2)
    assert [m.body for m in first] == [b"1", b"2"]
    # Paused: parked although a message is visible.
    await until_sleeping(server, "q")
    current = await stats(stub)
    assert (current.leased, current.visible) == (2, 1)

    await stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q", receipts=[first[0].receipt]))
    assert [m.body for m in await read_messages(stream, 1)] == [b"3"]
    await until_sleeping(server, "q")  # paused again: 2 outstanding
    stream.cancel()


async def test_follow_resumes_when_a_lease_is_released(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2")
    stream = follow(stub, max_outstanding=1)
    [first] = await read_messages(stream, 1)
    await until_sleeping(server, "q")
    await stub.ChangeVisibility(
        pb.ChangeVisibilityRequest(
            queue="q",
            entries=[pb.ChangeVisibilityEntry(receipt=first.receipt, visibility_timeout=D())],
        )
    )
    # The released message is visible since the release, so "2" (visible since its send) is
    # the oldest visible one.
    [second] = await read_messages(stream, 1)
    assert second.body == b"2"
    stream.cancel()


async def test_follow_resumes_when_a_lease_expires(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2")
    stream = follow(stub, max_outstanding=1, visibility_timeout=D(nanos=200_000_000))
    [first] = await read_messages(stream, 1)
    [second] = await read_messages(stream, 1)  # only after the first lease ended
    assert (first.body, second.body) == (b"1", b"2")
    stream.cancel()


async def test_follow_extension_keeps_the_stream_paused() -> None:
    # A fake clock jumps past the original lease end; had the stream kept that end, it would
    # count the lease as settled and deliver "2".
    clock = FakeClock()
    async with running_server(clock=clock) as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            await create(stub)
            await send(stub, "q", b"1", b"2")
            stream = follow(stub, max_outstanding=1, visibility_timeout=D(seconds=30))
            [first] = await read_messages(stream, 1)
            await stub.ChangeVisibility(
                pb.ChangeVisibilityRequest(
                    queue="q",
                    entries=[
                        pb.ChangeVisibilityEntry(
                            receipt=first.receipt, visibility_timeout=D(seconds=600)
                        )
                    ],
                )
            )
            await until_sleeping(server, "q")
            parked = await asyncio.to_thread(server.parks, "q")
            await asyncio.to_thread(server.advance, 31)  # wakes every waiter
            await until_parked_again(server, "q", parked)
            current = await stats(stub)
            assert (current.leased, current.visible) == (1, 1)
            await stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q", receipts=[first.receipt]))
            [second] = await read_messages(stream, 1)
            assert second.body == b"2"
            stream.cancel()


async def test_follow_waits_at_the_in_flight_limit(server, stub) -> None:
    await create(stub, max_in_flight=1)
    await send(stub, "q", b"1", b"2")
    [held] = await receive_once(stub, queue="q", max_messages=1)
    stream = follow(stub)
    await until_sleeping(server, "q")  # waiting on OverLimit, not failing
    await stub.DeleteMessages(
        pb.DeleteMessagesRequest(queue="q", receipts=[held.messages[0].receipt])
    )
    [second] = await read_messages(stream, 1)
    assert second.body == b"2"
    stream.cancel()


async def test_follow_resumes_after_purge(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2")
    stream = follow(stub, max_outstanding=1)
    [first] = await read_messages(stream, 1)
    await until_sleeping(server, "q")
    await stub.PurgeQueue(pb.PurgeQueueRequest(name="q"))  # every lease is gone
    await send(stub, "q", b"3")
    [third] = await read_messages(stream, 1)
    assert third.body == b"3"
    stream.cancel()


async def test_drain_ends_follow_streams_cleanly(server, stub) -> None:
    await create(stub)
    stream = follow(stub)
    await until_sleeping(server, "q")
    await asyncio.to_thread(server.drain)
    assert await next_response(stream) is grpc.aio.EOF
    assert await stream.code() == grpc.StatusCode.OK


async def test_drain_answers_a_waiting_long_poll_now(server, stub) -> None:
    await create(stub)
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(server, "q")
    await asyncio.to_thread(server.drain)
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert list(response.messages) == []


async def test_cancelled_follow_stream_is_forgotten(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1")
    stream = follow(stub, max_outstanding=1)
    [first] = await read_messages(stream, 1)
    await until_sleeping(server, "q")
    stream.cancel()
    await until_sleeping(server, "q", 0)

    # Its lease still counts in the store until deleted, which now touches no stream.
    await stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q", receipts=[first.receipt]))
    assert (await stats(stub)).total == 0
