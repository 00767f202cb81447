"""`leaseq serve --workers 2 --azure-listen`: both workers serve the Azure port (SO_REUSEPORT)
over one PostgreSQL schema; each request lands on whichever worker the kernel picks, and the
queue and its messages are the same whichever it is."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from azure.storage.queue import QueueClient

from tests.support import http_frontend, postgres

from .conftest import FAULT, connection_string, raw, unique

pytestmark = pytest.mark.slow


@pytest.fixture
def workers(tmp_path) -> Iterator[http_frontend.FrontendServer]:
    postgres.require_postgres()
    schema = postgres.new_schema()
    server = http_frontend.start(
        "--azure-listen", postgres.store_url(schema), tmp_path, "--workers", "2", store="postgres"
    )
    try:
        yield server
    finally:
        try:
            http_frontend.stop(server, FAULT)
        finally:
            postgres.drop_schema(schema)


def _workers_seen(server: http_frontend.FrontendServer, request_ids: set[str]) -> set[int]:
    seen = set()
    for line in server.process.log_path.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("request_id") in request_ids and "worker" in record:
                seen.add(int(record["worker"]))
    return seen


def test_both_workers_serve_the_same_queues(workers):
    name = unique()
    queue = QueueClient.from_connection_string(connection_string(workers), name, retry_total=0)
    queue.create_queue()
    request_ids = set()
    # A fresh connection per request (raw): the kernel spreads them over both workers.
    for i in range(40):
        body = f"<QueueMessage><MessageText>m{i}</MessageText></QueueMessage>".encode()
        reply = raw("POST", f"{workers.endpoint}/devstoreaccount1/{name}/messages", body)
        assert reply.status_code == 201, reply.text
        request_ids.add(reply.headers["x-ms-request-id"])
    received = []
    while True:
        reply = raw(
            "GET",
            f"{workers.endpoint}/devstoreaccount1/{name}/messages?numofmessages=32&visibilitytimeout=600",
        )
        assert reply.status_code == 200
        request_ids.add(reply.headers["x-ms-request-id"])
        texts = [t.split("</MessageText>")[0] for t in reply.text.split("<MessageText>")[1:]]
        if not texts:
            break
        received += texts
    assert sorted(received) == sorted(f"m{i}" for i in range(40))  # each once, none lost
    assert queue.get_queue_properties().approximate_message_count == 40
    assert _workers_seen(workers, request_ids) == {0, 1}
