"""A poison message for the SQS dialect: an attribute under a name the dialect reserves (`sqs:`,
where it keeps the SQS types of a message's attributes), holding deeply nested JSON.

Sent over gRPC it used to be stored, and every SQS ReceiveMessage that leased it failed with a
500 (RecursionError), so the innocent messages leased with it were never delivered. Now the
core refuses reserved names from every front end but the one that owns them (INVALID_ARGUMENT
for that entry), and the SQS dialect reads a bad `sqs:types` already stored (written before
the rule) as "no types": the message is delivered with String attributes, the others with it.
"""

from __future__ import annotations

import asyncio
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from leaseq.client import QueueClient
from leaseq.client.errors import InvalidArgument
from leaseq.client.types import SendEntry
from leaseq.server.store import open_store
from leaseq.server.store.base import NewMessage
from tests.sqs.conftest import SqsServer, boto3_client, start_server, stop_server, unique
from tests.support import postgres

DEEP = "[" * 100_000 + "]" * 100_000  # RecursionError for json.loads
POISONS = {
    "deep": DEEP,
    "object-deep": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "not-json": "{nope",
    "not-an-object": '["Number"]',
    "bad-type": '{"n":"Bogus","b":"Binary"}',  # an unknown type; Binary of a value not base64
    "huge-number": '{"n":1' + "0" * 5000 + "}",
}


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'leaseq.db'}"
        return
    postgres.require_postgres()
    schema = postgres.new_schema()
    try:
        yield postgres.store_url(schema)
    finally:
        postgres.drop_schema(schema)


@pytest.fixture
def server(store_url: str, tmp_path: Path) -> Iterator[SqsServer]:
    server = start_server(
        store_url, tmp_path, store="sqlite" if "sqlite" in store_url else "postgres"
    )
    try:
        yield server
    finally:
        stop_server(server)  # asserts no request was a server fault (500)


def test_reserved_attribute_names_are_refused_from_grpc(server: SqsServer) -> None:
    sqs = boto3_client(server.endpoint)
    url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    name = url.rsplit("/", 1)[1]
    with QueueClient(server.grpc_target) as client:
        results = client.send_batch(
            name,
            [
                SendEntry(b"innocent-1", attributes={"kind": "a"}),
                SendEntry(b"poison", attributes={"sqs:types": DEEP, "kind": "b"}),
                SendEntry(b"other-reserved", attributes={"sqs:anything": "x"}),
                SendEntry(b"innocent-2"),
            ],
        )
        assert [r.ok for r in results] == [True, False, False, True]
        for refused in results[1:3]:
            assert refused.error.code == grpc.StatusCode.INVALID_ARGUMENT
            assert "reserved" in refused.error.message and "sqs:" in refused.error.message
        with pytest.raises(InvalidArgument) as caught:
            client.send(name, b"poison", attributes={"sqs:types": "{}"})
        assert "reserved" in str(caught.value)
        # Nor can a consumer write one into a message it holds.
        (held,) = client.receive(name, 1, visibility_timeout=30, wait_time=0)
        with pytest.raises(InvalidArgument) as caught:
            client.update_message(name, held, attributes={"sqs:types": DEEP})
        assert "reserved" in str(caught.value)
        client.update_message(name, held, attributes=dict(held.attributes), visibility_timeout=0)

    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    assert sorted(m["Body"] for m in got["Messages"]) == ["innocent-1", "innocent-2"]
    # Through SQS the dialect still writes its own reserved attribute: types survive the trip.
    sqs.send_message(
        QueueUrl=url,
        MessageBody="typed",
        MessageAttributes={"n": {"DataType": "Number", "StringValue": "7"}},
    )
    (typed,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert typed["MessageAttributes"] == {"n": {"DataType": "Number", "StringValue": "7"}}


def _store_poisoned(store_url: str, queue: str) -> None:
    """Write messages straight into the store, as a server before the rule let gRPC store them."""

    async def write() -> None:
        store = open_store(store_url)
        await store.open()
        try:
            messages = [NewMessage(b"innocent-first", {"kind": "a"})]
            messages += [
                NewMessage(f"poison-{label}".encode(), {"sqs:types": raw, "n": "1", "b": "%%%"})
                for label, raw in POISONS.items()
            ]
            messages.append(NewMessage(b"innocent-last"))
            await store.send(queue, messages)
        finally:
            await store.close()

    asyncio.run(write())


def test_a_stored_poison_message_does_not_break_receive(server: SqsServer, store_url: str) -> None:
    sqs = boto3_client(server.endpoint)
    url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    query_url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    server.process.terminate()
    for queue_url in (url, query_url):
        _store_poisoned(store_url, queue_url.rsplit("/", 1)[1])
    server.process.start()

    # JSON protocol (boto3): every message in one receive, the poisoned ones with String types.
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    bodies = sorted(m["Body"] for m in got["Messages"])
    assert bodies == sorted(["innocent-first", "innocent-last", *(f"poison-{p}" for p in POISONS)])
    for message in got["Messages"]:
        if message["Body"].startswith("poison-"):
            for value in message["MessageAttributes"].values():
                assert value["DataType"] == "String"
            assert "sqs:types" not in message["MessageAttributes"]

    # Query protocol: the same, as XML.
    form = f"Action=ReceiveMessage&QueueUrl={query_url}&MaxNumberOfMessages=10&MessageAttributeName.1=All"
    request = urllib.request.Request(
        server.endpoint + "/",
        data=form.encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        root = ET.fromstring(response.read())
    bodies = [b.text for b in root.iter("{http://queue.amazonaws.com/doc/2012-11-05/}Body")]
    assert len(bodies) == len(POISONS) + 2 and "innocent-first" in bodies
