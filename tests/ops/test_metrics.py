"""Prometheus metrics after known traffic against a real server (loopback, a fake clock for the
expiry): the interceptor's counters and histograms, and the store's per-queue gauges."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.utils import floatToGoString

from leaseq.server.clock import FakeClock
from leaseq.server.metrics import RPC_BUCKETS, Metrics, MetricsEndpoint
from leaseq.server.service import SERVICE_NAME
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import RunningServer, running_server

from .conftest import Samples, scrape

Q = SERVICE_NAME
SAFETY = 10.0


def seconds(value: float) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=int(value))


@pytest.fixture
def metered() -> Iterator[tuple[RunningServer, pb_grpc.QueueServiceStub, MetricsEndpoint]]:
    # stats_ttl=0: every scrape asks the store, so each one sees the traffic before it.
    metrics = Metrics(stats_ttl=0)
    with running_server("memory://", FakeClock(), metrics=metrics) as server:
        endpoint = metrics.serve_http("127.0.0.1:0")
        try:
            with grpc.insecure_channel(server.target) as channel:
                yield server, pb_grpc.QueueServiceStub(channel), endpoint
        finally:
            endpoint.close()


def rpc_count(samples: Samples, method: str, code: str = "OK", service: str = Q) -> float | None:
    return samples.get_value("leaseq_rpcs_handled_total", service=service, method=method, code=code)


def handled_codes(samples: Samples, method: str) -> dict[str, float]:
    """code -> calls of one method of the queue service that ended with it."""
    return {
        dict(labels)["code"]: value
        for labels, value in samples.series("leaseq_rpcs_handled_total").items()
        if ("method", method) in labels and ("service", Q) in labels
    }


def histogram(samples: Samples, method: str, code: str = "OK") -> tuple[float, float, list[float]]:
    """count, sum and the cumulative bucket counts (in bucket order) of one method and code."""
    labels = {"service": Q, "method": method, "code": code}
    count = samples.get_value("leaseq_rpc_duration_seconds_count", **labels)
    total = samples.get_value("leaseq_rpc_duration_seconds_sum", **labels)
    buckets = [
        samples.get_value("leaseq_rpc_duration_seconds_bucket", le=floatToGoString(le), **labels)
        for le in (*RPC_BUCKETS, float("inf"))
    ]
    return count, total, buckets


def until_scraped(port: int, check, *names: str) -> Samples:
    """Scrape until check(samples) holds: a cancel reaches the server after the client's call
    returned, and nothing else tells when."""
    deadline = time.monotonic() + SAFETY
    while True:
        samples = scrape(port, *names)
        if check(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.005)


def test_counters_histograms_and_queue_gauges_after_traffic(metered) -> None:
    server, stub, endpoint = metered
    stub.CreateQueue(pb.CreateQueueRequest(name="m"))
    stub.CreateQueue(pb.CreateQueueRequest(name="d-dlq"))
    stub.CreateQueue(
        pb.CreateQueueRequest(
            name="d", config=pb.QueueConfig(dead_letter_queue="d-dlq", max_delivery_count=1)
        )
    )
    stub.CreateQueue(pb.CreateQueueRequest(name="e"))
    with pytest.raises(grpc.RpcError) as missing:
        stub.GetQueue(pb.GetQueueRequest(name="nope"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND

    # m: 5 messages enqueued over two calls; a duplicate and an invalid entry are not counted.
    stub.SendMessages(
        pb.SendMessagesRequest(
            queue="m",
            entries=[pb.SendEntry(id=str(i), body=b"m", dedup_id=f"k{i}") for i in range(4)],
        )
    )
    second = stub.SendMessages(
        pb.SendMessagesRequest(
            queue="m",
            entries=[
                pb.SendEntry(id="new", body=b"m"),
                pb.SendEntry(id="dup", body=b"m", dedup_id="k0"),
                pb.SendEntry(id="bad", body=b"m", delay=seconds(10**9)),
            ],
        )
    )
    assert [r.duplicate for r in second.results] == [False, True, False]
    assert second.results[2].HasField("error")
    # A batch of only ids, bodies and dedup ids (the plain way) whose entry is a duplicate.
    third = stub.SendMessages(
        pb.SendMessagesRequest(
            queue="m", entries=[pb.SendEntry(id="again", body=b"m", dedup_id="k1")]
        )
    )
    assert [r.duplicate for r in third.results] == [True]
    # 3 delivered; 2 deleted (a forged receipt deletes nothing); 1 released.
    [batch] = stub.GetMessages(pb.GetMessagesRequest(queue="m", max_messages=3))
    receipts = [m.receipt for m in batch.messages]
    deleted = stub.DeleteMessages(
        pb.DeleteMessagesRequest(queue="m", receipts=[*receipts[:2], "forged"])
    )
    assert [r.status for r in deleted.results][:2] == [pb.LEASE_STATUS_OK] * 2
    stub.ChangeVisibility(
        pb.ChangeVisibilityRequest(
            queue="m",
            entries=[pb.ChangeVisibilityEntry(receipt=receipts[2], visibility_timeout=seconds(0))],
        )
    )
    # d: one delivery without a lease, then the next receive moves it to d-dlq.
    stub.SendMessages(pb.SendMessagesRequest(queue="d", entries=[pb.SendEntry(body=b"d")]))
    for _ in range(2):
        list(
            stub.GetMessages(
                pb.GetMessagesRequest(
                    queue="d", max_messages=1, visibility_timeout=seconds(0), wait_time=seconds(0)
                )
            )
        )
    # e: a message that expires (the fake clock moves past its ttl).
    stub.SendMessages(
        pb.SendMessagesRequest(queue="e", entries=[pb.SendEntry(body=b"e", ttl=seconds(1))])
    )
    server.advance(2)
    # A queue deleted after traffic leaves no series behind.
    stub.CreateQueue(pb.CreateQueueRequest(name="gone"))
    stub.SendMessages(pb.SendMessagesRequest(queue="gone", entries=[pb.SendEntry(body=b"g")]))
    stub.DeleteQueue(pb.DeleteQueueRequest(name="gone"))
    # A follow stream holding one lease (then paused), open while we scrape, then cancelled.
    follow = stub.GetMessages(
        pb.GetMessagesRequest(queue="m", max_messages=1, follow=True, max_outstanding=1)
    )
    assert len(next(follow).messages) == 1
    with grpc.insecure_channel(server.target) as other:
        health = health_pb2_grpc.HealthStub(other)
        health.Check(health_pb2.HealthCheckRequest())

    during = scrape(endpoint.port)
    assert during.get_value("leaseq_receive_streams_in_flight", mode="follow") == 1
    assert during.get_value("leaseq_receive_streams_in_flight", mode="long_poll") == 0
    assert during.get_value("leaseq_rpcs_in_flight", service=Q, method="GetMessages") == 1
    follow.cancel()
    after = until_scraped(
        endpoint.port,
        lambda s: (
            s.get_value("leaseq_receive_streams_in_flight", mode="follow") == 0
            and sum(handled_codes(s, "GetMessages").values()) == 4
        ),
    )
    assert after.get_value("leaseq_receive_streams_in_flight", mode="follow") == 0
    assert after.get_value("leaseq_rpcs_in_flight", service=Q, method="GetMessages") == 0

    # --- the interceptor's counters ---
    assert after.get_value("leaseq_messages_sent_total", queue="m") == 5
    assert after.get_value("leaseq_messages_sent_total", queue="d") == 1
    assert after.get_value("leaseq_messages_sent_total", queue="e") == 1
    assert after.get_value("leaseq_messages_received_total", queue="m") == 4  # 3 + 1 (follow)
    assert after.get_value("leaseq_messages_received_total", queue="d") == 1
    assert after.get_value("leaseq_messages_deleted_total", queue="m") == 2
    for name in ("leaseq_messages_sent_total", "leaseq_messages_received_total"):
        assert not [labels for labels in after.series(name) if ("queue", "gone") in labels]
    assert rpc_count(after, "CreateQueue") == 5
    assert rpc_count(after, "GetQueue", "NOT_FOUND") == 1
    assert rpc_count(after, "SendMessages") == 6
    # The long polls, and the follow stream the client cancelled.
    assert handled_codes(after, "GetMessages") == {"OK": 3, "CANCELLED": 1}
    assert rpc_count(after, "DeleteMessages") == 1
    assert rpc_count(after, "ChangeVisibility") == 1
    assert rpc_count(after, "DeleteQueue") == 1
    assert rpc_count(after, "Check", service="grpc.health.v1.Health") == 1

    # --- the histograms: one observation per call, follow streams left out ---
    for method, code, calls in (
        ("SendMessages", "OK", 6),
        ("GetMessages", "OK", 3),
        ("GetQueue", "NOT_FOUND", 1),
        ("DeleteMessages", "OK", 1),
    ):
        count, total, buckets = histogram(after, method, code)
        assert count == calls, method
        assert buckets[-1] == calls  # +Inf holds every call
        assert buckets == sorted(buckets)  # cumulative
        assert 0 < total < SAFETY * calls
    count, _, _ = histogram(after, "GetMessages", "CANCELLED")
    assert count is None

    # --- the store: depth by state, totals, per queue ---
    def depth(queue: str, state: str) -> float | None:
        return after.get_value("leaseq_queue_messages", queue=queue, state=state)

    assert (depth("m", "visible"), depth("m", "leased"), depth("m", "delayed")) == (2, 1, 0)
    assert after.get_value("leaseq_queue_deleted_total", queue="m") == 2
    assert after.get_value("leaseq_queue_dead_lettered_total", queue="d") == 1
    assert depth("d-dlq", "visible") == 1
    assert after.get_value("leaseq_queue_expired_total", queue="e") == 1
    assert depth("e", "visible") == 0
    assert after.get_value("leaseq_queue_oldest_visible_age_seconds", queue="m") == 2
    assert after.get_value("leaseq_queues") == 4
    assert after.get_value("leaseq_store_up") == 1
    assert not [
        labels for labels in after.series("leaseq_queue_messages") if ("queue", "gone") in labels
    ]


def test_scrapes_share_one_store_collection_within_the_ttl() -> None:
    metrics = Metrics(stats_ttl=60)
    with running_server("memory://", metrics=metrics) as server:
        endpoint = metrics.serve_http("127.0.0.1:0")
        try:
            with grpc.insecure_channel(server.target) as channel:
                stub = pb_grpc.QueueServiceStub(channel)
                stub.CreateQueue(pb.CreateQueueRequest(name="a"))
                assert scrape(endpoint.port).get_value("leaseq_queues") == 1
                stub.CreateQueue(pb.CreateQueueRequest(name="b"))
                # Cached: the store was not asked again; the RPC counters are live.
                again = scrape(endpoint.port)
                assert again.get_value("leaseq_queues") == 1
                assert rpc_count(again, "CreateQueue") == 2
        finally:
            endpoint.close()
