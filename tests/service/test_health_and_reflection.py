"""grpc.health.v1 (per service, NOT_SERVING on drain), reflection, and `serve`'s lifecycle."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from leaseq.server.app import serve
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc

from .conftest import SAFETY_TIMEOUT

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def check(channel, service: str) -> int:
    reply = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service)
    )
    return reply.status


async def test_health_serving_then_not_serving_on_drain(server, channel) -> None:
    assert await check(channel, "") == SERVING
    assert await check(channel, "leaseq.v1.QueueService") == SERVING
    await asyncio.to_thread(server.drain)
    assert await check(channel, "") == NOT_SERVING
    assert await check(channel, "leaseq.v1.QueueService") == NOT_SERVING


async def test_health_of_an_unknown_service_is_not_found(channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await check(channel, "no.such.Service")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_reflection_lists_and_describes_the_services(channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="leaseq.v1.QueueService"),
    ]
    replies = [r async for r in stub.ServerReflectionInfo(iter(requests))]
    names = {s.name for s in replies[0].list_services_response.service}
    assert {"leaseq.v1.QueueService", "grpc.health.v1.Health"} <= names
    files = replies[1].file_descriptor_response.file_descriptor_proto
    assert files, replies[1]


def test_running_server_works_from_sync_code() -> None:
    from tests.support.server import running_server

    with running_server() as server, grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        stub.CreateQueue(pb.CreateQueueRequest(name="q"))
        stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"x")]))
        [reply] = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=1))
        assert reply.messages[0].body == b"x"
        assert server.call(lambda: server.store.stats("q")).leased == 1


def test_running_server_with_a_fake_clock() -> None:
    from leaseq.server.clock import FakeClock
    from tests.support.server import running_server

    clock = FakeClock()
    with running_server(clock=clock) as server, grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        stub.CreateQueue(pb.CreateQueueRequest(name="q"))
        stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"x")]))
        [first] = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=1))
        assert first.server_time.seconds == int(clock.now())
        server.advance(31)  # past the default 30 s lease
        [again] = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=1))
        assert again.messages[0].delivery_count == 2


async def _serve_until(stop_action) -> None:
    """Run serve() on this loop; once ready, check health, then stop it with stop_action."""
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve("memory://", "127.0.0.1:0", grace=1.0, ready=ready.set_result, stop=stop)
    )
    port = await asyncio.wait_for(ready, SAFETY_TIMEOUT)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        assert await check(channel, "leaseq.v1.QueueService") == SERVING
        stub = pb_grpc.QueueServiceStub(channel)
        await stub.CreateQueue(pb.CreateQueueRequest(name="q"))
        await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry()]))
        follow = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=1, follow=True))
        first = await asyncio.wait_for(follow.read(), SAFETY_TIMEOUT)  # the stream is running
        assert len(first.messages) == 1
        stop_action(stop)
        await asyncio.wait_for(task, SAFETY_TIMEOUT)
        # Drained: the follow stream ended cleanly, not cut off with an error.
        assert await follow.read() is grpc.aio.EOF
        assert await follow.code() == grpc.StatusCode.OK


async def test_serve_stops_on_its_stop_event() -> None:
    await _serve_until(lambda stop: stop.set())


async def test_serve_drains_on_sigterm() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    await _serve_until(lambda stop: os.kill(os.getpid(), signal.SIGTERM))
