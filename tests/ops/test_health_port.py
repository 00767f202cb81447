"""The plaintext health port (--health-listen), the liveness name that survives the drain, and
the max connection age that spreads clients over replicas."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from leaseq.server.app import LIVENESS_SERVICE, connection_options
from leaseq.server.service import SERVICE_NAME
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import running_server

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SAFETY = 10.0


def statuses(channel: grpc.Channel) -> dict[str, int]:
    health = health_pb2_grpc.HealthStub(channel)
    return {
        name: health.Check(health_pb2.HealthCheckRequest(service=name), timeout=SAFETY).status
        for name in ("", SERVICE_NAME, LIVENESS_SERVICE)
    }


def test_health_port_serves_health_only_and_liveness_survives_the_drain() -> None:
    with (
        running_server(health_listen="127.0.0.1:0") as server,
        grpc.insecure_channel(f"127.0.0.1:{server.app.health_port}") as channel,
    ):
        assert statuses(channel) == {"": SERVING, SERVICE_NAME: SERVING, LIVENESS_SERVICE: SERVING}
        # Nothing but health there: no queue service, no reflection.
        with pytest.raises(grpc.RpcError) as caught:
            pb_grpc.QueueServiceStub(channel).ListQueues(pb.ListQueuesRequest(), timeout=SAFETY)
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.RpcError) as caught:
            list(
                reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                    iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=SAFETY
                )
            )
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        server.drain()
        # Readiness fails (out of the Service), liveness holds (no restart while draining).
        assert statuses(channel) == {
            "": NOT_SERVING,
            SERVICE_NAME: NOT_SERVING,
            LIVENESS_SERVICE: SERVING,
        }


def test_connection_options() -> None:
    assert connection_options(None) == []
    assert connection_options(300) == [
        ("grpc.max_connection_age_ms", 300_000),
        ("grpc.max_connection_age_grace_ms", 35_000),
    ]
    assert dict(connection_options(60, 5))["grpc.max_connection_age_grace_ms"] == 5000


async def test_an_aged_connection_is_closed_and_the_client_reconnects() -> None:
    """A follow stream outliving max age + grace is cut (UNAVAILABLE: the client re-opens it), and
    the same channel goes on working over a new connection."""
    async with running_server(max_connection_age=0.2, max_connection_age_grace=0.2) as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            await stub.CreateQueue(pb.CreateQueueRequest(name="q"))
            follow = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=1, follow=True))
            with pytest.raises(grpc.aio.AioRpcError) as cut:
                await asyncio.wait_for(follow.read(), SAFETY)
            assert cut.value.code() == grpc.StatusCode.UNAVAILABLE
            reply = await stub.GetQueue(pb.GetQueueRequest(name="q"), timeout=SAFETY)
            assert reply.queue.name == "q"
