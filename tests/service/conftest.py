"""Fixtures for service tests: a real server on a free loopback port, and the raw generated stub
on a grpc.aio channel of the test's own event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from leaseq.server.clock import FakeClock
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import RunningServer, running_server

# Channel limits matching the server's, so big-batch tests measure the server, not the client.
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]

# A safety net only: tests wait for events; this bounds a broken wake-up so it fails, not hangs.
SAFETY_TIMEOUT = 10.0


def _serve_on_each_store(
    request, tmp_path, clock: FakeClock | None = None
) -> Iterator[RunningServer]:
    """A running server over the store named by the fixture's param (PostgreSQL: a schema of the
    test's own, skipped when unreachable unless LEASEQ_REQUIRE_POSTGRES=1, dropped afterwards)."""
    if request.param == "postgres":
        from tests.support.postgres import fresh_schema, store_url

        with fresh_schema() as schema:
            with running_server(store_url(schema, pool_min=1, pool_max=4), clock) as running:
                yield running
        return
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'leaseq.db'}"
    with running_server(url, clock) as running:
        yield running


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def server(request, tmp_path) -> Iterator[RunningServer]:
    """The service over each store: the service's behaviour must not depend on the backend."""
    yield from _serve_on_each_store(request, tmp_path)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def clocked(request, tmp_path) -> Iterator[RunningServer]:
    """A server on a FakeClock, over each store."""
    yield from _serve_on_each_store(request, tmp_path, FakeClock())


@pytest.fixture
async def channel(server: RunningServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(server.target, options=CHANNEL_OPTIONS) as chan:
        yield chan


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> pb_grpc.QueueServiceStub:
    return pb_grpc.QueueServiceStub(channel)


@dataclass
class Details:
    """The google.rpc.Status of a failed call, its details unpacked by type."""

    code: grpc.StatusCode
    status: status_pb2.Status
    bad_request: error_details_pb2.BadRequest | None = None
    error_info: error_details_pb2.ErrorInfo | None = None
    retry_info: error_details_pb2.RetryInfo | None = None
    others: list[any_pb2.Any] = field(default_factory=list)

    @property
    def violations(self) -> list[tuple[str, str]]:
        if self.bad_request is None:
            return []
        return [(v.field, v.description) for v in self.bad_request.field_violations]


def details_of(error: grpc.aio.AioRpcError) -> Details:
    status = rpc_status.from_call(error)
    assert status is not None, f"no google.rpc.Status in the trailers of {error!r}"
    result = Details(code=error.code(), status=status)
    for detail in status.details:
        for name, cls in (
            ("bad_request", error_details_pb2.BadRequest),
            ("error_info", error_details_pb2.ErrorInfo),
            ("retry_info", error_details_pb2.RetryInfo),
        ):
            if detail.Is(cls.DESCRIPTOR):
                message = cls()
                detail.Unpack(message)
                setattr(result, name, message)
                break
        else:
            result.others.append(detail)
    return result


async def rpc_error(call) -> grpc.aio.AioRpcError:
    """Await a unary call (or drain a streaming one) that must fail; its error."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    return caught.value


async def create(stub: pb_grpc.QueueServiceStub, name: str = "q", **config) -> pb.Queue:
    reply = await stub.CreateQueue(
        pb.CreateQueueRequest(name=name, config=pb.QueueConfig(**config))
    )
    return reply.queue


async def send(stub: pb_grpc.QueueServiceStub, queue: str, *bodies: bytes) -> list[str]:
    reply = await stub.SendMessages(
        pb.SendMessagesRequest(
            queue=queue, entries=[pb.SendEntry(id=str(i), body=b) for i, b in enumerate(bodies)]
        )
    )
    assert not any(r.HasField("error") for r in reply.results), reply
    return [r.message_id for r in reply.results]


async def receive_once(stub: pb_grpc.QueueServiceStub, **request) -> list[pb.GetMessagesResponse]:
    request.setdefault("max_messages", 10)
    return [r async for r in stub.GetMessages(pb.GetMessagesRequest(**request))]


async def stats(stub: pb_grpc.QueueServiceStub, queue: str = "q") -> pb.QueueStats:
    return (await stub.GetQueueStats(pb.GetQueueStatsRequest(name=queue))).stats


async def until_sleeping(server: RunningServer, queue: str, count: int = 1) -> None:
    """Wait until count streams of queue are parked on the server, waiting for an event.

    The stream's progress is invisible to the client; the server's gauge is the only way to know
    the waiter really sleeps before the test acts. Looked at every few ms, bounded by the
    safety net (this is the test's synchronisation, not a timed assertion)."""

    async def poll() -> None:
        while await asyncio.to_thread(server.sleeping, queue) != count:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), SAFETY_TIMEOUT)


async def until_parked_again(server: RunningServer, queue: str, parked: int) -> None:
    """Wait until a woken stream of queue has looked at the store and parked once more."""

    async def poll() -> None:
        while await asyncio.to_thread(server.parks, queue) <= parked:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), SAFETY_TIMEOUT)
