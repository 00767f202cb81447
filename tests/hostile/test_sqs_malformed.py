"""Malformed requests that the SQS port answered with a 500 and a traceback in the log: each is
now a 4xx in the protocol's error shape (the query protocol's <ErrorResponse>, or JSON's
__type with x-amzn-query-error)."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sqs.conftest import SqsServer, boto3_client, start_server, stop_server, unique

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def json_headers(action: str) -> dict[str, str]:
    return {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqsServer]:
    directory: Path = tmp_path_factory.mktemp("sqs-malformed")
    server = start_server(f"sqlite:///{directory / 'leaseq.db'}", directory)
    try:
        yield server
    finally:
        stop_server(server)  # no "unexpected error" (a 500) was logged


@pytest.fixture
def no_traceback(server: SqsServer) -> Iterator[None]:
    yield
    assert "Traceback" not in server.process.log_path.read_text()


def post(
    server: SqsServer, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes, dict[str, str]]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.request("POST", "/", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(), {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def query_code(status: int, payload: bytes) -> str:
    assert 400 <= status < 500, (status, payload[:300])
    error = ET.fromstring(payload).find("{*}Error")
    assert error.find("{*}Type").text == "Sender"
    return error.find("{*}Code").text


def json_code(status: int, payload: bytes, headers: dict[str, str]) -> str:
    assert 400 <= status < 500, (status, payload[:300])
    assert "#" in json.loads(payload)["__type"]
    code, _, fault = headers["x-amzn-query-error"].partition(";")
    assert fault == "Sender"
    return code


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_garbage_under_a_content_encoding_is_400(server, no_traceback, encoding):
    garbage = b"\x1f\x8b\x08 this is not what the header says" * 10
    headers = {"Content-Encoding": encoding}
    assert query_code(*post(server, garbage, {**FORM, **headers})[:2]) == "MalformedQueryString"
    status, payload, answer_headers = post(
        server, garbage, {**json_headers("ListQueues"), **headers}
    )
    assert json_code(status, payload, answer_headers) == "SerializationException"
    # A body that is what the header says still works.
    body = b"Action=ListQueues"
    packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    assert post(server, packed, {**FORM, **headers})[0] == 200


def test_deeply_dotted_query_keys_are_400(server, no_traceback):
    for depth in (11, 1000, 50_000):
        body = ("Action=ListQueues&x" + ".a" * depth + "=1").encode()
        assert query_code(*post(server, body, FORM)[:2]) == "MalformedQueryString"
    # The deepest real parameter still parses.
    url = boto3_client(server.endpoint).create_queue(QueueName=unique())["QueueUrl"]
    body = (
        f"Action=SendMessageBatch&QueueUrl={url}&SendMessageBatchRequestEntry.1.Id=a"
        "&SendMessageBatchRequestEntry.1.MessageBody=b"
        "&SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=n"
        "&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=String"
        "&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue=v"
    ).encode()
    status, payload, _ = post(server, body, FORM)
    assert status == 200 and b"<SendMessageBatchResultEntry>" in payload


def test_a_redrive_policy_nested_deep_is_400(server, no_traceback):
    sqs = boto3_client(server.endpoint)
    url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    deep = "[" * 50_000
    body = f"Action=SetQueueAttributes&QueueUrl={url}&Attribute.1.Name=RedrivePolicy&Attribute.1.Value={'%5B' * 50_000}"
    assert query_code(*post(server, body.encode(), FORM)[:2]) == "InvalidAttributeValue"
    for action, params in (
        ("SetQueueAttributes", {"QueueUrl": url, "Attributes": {"RedrivePolicy": deep}}),
        ("CreateQueue", {"QueueName": unique(), "Attributes": {"RedrivePolicy": deep}}),
    ):
        status, payload, headers = post(server, json.dumps(params).encode(), json_headers(action))
        assert json_code(status, payload, headers) == "InvalidAttributeValue"


def test_non_utf8_header_bytes_without_a_policy_are_not_a_500(server, no_traceback):
    """Without --auth-policy nothing is signed, but the bytes still reach the answer (the
    action named in an error, the host in a queue URL)."""

    def raw(lines: list[bytes], body: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
            lines = [*lines, f"Content-Length: {len(body)}".encode(), b"Connection: close"]
            connection.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
        head, _, payload = answer.partition(b"\r\n\r\n")
        return int(head.split()[1]), payload

    status, payload = raw(
        [b"POST / HTTP/1.1", b"Host: 127.0.0.1", b"X-Amz-Target: AmazonSQS.\xff\xfeList"], b"{}"
    )
    assert status == 400 and json.loads(payload)["__type"].endswith("#InvalidAction")
    name = unique()
    status, payload = raw(
        [
            b"POST / HTTP/1.1",
            b"Host: \xff\xfe.example",
            b"Content-Type: application/x-www-form-urlencoded",
        ],
        f"Action=CreateQueue&QueueName={name}".encode(),
    )
    assert status < 500
    ET.fromstring(payload)  # well-formed, whatever the host


def test_a_name_given_as_a_structure_is_400(server, no_traceback):
    """`Attribute.1.Name.x=...` makes the Name a structure, not a value: it was used as a
    dict key (TypeError, a 500)."""
    url = boto3_client(server.endpoint).create_queue(QueueName=unique())["QueueUrl"]
    for form in (
        f"Action=SetQueueAttributes&QueueUrl={url}&Attribute.1.Name.x=VisibilityTimeout&Attribute.1.Value=5",
        f"Action=SendMessage&QueueUrl={url}&MessageBody=b&MessageAttribute.1.Name.1=n"
        "&MessageAttribute.1.Value.DataType=String&MessageAttribute.1.Value.StringValue=v",
    ):
        assert query_code(*post(server, form.encode(), FORM)[:2]) == "MalformedQueryString"
    # Tags are ignored (leaseq has none), a malformed one too, as before: never a 500.
    status, _, _ = post(
        server,
        f"Action=CreateQueue&QueueName={unique()}&Tag.1.Key.x=k&Tag.1.Value=v".encode(),
        FORM,
    )
    assert status == 200
