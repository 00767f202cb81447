"""Bad input over HTTP: every one gets an SQS error in its protocol's shape (4xx), never a 500,
and changes nothing. (The module's server fixture also fails the run if any request was a 500.)"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

import pytest

from .conftest import unique

JSON_TYPE = "application/x-amz-json-1.0"


def raw(endpoint: str, body: bytes, headers: dict[str, str], method: str = "POST", path: str = "/"):
    request = urllib.request.Request(
        endpoint + path, data=body if method != "GET" else None, headers=headers, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def json_call(endpoint: str, action: str, body: bytes, method: str = "POST"):
    return raw(
        endpoint, body, {"X-Amz-Target": f"AmazonSQS.{action}", "Content-Type": JSON_TYPE}, method
    )


@pytest.fixture
def loaded_queue(sqs):
    """A queue holding 3 messages, one of them leased: bad requests must leave it so."""
    url = sqs.create_queue(QueueName=unique("bad"))["QueueUrl"]
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(3)]
    )
    sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)
    return url


def counts(sqs, url: str) -> tuple[str, str, str]:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (
        attrs["ApproximateNumberOfMessages"],
        attrs["ApproximateNumberOfMessagesNotVisible"],
        attrs["VisibilityTimeout"],
    )


def assert_json_error(
    status: int, headers: dict, body: bytes, code: str, expected_status: int = 400
) -> None:
    assert status == expected_status, body
    document = json.loads(body)
    assert document["__type"].startswith("com.amazonaws.sqs#")
    assert document["message"]
    query_code, _, fault = headers["x-amzn-query-error"].partition(";")
    assert query_code == code and fault == "Sender"
    assert headers["x-amzn-RequestId"]


def bad_json_requests(url: str) -> list[tuple[str, str, bytes, str, int]]:
    """(label, action, body, code, status)."""
    batch = [{"Id": str(i), "MessageBody": "x"} for i in range(10_000)]
    return [
        ("not json", "SendMessage", b"{nope", "SerializationException", 400),
        ("json array", "SendMessage", b"[1, 2]", "SerializationException", 400),
        (
            "invalid utf-8",
            "SendMessage",
            b'{"QueueUrl": "' + url.encode() + b'", "MessageBody": "\xff\xfe"}',
            "SerializationException",
            400,
        ),
        (
            "deep nesting",
            "SendMessage",
            b"[" * 100_000 + b"]" * 100_000,
            "SerializationException",
            400,
        ),
        ("unknown action", "DropAllTables", b"{}", "InvalidAction", 400),
        ("no action", "", b"{}", "InvalidAction", 400),
        (
            "huge batch",
            "SendMessageBatch",
            json.dumps({"QueueUrl": url, "Entries": batch}).encode(),
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            400,
        ),
        (
            "huge delete batch",
            "DeleteMessageBatch",
            json.dumps(
                {
                    "QueueUrl": url,
                    "Entries": [{"Id": str(i), "ReceiptHandle": "r"} for i in range(5000)],
                }
            ).encode(),
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            400,
        ),
        (
            "oversized body",
            "SendMessage",
            json.dumps({"QueueUrl": url, "MessageBody": "x" * (11 * 1024 * 1024)}).encode(),
            "RequestEntityTooLarge",
            413,
        ),
        (
            "body of wrong type",
            "SendMessage",
            json.dumps({"QueueUrl": url, "MessageBody": 5}).encode(),
            "InvalidParameterValue",
            400,
        ),
        (
            "count of wrong type",
            "ReceiveMessage",
            json.dumps({"QueueUrl": url, "MaxNumberOfMessages": "lots"}).encode(),
            "InvalidParameterValue",
            400,
        ),
        (
            "boolean count",
            "ReceiveMessage",
            json.dumps({"QueueUrl": url, "MaxNumberOfMessages": True}).encode(),
            "InvalidParameterValue",
            400,
        ),
        (
            "float visibility",
            "ReceiveMessage",
            json.dumps({"QueueUrl": url, "VisibilityTimeout": 1.5}).encode(),
            "InvalidParameterValue",
            400,
        ),
        (
            "entries not a list",
            "DeleteMessageBatch",
            json.dumps({"QueueUrl": url, "Entries": {"a": 1}}).encode(),
            "InvalidParameterValue",
            400,
        ),
        (
            "attributes not a map",
            "SendMessage",
            json.dumps({"QueueUrl": url, "MessageBody": "x", "MessageAttributes": [1]}).encode(),
            "InvalidParameterValue",
            400,
        ),
        (
            "attribute value not a map",
            "SendMessage",
            json.dumps(
                {"QueueUrl": url, "MessageBody": "x", "MessageAttributes": {"a": "b"}}
            ).encode(),
            "InvalidParameterValue",
            400,
        ),
        (
            "bad base64",
            "SendMessage",
            json.dumps(
                {
                    "QueueUrl": url,
                    "MessageBody": "x",
                    "MessageAttributes": {"a": {"DataType": "Binary", "BinaryValue": "!!!"}},
                }
            ).encode(),
            "InvalidParameterValue",
            400,
        ),
        (
            "queue url of wrong type",
            "PurgeQueue",
            json.dumps({"QueueUrl": ["x"]}).encode(),
            "InvalidParameterValue",
            400,
        ),
        (
            "attributes of wrong type",
            "SetQueueAttributes",
            json.dumps({"QueueUrl": url, "Attributes": "VisibilityTimeout=0"}).encode(),
            "InvalidAttributeName",
            400,
        ),
        (
            "attribute value of wrong type",
            "SetQueueAttributes",
            json.dumps({"QueueUrl": url, "Attributes": {"VisibilityTimeout": [0]}}).encode(),
            "InvalidAttributeValue",
            400,
        ),
        (
            "lone surrogate body",
            "SendMessage",
            json.dumps({"QueueUrl": url, "MessageBody": "\ud800"}).encode(),
            "InvalidMessageContents",
            400,
        ),
        ("empty body", "PurgeQueue", b"", "MissingParameter", 400),
    ]


def test_bad_json_requests_get_sqs_errors_and_change_nothing(sqs, sqs_server, loaded_queue):
    before = counts(sqs, loaded_queue)
    for label, action, body, code, expected_status in bad_json_requests(loaded_queue):
        status, headers, answer = json_call(sqs_server.endpoint, action, body)
        try:
            assert_json_error(status, headers, answer, code, expected_status)
        except AssertionError as error:
            raise AssertionError(f"{label}: {error}") from None
    assert counts(sqs, loaded_queue) == before


def test_bad_methods(sqs_server):
    status, headers, body = json_call(sqs_server.endpoint, "ListQueues", b"", method="PUT")
    assert_json_error(status, headers, body, "InvalidAction", 405)
    status, headers, body = raw(sqs_server.endpoint, b"", {}, method="DELETE")
    assert status == 405
    assert ET.fromstring(body).find("{*}Error/{*}Code").text == "InvalidAction"


def form_call(endpoint: str, body: bytes):
    return raw(endpoint, body, {"Content-Type": "application/x-www-form-urlencoded"})


def test_bad_form_requests_get_xml_errors_and_change_nothing(sqs, sqs_server, loaded_queue):
    before = counts(sqs, loaded_queue)
    many = "&".join(
        f"SendMessageBatchRequestEntry.{i}.Id={i}&SendMessageBatchRequestEntry.{i}.MessageBody=x"
        for i in range(1, 400)
    )
    cases = [
        (
            b"Action=SendMessage&QueueUrl=" + loaded_queue.encode() + b"&MessageBody=\xff",
            "MalformedQueryString",
            400,
        ),
        (b"Action=SendMessage&novalue&&x", "MalformedQueryString", 400),
        (b"Action=SendMessage&Action=PurgeQueue", "MalformedQueryString", 400),
        (b"Action=CreateQueue&Attribute=1&Attribute.1.Name=x", "MalformedQueryString", 400),
        (
            ("Action=SendMessageBatch&QueueUrl=" + loaded_queue + "&" + many).encode(),
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            400,
        ),
        (
            b"Action=SendMessage&QueueUrl="
            + loaded_queue.encode()
            + b"&MessageBody="
            + b"x" * (11 * 1024 * 1024),
            "RequestEntityTooLarge",
            413,
        ),
        (
            b"Action=SetQueueAttributes&QueueUrl="
            + loaded_queue.encode()
            + b"&Attribute.1.Value=3",
            "MalformedQueryString",
            400,
        ),
        (
            b"Action=SendMessage&QueueUrl="
            + loaded_queue.encode()
            + b"&MessageBody=x&DelaySeconds=99999999999999999999999",
            "InvalidParameterValue",
            400,
        ),
        (
            ("Action=ListQueues&" + "&".join(f"p{i}=1" for i in range(2000))).encode(),
            "MalformedQueryString",
            400,
        ),
    ]
    for body, code, expected_status in cases:
        status, headers, answer = form_call(sqs_server.endpoint, body)
        assert status == expected_status, (body[:80], answer)
        root = ET.fromstring(answer)
        assert root.tag.endswith("ErrorResponse")
        assert root.find("{*}Error/{*}Code").text == code, (body[:80], answer)
        assert headers["x-amzn-RequestId"] == root.find("{*}RequestId").text
    assert counts(sqs, loaded_queue) == before
