"""Characters XML 1.0 cannot carry (U+0001..U+001F but tab, LF, CR; U+FFFE, U+FFFF) in a message
that came over gRPC: the query protocol's answer used to hold them raw, so it was not
well-formed and a query-protocol SDK was stuck on that queue. Now they reach query-protocol
consumers as U+FFFD, with MD5s of the text delivered; JSON consumers get them as they are; SQS
itself refuses them at send (InvalidMessageContents), and an error that echoes one stays
well-formed."""

from __future__ import annotations

import hashlib
import struct
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest

from leaseq.client import QueueClient
from tests.sqs.conftest import FAULT, SqsServer, boto3_client, unique
from tests.support import http_frontend

NS = {"sqs": "http://queue.amazonaws.com/doc/2012-11-05/"}
RAW = "a\x01b\x02c\x1fd\x0be\x0cf\ufffeg\uffffh\tkept\nkept"
SAFE = "a\ufffdb\ufffdc\ufffdd\ufffde\ufffdf\ufffdg\ufffdh\tkept\nkept"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SqsServer]:
    yield from http_frontend.per_store(request, tmp_path_factory, "--sqs-listen", FAULT)


def query(endpoint: str, params: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        endpoint + "/",
        data=urllib.parse.urlencode(params).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def attributes_md5(attributes: dict[str, str]) -> str:
    """AWS's MD5OfMessageAttributes of String attributes."""
    buffer = b""
    for name in sorted(attributes):
        for part in (name.encode(), b"String"):
            buffer += struct.pack(">I", len(part)) + part
        value = attributes[name].encode()
        buffer += b"\x01" + struct.pack(">I", len(value)) + value
    return hashlib.md5(buffer).hexdigest()


def test_a_grpc_message_with_control_characters_is_well_formed_xml(server: SqsServer) -> None:
    sqs = boto3_client(server.endpoint)
    url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    name = url.rsplit("/", 1)[1]
    with QueueClient(server.grpc_target) as client:
        client.send(name, RAW.encode(), attributes={f"k{RAW}": RAW, "plain": "x"})
        client.send(name, b"innocent")

    status, payload = query(
        server.endpoint,
        {
            "Action": "ReceiveMessage",
            "QueueUrl": url,
            "MaxNumberOfMessages": "10",
            "MessageAttributeName.1": "All",
            "VisibilityTimeout": "0",
        },
    )
    assert status == 200
    root = ET.fromstring(payload)  # well-formed: this raised on the raw characters
    messages = {m.find("sqs:Body", NS).text: m for m in root.iterfind(".//sqs:Message", NS)}
    assert set(messages) == {SAFE, "innocent"}
    message = messages[SAFE]
    assert message.find("sqs:MD5OfBody", NS).text == hashlib.md5(SAFE.encode()).hexdigest()
    received = {
        a.find("sqs:Name", NS).text: a.find("sqs:Value/sqs:StringValue", NS).text
        for a in message.iterfind("sqs:MessageAttribute", NS)
    }
    assert received == {f"k{SAFE}": SAFE, "plain": "x"}
    assert message.find("sqs:MD5OfMessageAttributes", NS).text == attributes_md5(received)

    # The JSON protocol carries them as they are (escaped in JSON), with the MD5s of that text.
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    (raw,) = [m for m in got["Messages"] if m["Body"] != "innocent"]
    assert raw["Body"] == RAW and raw["MD5OfBody"] == hashlib.md5(RAW.encode()).hexdigest()
    assert raw["MessageAttributes"][f"k{RAW}"] == {"DataType": "String", "StringValue": RAW}
    assert raw["MD5OfMessageAttributes"] == attributes_md5({f"k{RAW}": RAW, "plain": "x"})


def test_sqs_refuses_them_at_send_and_errors_that_echo_them_stay_well_formed(
    server: SqsServer,
) -> None:
    sqs = boto3_client(server.endpoint)
    url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    status, payload = query(
        server.endpoint, {"Action": "SendMessage", "QueueUrl": url, "MessageBody": RAW}
    )
    assert status == 400
    assert ET.fromstring(payload).find("sqs:Error/sqs:Code", NS).text == "InvalidMessageContents"
    for params in (
        {"Action": f"Bogus{RAW}"},
        {"Action": "ReceiveMessage", "QueueUrl": url, "MaxNumberOfMessages": f"1{RAW}"},
        {
            "Action": "SetQueueAttributes",
            "QueueUrl": url,
            "Attribute.1.Name": f"X{RAW}",
            "Attribute.1.Value": "1",
        },
    ):
        status, payload = query(server.endpoint, params)
        assert 400 <= status < 500
        error = ET.fromstring(payload).find("sqs:Error", NS)  # well-formed
        assert error.find("sqs:Type", NS).text == "Sender"
