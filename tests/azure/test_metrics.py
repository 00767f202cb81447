"""With --metrics-listen, Azure requests count in the RPC metrics (service AzureQueueStorage) and
their messages in the same per-queue counters as gRPC's and SQS's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue import QueueClient

from tests.sqs.test_metrics import samples
from tests.support import http_frontend
from tests.support.process import free_port

from .conftest import FAULT, connection_string, raw, unique


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory) -> Iterator[tuple[http_frontend.FrontendServer, int]]:
    directory = tmp_path_factory.mktemp("azure-metrics")
    port = free_port()
    server = http_frontend.start(
        "--azure-listen", "memory://", directory, "--metrics-listen", f"127.0.0.1:{port}"
    )
    try:
        yield server, port
    finally:
        http_frontend.stop(server, FAULT)


def test_azure_requests_and_messages_are_counted(metrics_server):
    server, port = metrics_server
    name = unique()
    queue = QueueClient.from_connection_string(connection_string(server), name, retry_total=0)
    queue.create_queue()
    for text in ("a", "b", "c"):
        queue.send_message(text)
    got = list(queue.receive_messages(messages_per_page=32, max_messages=32))
    for message in got:
        queue.delete_message(message)
    with pytest.raises(ResourceNotFoundError):
        QueueClient.from_connection_string(
            connection_string(server), unique("missing"), retry_total=0
        ).receive_message()
    raw("GET", f"{server.endpoint}/devstoreaccount1/{name}/bogus")  # no operation: method "-"

    found = samples(port)
    assert found[("leaseq_messages_sent_total", (("queue", name),))] == 3
    assert found[("leaseq_messages_received_total", (("queue", name),))] == len(got) == 3
    assert found[("leaseq_messages_deleted_total", (("queue", name),))] == 3
    service = ("service", "AzureQueueStorage")
    assert (
        found[("leaseq_rpcs_handled_total", (("code", "OK"), ("method", "PutMessage"), service))]
        == 3
    )
    failed = (("code", "QueueNotFound"), ("method", "GetMessages"), service)
    assert found[("leaseq_rpcs_handled_total", failed)] == 1
    assert (
        found[("leaseq_rpcs_handled_total", (("code", "InvalidUri"), ("method", "-"), service))]
        == 1
    )
