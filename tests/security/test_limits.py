"""Limits enforced before work: request size, streams per connection, receive streams in total,
and deadlines (a cancelled or timed-out long poll frees its slot at once)."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from leaseq.server.domain import limits
from leaseq.server.limits import LARGEST_ENTRY_BYTES, LARGEST_MESSAGE_BYTES, Limits
from leaseq.server.service import MAX_GRPC_MESSAGE_BYTES
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import RunningServer, running_server

UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
SAFETY = 10.0


def long_poll(stub: pb_grpc.QueueServiceStub, queue: str = "q", **kwargs):
    request = pb.GetMessagesRequest(
        queue=queue, max_messages=1, wait_time=duration_pb2.Duration(seconds=30)
    )
    return stub.GetMessages(request, **kwargs)


def wait_active(server: RunningServer, predicate) -> int:
    limiter = server.app.stream_limiter
    return server.call(lambda: limiter.wait_until(predicate), timeout=SAFETY)


def test_receive_streams_over_the_cap_are_refused_and_a_cancel_frees_a_slot_at_once() -> None:
    with (
        running_server(limits=Limits(max_receive_streams=2)) as server,
        grpc.insecure_channel(server.target) as channel,
    ):
        stub = pb_grpc.QueueServiceStub(channel)
        stub.CreateQueue(pb.CreateQueueRequest(name="q"))
        first, second = long_poll(stub), long_poll(stub)
        wait_active(server, lambda n: n == 2)

        with pytest.raises(grpc.RpcError) as refused:
            next(long_poll(stub))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        status = rpc_status.from_call(refused.value)
        infos = [d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
        info = error_details_pb2.ErrorInfo()
        infos[0].Unpack(info)
        assert info.reason == "TOO_MANY_STREAMS" and info.metadata["limit"] == "2"

        first.cancel()
        wait_active(server, lambda n: n == 1)  # at once: no need to wait for its 30 s
        third = long_poll(stub)
        wait_active(server, lambda n: n == 2)
        for call in (second, third):
            call.cancel()
        wait_active(server, lambda n: n == 0)
        assert server.app.stream_limiter.refused == 1


def test_a_long_poll_past_its_deadline_frees_its_slot() -> None:
    with (
        running_server(limits=Limits(max_receive_streams=1)) as server,
        grpc.insecure_channel(server.target) as channel,
    ):
        stub = pb_grpc.QueueServiceStub(channel)
        stub.CreateQueue(pb.CreateQueueRequest(name="q"))
        with pytest.raises(grpc.RpcError) as late:
            list(long_poll(stub, timeout=0.3))  # the client's deadline, far below wait_time
        assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_active(server, lambda n: n == 0)
        # The slot is free: a new receive is served.
        stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"x")]))
        [reply] = list(long_poll(stub, timeout=SAFETY))
        assert len(reply.messages) == 1


def test_streams_per_connection_are_capped_and_the_rest_wait_their_turn() -> None:
    limits = Limits(max_streams_per_connection=3)
    with running_server(limits=limits) as server, grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        stub.CreateQueue(pb.CreateQueueRequest(name="q"))
        calls = [long_poll(stub) for _ in range(4)]
        wait_active(server, lambda n: n == 3)  # the fourth waits for a free HTTP/2 stream
        calls[0].cancel()
        limiter = server.app.stream_limiter
        server.call(lambda: limiter.wait_until(lambda n: limiter.started == 4), timeout=SAFETY)
        assert limiter.peak == 3
        for call in calls[1:]:
            call.cancel()
        wait_active(server, lambda n: n == 0)


def test_the_gRPC_message_limit_fits_the_largest_entry_and_refuses_more() -> None:
    assert MAX_GRPC_MESSAGE_BYTES >= LARGEST_ENTRY_BYTES
    assert limits.CONFIG_INTS["max_message_bytes"][1] == LARGEST_MESSAGE_BYTES
    with (
        running_server() as server,
        grpc.insecure_channel(server.target, options=UNLIMITED) as channel,
    ):
        stub = pb_grpc.QueueServiceStub(channel)
        stub.CreateQueue(
            pb.CreateQueueRequest(
                name="big", config=pb.QueueConfig(max_message_bytes=LARGEST_MESSAGE_BYTES)
            )
        )
        attributes = {f"k{i:02d}": "v" * 100 for i in range(limits.MAX_ATTRIBUTES)}
        body_size = LARGEST_MESSAGE_BYTES - sum(len(k) + len(v) for k, v in attributes.items())
        entry = pb.SendEntry(
            id="i" * 1000,
            body=b"b" * body_size,
            attributes=attributes,
            channel="c" * limits.MAX_CHANNEL,
            dedup_id="d" * limits.MAX_DEDUP_ID,
        )
        reply = stub.SendMessages(pb.SendMessagesRequest(queue="big", entries=[entry]))
        assert not reply.results[0].HasField("error")

        too_big = pb.SendMessagesRequest(
            queue="big", entries=[pb.SendEntry(body=b"x" * (MAX_GRPC_MESSAGE_BYTES + 1))]
        )
        with pytest.raises(grpc.RpcError) as refused:
            stub.SendMessages(too_big)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        stats = stub.GetQueueStats(pb.GetQueueStatsRequest(name="big")).stats
        assert stats.total == 1
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
