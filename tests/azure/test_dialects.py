"""One message crossing every dialect on one server and store: Azure -> gRPC -> SQS -> Azure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.storage.queue import QueueClient

from leaseq.client import QueueClient as LeaseqClient
from tests.sqs.conftest import boto3_client
from tests.support import http_frontend
from tests.support.process import free_port

from .conftest import FAULT, connection_string, unique


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def both(request, tmp_path_factory) -> Iterator[tuple[http_frontend.FrontendServer, str]]:
    sqs_port = free_port()
    for server in http_frontend.per_store(
        request, tmp_path_factory, "--azure-listen", FAULT, "--sqs-listen", f"127.0.0.1:{sqs_port}"
    ):
        yield server, f"http://127.0.0.1:{sqs_port}"


def test_a_message_crosses_azure_grpc_sqs_and_back(both):
    server, sqs_endpoint = both
    name = unique()
    azure = QueueClient.from_connection_string(connection_string(server), name, retry_total=0)
    azure.create_queue()
    sent = azure.send_message("crossing <dialects> & back")

    with LeaseqClient(server.grpc_target) as grpc:
        (received,) = grpc.receive(name, visibility_timeout=60, wait_time=0)
        # Azure writes message ids as GUIDs, gRPC as 32 hex digits: the same id.
        assert (received.message_id, received.body, received.delivery_count) == (
            sent.id.replace("-", ""),
            b"crossing <dialects> & back",
            1,
        )
        grpc.release(name, received.receipt)

    sqs = boto3_client(sqs_endpoint)
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    (message,) = sqs.receive_message(
        QueueUrl=url, VisibilityTimeout=60, MessageSystemAttributeNames=["ApproximateReceiveCount"]
    )["Messages"]
    assert (message["MessageId"], message["Body"]) == (sent.id, "crossing <dialects> & back")
    assert message["Attributes"]["ApproximateReceiveCount"] == "2"
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )

    back = azure.receive_message(visibility_timeout=60)
    assert (back.id, back.content, back.dequeue_count) == (sent.id, "crossing <dialects> & back", 3)
    azure.delete_message(back)
    with LeaseqClient(server.grpc_target) as grpc:
        stats = grpc.stats(name)
        assert (stats.total, stats.deleted_total) == (0, 1)


def test_sqs_and_grpc_messages_reach_azure_consumers(both):
    server, sqs_endpoint = both
    name = unique()
    azure = QueueClient.from_connection_string(connection_string(server), name, retry_total=0)
    azure.create_queue()
    sqs = boto3_client(sqs_endpoint)
    sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"], MessageBody="from sqs")
    with LeaseqClient(server.grpc_target) as grpc:
        grpc.send(name, "from grpc ✓".encode())
    got = list(azure.receive_messages(messages_per_page=2, max_messages=2))
    assert [m.content for m in got] == ["from sqs", "from grpc ✓"]
