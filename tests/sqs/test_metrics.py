"""With --metrics-listen, SQS requests count in the RPC metrics and their messages in the same
per-queue counters as gRPC's."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.process import free_port

from .conftest import SqsServer, boto3_client, start_server, stop_server, unique


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory) -> Iterator[tuple[SqsServer, int]]:
    directory = tmp_path_factory.mktemp("sqs-metrics")
    port = free_port()
    server = start_server("memory://", directory, "--metrics-listen", f"127.0.0.1:{port}")
    try:
        yield server, port
    finally:
        stop_server(server)


def samples(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_sqs_requests_and_messages_are_counted(metrics_server):
    server, port = metrics_server
    sqs = boto3_client(server.endpoint)
    url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    queue = url.rsplit("/", 1)[1]
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(3)]
    )
    sqs.send_message(QueueUrl=url, MessageBody="y")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)],
    )
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=unique("missing"))

    found = samples(port)
    assert found[("leaseq_messages_sent_total", (("queue", queue),))] == 4
    assert found[("leaseq_messages_received_total", (("queue", queue),))] == len(got) == 4
    assert found[("leaseq_messages_deleted_total", (("queue", queue),))] == 4
    handled = (("code", "OK"), ("method", "SendMessageBatch"), ("service", "AmazonSQS"))
    assert found[("leaseq_rpcs_handled_total", handled)] == 1
    failed = (("code", "QueueDoesNotExist"), ("method", "GetQueueUrl"), ("service", "AmazonSQS"))
    assert found[("leaseq_rpcs_handled_total", failed)] == 1
    assert (
        "leaseq_rpc_duration_seconds_count",
        (("code", "OK"), ("method", "ReceiveMessage"), ("service", "AmazonSQS")),
    ) in found
