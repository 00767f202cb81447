"""One message crossing every dialect on one server and store: OCI -> gRPC -> SQS -> Azure ->
OCI, with its channel; a queue made through SQS is an OCI queue."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import oci
import pytest
from azure.storage.queue import QueueClient as AzureQueueClient
from oci.queue.models import MessageMetadata, PutMessagesDetails, PutMessagesDetailsEntry

from leaseq.client import QueueClient as LeaseqClient
from tests.azure.conftest import connection_string
from tests.sqs.conftest import boto3_client
from tests.support import http_frontend
from tests.support.http_frontend import FrontendServer
from tests.support.process import free_port

from .conftest import FAULT, clients, create_queue, make_key, unique


@pytest.fixture(scope="module")
def every_dialect(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[FrontendServer, str, FrontendServer]]:
    """One SQLite server with --oci-listen, --sqs-listen and --azure-listen (the crossing is the
    core's, the same on every store: the other modules cover PostgreSQL)."""
    directory = tmp_path_factory.mktemp("oci-dialects")
    sqs_port, azure_port = free_port(), free_port()
    server = http_frontend.start(
        "--oci-listen",
        f"sqlite:///{directory / 'leaseq.db'}",
        directory,
        "--sqs-listen",
        f"127.0.0.1:{sqs_port}",
        "--azure-listen",
        f"127.0.0.1:{azure_port}",
    )
    try:
        yield (
            server,
            f"http://127.0.0.1:{sqs_port}",
            FrontendServer(server.process, azure_port, "sqlite"),
        )
    finally:
        http_frontend.stop(server, FAULT)


def test_a_message_crosses_oci_grpc_sqs_azure_and_back(every_dialect, tmp_path: Path) -> None:
    server, sqs_endpoint, azure_server = every_dialect
    messages, admin = clients(server, make_key(tmp_path, "ocid1.user.oc1..aaaacross"))
    name = unique("cross")
    queue_id = create_queue(admin, display_name=name)
    details = PutMessagesDetails(
        messages=[
            PutMessagesDetailsEntry(content="crossing", metadata=MessageMetadata(channel_id="eu"))
        ]
    )
    [sent] = messages.put_messages(queue_id, details).data.messages

    with LeaseqClient(server.grpc_target) as grpc:
        [received] = grpc.receive(name, visibility_timeout=60, wait_time=0)
        assert (received.body, received.channel, received.delivery_count) == (b"crossing", "eu", 1)
        grpc.release(name, received.receipt)

    sqs = boto3_client(sqs_endpoint)
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    [message] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]
    assert message["Body"] == "crossing"
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )

    azure = AzureQueueClient.from_connection_string(
        connection_string(azure_server), name, retry_total=0
    )
    back = azure.receive_message(visibility_timeout=60)
    assert (back.content, back.dequeue_count) == ("crossing", 3)
    azure.update_message(back, visibility_timeout=0)

    [again] = messages.get_messages(queue_id, timeout_in_seconds=0).data.messages
    assert (again.id, again.content, again.delivery_count, again.metadata.channel_id) == (
        sent.id,
        "crossing",
        4,
        "eu",
    )
    messages.delete_message(queue_id, again.receipt)
    assert messages.get_stats(queue_id).data.queue.visible_messages == 0


def test_a_queue_made_through_sqs_is_listed_by_oci(every_dialect, tmp_path: Path) -> None:
    server, sqs_endpoint, _ = every_dialect
    _, admin = clients(server, make_key(tmp_path, "ocid1.user.oc1..aaaalister"))
    name = unique("fromsqs")
    boto3_client(sqs_endpoint).create_queue(QueueName=name)
    listed = admin.list_queues(compartment_id="any", display_name=name).data.items
    assert [q.id for q in listed] == [f"ocid1.queue.oc1.leaseq.{name}"]
    assert isinstance(admin.get_queue(listed[0].id).data, oci.queue.models.Queue)
