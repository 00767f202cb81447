"""Wake-ups under a queue's retry policy, on the fake clock over every store: a waiting receive
wakes when a backoff ends (after a release without a delay, and after a lease ran out), and a
follow stream's released lease stops counting against max_outstanding at once.

As in test_longpoll.py, time moves only when the test advances it, and then only the timers
that instant reaches fire: a waiter not re-armed at the backoff's end would sleep until its
wait_time, beyond the safety net, and the test fails instead of passing late."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.server.clock import FakeClock
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import RunningServer

from .conftest import SAFETY_TIMEOUT, create, receive_once, send, until_sleeping

D = duration_pb2.Duration
LONG_WAIT = D(seconds=30)  # longer than SAFETY_TIMEOUT: only a wake-up can answer in time
POLICY = pb.RetryPolicy(minimum_backoff=D(seconds=3), maximum_backoff=D(seconds=3))


@pytest.fixture
async def stub(clocked: RunningServer) -> AsyncIterator[pb_grpc.QueueServiceStub]:
    async with grpc.aio.insecure_channel(clocked.target) as channel:
        yield pb_grpc.QueueServiceStub(channel)


async def advance(server: RunningServer, seconds: float) -> None:
    assert isinstance(server.clock, FakeClock)
    await asyncio.to_thread(server.clock.advance, seconds)


async def state(stub: pb_grpc.QueueServiceStub) -> int:
    page = await stub.PeekMessages(
        pb.PeekMessagesRequest(queue="q", max_messages=1, include_leased=True, include_delayed=True)
    )
    return page.messages[0].state


async def release(stub: pb_grpc.QueueServiceStub, receipt: str) -> pb.ChangeVisibilityResult:
    reply = await stub.ChangeVisibility(
        pb.ChangeVisibilityRequest(
            queue="q",
            entries=[pb.ChangeVisibilityEntry(receipt=receipt, visibility_timeout=D(seconds=0))],
        )
    )
    assert reply.results[0].status == pb.LEASE_STATUS_OK, reply
    return reply.results[0]


async def test_a_long_poll_wakes_when_a_releases_backoff_ends(clocked, stub) -> None:
    await create(stub, retry_policy=POLICY)
    await send(stub, "q", b"m")
    [first] = (await receive_once(stub, queue="q", visibility_timeout=D(seconds=30)))[0].messages
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(clocked, "q")  # it looked: the lease ends in 30 s
    result = await release(stub, first.receipt)
    assert result.visible_at.ToSeconds() - int(clocked.clock.now()) in (2, 3)
    await advance(clocked, 2.9)
    assert await state(stub) == pb.MESSAGE_STATE_DELAYED
    await advance(clocked, 0.1)
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [(m.message_id, m.delivery_count) for m in response.messages] == [(first.message_id, 2)]


async def test_a_long_poll_waits_out_the_backoff_after_a_lease_runs_out(clocked, stub) -> None:
    await create(stub, retry_policy=POLICY)
    await send(stub, "q", b"m")
    [first] = (await receive_once(stub, queue="q", visibility_timeout=D(seconds=30)))[0].messages
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(clocked, "q")
    await advance(clocked, 30)  # the lease ends: the waiter looks, learns the new instant
    assert await state(stub) == pb.MESSAGE_STATE_DELAYED
    await advance(clocked, 3)
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [(m.message_id, m.delivery_count) for m in response.messages] == [(first.message_id, 2)]


async def test_a_paused_follow_stream_resumes_when_it_releases_under_a_backoff(
    clocked, stub
) -> None:
    await create(stub, retry_policy=POLICY)
    await send(stub, "q", b"1", b"2")
    stream = stub.GetMessages(
        pb.GetMessagesRequest(
            queue="q",
            follow=True,
            max_messages=1,
            max_outstanding=1,
            visibility_timeout=D(seconds=600),
        )
    )
    try:
        first = await _next_message(stream)
        await until_sleeping(clocked, "q")  # paused: it holds its one lease
        await release(stub, first.receipt)  # not visible again for 3 s, yet no longer held
        second = await _next_message(stream)
        assert second.body == {b"1": b"2", b"2": b"1"}[first.body]
    finally:
        stream.cancel()


async def _next_message(stream) -> pb.ReceivedMessage:
    while True:
        response = await asyncio.wait_for(stream.read(), SAFETY_TIMEOUT)
        if response.messages:
            return response.messages[0]
