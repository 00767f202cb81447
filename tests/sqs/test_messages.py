"""Message actions through boto3 against a real `leaseq serve --sqs-listen` (SQLite and
PostgreSQL): send/receive/delete, typed attributes and their MD5s, batches with partial failures,
visibility, long-poll wake-up, dead letters, and a message crossing dialects."""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time

import pytest
from botocore.exceptions import ClientError

from leaseq.client.errors import InvalidArgument

from .conftest import unique, wait_for_move_task


def expected_attributes_md5(attributes: dict) -> str:
    """AWS's documented algorithm, written here independently of the server's md5.py."""
    buffer = b""
    for name in sorted(attributes):
        value = attributes[name]
        data_type = value["DataType"]
        buffer += struct.pack(">I", len(name.encode())) + name.encode()
        buffer += struct.pack(">I", len(data_type.encode())) + data_type.encode()
        if "BinaryValue" in value:
            raw = value["BinaryValue"]
            buffer += b"\x02" + struct.pack(">I", len(raw)) + raw
        else:
            raw = value["StringValue"].encode()
            buffer += b"\x01" + struct.pack(">I", len(raw)) + raw
    return hashlib.md5(buffer).hexdigest()


ATTRIBUTES = {
    "kind": {"DataType": "String", "StringValue": "resize ✓"},
    "count": {"DataType": "Number", "StringValue": "-12.50e3"},
    "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
    "custom": {"DataType": "Number.int", "StringValue": "7"},
    "label": {"DataType": "String.utf8", "StringValue": "x"},
}


def error_code(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return excinfo.value.response["Error"]["Code"]


def test_send_receive_delete_round_trips_typed_attributes_and_md5s(sqs, queue_url):
    body = "héllo, wörld 🌍"
    sent = sqs.send_message(QueueUrl=queue_url, MessageBody=body, MessageAttributes=ATTRIBUTES)
    assert sent["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest()
    assert sent["MD5OfMessageAttributes"] == expected_attributes_md5(ATTRIBUTES)

    got = sqs.receive_message(
        QueueUrl=queue_url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert len(got) == 1
    message = got[0]
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == body
    assert message["MD5OfBody"] == sent["MD5OfMessageBody"]
    assert message["MessageAttributes"] == ATTRIBUTES
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    assert int(message["Attributes"]["SentTimestamp"]) > 1_600_000_000_000
    assert set(message["Attributes"]) == {
        "SenderId",
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
    }

    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0"
    assert attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
    # Deleting again (a message already gone) succeeds, as in SQS.
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


def test_message_attribute_names_select_by_name_and_prefix(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="x", MessageAttributes=ATTRIBUTES)
    message = sqs.receive_message(
        QueueUrl=queue_url, MessageAttributeNames=["kind", "cou.*", "bl.*"], VisibilityTimeout=0
    )["Messages"][0]
    # "cou.*" is a prefix ending in a period: it matches "cou.x", not "count".
    assert set(message["MessageAttributes"]) == {"kind"}
    chosen = {"kind": ATTRIBUTES["kind"]}
    assert message["MD5OfMessageAttributes"] == expected_attributes_md5(chosen)
    bare = sqs.receive_message(QueueUrl=queue_url)["Messages"][0]
    assert "MessageAttributes" not in bare and "MD5OfMessageAttributes" not in bare
    assert "Attributes" not in bare


def test_delay_seconds_keeps_a_message_delayed(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="later", DelaySeconds=900)
    attrs = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessages"],
    )["Attributes"]
    assert attrs == {"ApproximateNumberOfMessagesDelayed": "1", "ApproximateNumberOfMessages": "0"}
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url)


def test_send_batch_partial_failure_sends_the_valid_entries(sqs, queue_url):
    result = sqs.send_message_batch(
        QueueUrl=queue_url,
        Entries=[
            {"Id": "ok-1", "MessageBody": "one", "MessageAttributes": {"a": ATTRIBUTES["kind"]}},
            {"Id": "bad-chars", "MessageBody": "bad\x00body"},
            {
                "Id": "bad-attr",
                "MessageBody": "x",
                "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "abc"}},
            },
            {"Id": "bad-delay", "MessageBody": "x", "DelaySeconds": 901},
            {"Id": "ok_2", "MessageBody": "two"},
        ],
    )
    assert [s["Id"] for s in result["Successful"]] == ["ok-1", "ok_2"]
    ok1 = result["Successful"][0]
    assert ok1["MD5OfMessageBody"] == hashlib.md5(b"one").hexdigest()
    assert ok1["MD5OfMessageAttributes"] == expected_attributes_md5({"a": ATTRIBUTES["kind"]})
    failed = {f["Id"]: f for f in result["Failed"]}
    assert failed["bad-chars"]["Code"] == "InvalidMessageContents"
    assert failed["bad-attr"]["Code"] == "InvalidParameterValue"
    assert failed["bad-delay"]["Code"] == "InvalidParameterValue"
    assert all(f["SenderFault"] for f in failed.values())
    bodies = []
    while True:
        got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            break
        bodies += [m["Body"] for m in got]
    assert sorted(bodies) == ["one", "two"]


def test_batch_shape_errors(sqs, queue_url):
    with pytest.raises(sqs.exceptions.EmptyBatchRequest) as excinfo:
        sqs.send_message_batch(QueueUrl=queue_url, Entries=[])
    assert error_code(excinfo) == "AWS.SimpleQueueService.EmptyBatchRequest"
    with pytest.raises(sqs.exceptions.TooManyEntriesInBatchRequest) as excinfo:
        sqs.send_message_batch(
            QueueUrl=queue_url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)]
        )
    assert error_code(excinfo) == "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
    with pytest.raises(sqs.exceptions.BatchEntryIdsNotDistinct):
        sqs.send_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": "a", "MessageBody": "x"}, {"Id": "a", "MessageBody": "y"}],
        )
    with pytest.raises(sqs.exceptions.InvalidBatchEntryId):
        sqs.delete_message_batch(
            QueueUrl=queue_url, Entries=[{"Id": "no spaces", "ReceiptHandle": "r"}]
        )
    with pytest.raises(sqs.exceptions.BatchRequestTooLong):
        sqs.send_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "MessageBody": "x" * 200_000} for i in range(6)],
        )
    # None of it sent anything.
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0"


def test_delete_and_visibility_batches_report_each_entry(sqs, queue_url):
    sqs.send_message_batch(
        QueueUrl=queue_url, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(3)]
    )
    messages = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60
    )["Messages"]
    assert len(messages) == 3
    handles = [m["ReceiptHandle"] for m in messages]
    changed = sqs.change_message_visibility_batch(
        QueueUrl=queue_url,
        Entries=[
            {"Id": "a", "ReceiptHandle": handles[0], "VisibilityTimeout": 0},
            {"Id": "b", "ReceiptHandle": handles[1], "VisibilityTimeout": 120},
            {"Id": "c", "ReceiptHandle": "not-a-receipt", "VisibilityTimeout": 10},
        ],
    )
    assert sorted(s["Id"] for s in changed["Successful"]) == ["a", "b"]
    assert [(f["Id"], f["Code"]) for f in changed["Failed"]] == [("c", "ReceiptHandleIsInvalid")]
    # a was released: visible again, and its old receipt no longer holds a lease.
    deleted = sqs.delete_message_batch(
        QueueUrl=queue_url,
        Entries=[
            {"Id": "b", "ReceiptHandle": handles[1]},
            {"Id": "c", "ReceiptHandle": handles[2]},
            {"Id": "junk", "ReceiptHandle": "garbage"},
        ],
    )
    assert sorted(s["Id"] for s in deleted["Successful"]) == ["b", "c"]
    assert [(f["Id"], f["Code"]) for f in deleted["Failed"]] == [("junk", "ReceiptHandleIsInvalid")]
    again = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    assert [m["MessageId"] for m in again] == [messages[0]["MessageId"]]


def test_receipt_errors(sqs, queue_url):
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle="forged")
    sqs.send_message(QueueUrl=queue_url, MessageBody="x")
    first = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=0)["Messages"][0]
    # Delivered without a lease: changing its visibility finds it not in flight.
    with pytest.raises(sqs.exceptions.MessageNotInflight) as excinfo:
        sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=30
        )
    assert error_code(excinfo) == "AWS.SimpleQueueService.MessageNotInflight"
    second = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=60)["Messages"][0]
    assert second["MessageId"] == first["MessageId"]
    # The older delivery's receipt answers success, as SQS documents, but does not delete the
    # message another consumer now holds (leaseq's fencing).
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=first["ReceiptHandle"])
    batch = sqs.delete_message_batch(
        QueueUrl=queue_url, Entries=[{"Id": "old", "ReceiptHandle": first["ReceiptHandle"]}]
    )
    assert [e["Id"] for e in batch["Successful"]] == ["old"] and not batch.get("Failed")
    assert (
        sqs.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]["ApproximateNumberOfMessagesNotVisible"]
        == "1"
    )
    with pytest.raises(ClientError) as excinfo:
        sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=30
        )
    assert error_code(excinfo) == "InvalidParameterValue"
    sqs.change_message_visibility(
        QueueUrl=queue_url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=100
    )
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=second["ReceiptHandle"])


@pytest.mark.parametrize(
    "arguments",
    [
        {"MaxNumberOfMessages": 11},
        {"MaxNumberOfMessages": 0},
        {"WaitTimeSeconds": 21},
        {"VisibilityTimeout": 43201},
        {"VisibilityTimeout": -1},
    ],
)
def test_receive_parameters_out_of_range(sqs, queue_url, arguments):
    with pytest.raises(ClientError) as excinfo:
        sqs.receive_message(QueueUrl=queue_url, **arguments)
    assert error_code(excinfo) == "InvalidParameterValue"
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_send_errors(sqs, queue_url):
    with pytest.raises(ClientError) as excinfo:
        sqs.send_message(QueueUrl=queue_url, MessageBody="")
    assert error_code(excinfo) == "MissingParameter"
    with pytest.raises(sqs.exceptions.InvalidMessageContents):
        sqs.send_message(QueueUrl=queue_url, MessageBody="\ufffe")
    with pytest.raises(ClientError) as excinfo:  # FIFO queues only
        sqs.send_message(QueueUrl=queue_url, MessageBody="x", MessageDeduplicationId="d")
    assert error_code(excinfo) == "InvalidParameterValue"
    with pytest.raises(ClientError) as excinfo:
        sqs.send_message(
            QueueUrl=queue_url,
            MessageBody="x",
            MessageAttributes={
                f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)
            },
        )
    assert error_code(excinfo) == "InvalidParameterValue"
    with pytest.raises(ClientError) as excinfo:
        sqs.send_message(
            QueueUrl=queue_url, MessageBody="x", MessageAttributes={"AWS.x": ATTRIBUTES["kind"]}
        )
    assert error_code(excinfo) == "InvalidParameterValue"
    small = sqs.create_queue(QueueName=unique(), Attributes={"MaximumMessageSize": "1024"})[
        "QueueUrl"
    ]
    with pytest.raises(ClientError) as excinfo:
        sqs.send_message(QueueUrl=small, MessageBody="x" * 1025)
    assert error_code(excinfo) == "InvalidParameterValue"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=queue_url.rsplit("/", 1)[0] + "/missing-queue", MessageBody="x")
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0"


def test_over_limit_when_the_queue_holds_max_in_flight(sqs, grpc_client, queue_url):
    name = queue_url.rsplit("/", 1)[1]
    grpc_client.update_queue(name, max_in_flight=1)  # no SQS attribute for it: set over gRPC
    sqs.send_message_batch(
        QueueUrl=queue_url,
        Entries=[{"Id": "a", "MessageBody": "a"}, {"Id": "b", "MessageBody": "b"}],
    )
    assert len(sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=60)["Messages"]) == 1
    with pytest.raises(sqs.exceptions.OverLimit) as excinfo:
        sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=60)
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_long_poll_is_woken_by_a_send(sqs, queue_url):
    received: dict = {}

    def receive() -> None:
        started = time.monotonic()
        received["reply"] = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=20)
        received["seconds"] = time.monotonic() - started

    waiter = threading.Thread(target=receive)
    waiter.start()
    sqs.send_message(QueueUrl=queue_url, MessageBody="wake up")
    waiter.join(timeout=60)
    assert [m["Body"] for m in received["reply"]["Messages"]] == ["wake up"]
    # Woken by the send, not by the end of its 20 s wait (a generous bound, not a timing test).
    assert received["seconds"] < 15


def test_a_grpc_send_wakes_an_sqs_long_poll(sqs, grpc_client, queue_url):
    received: dict = {}

    def receive() -> None:
        started = time.monotonic()
        received["reply"] = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=20)
        received["seconds"] = time.monotonic() - started

    waiter = threading.Thread(target=receive)
    waiter.start()
    grpc_client.send(queue_url.rsplit("/", 1)[1], b"from grpc")
    waiter.join(timeout=60)
    assert [m["Body"] for m in received["reply"]["Messages"]] == ["from grpc"]
    assert received["seconds"] < 15


def test_long_poll_ends_empty_after_its_wait(sqs, queue_url):
    reply = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)
    assert "Messages" not in reply


def test_dead_letter_queue_after_max_receive_count(sqs, queue_url):
    dlq_url = sqs.create_queue(QueueName=unique("dlq"))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sqs.set_queue_attributes(
        QueueUrl=queue_url,
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "2"})
        },
    )
    sqs.send_message(QueueUrl=queue_url, MessageBody="poison")
    for _ in range(2):
        got = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=0)["Messages"]
        assert got[0]["Body"] == "poison"
    # The third receive finds it over maxReceiveCount: it moves to the DLQ instead.
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url)
    dead = sqs.receive_message(QueueUrl=dlq_url, AttributeNames=["ApproximateReceiveCount"])[
        "Messages"
    ]
    assert [m["Body"] for m in dead] == ["poison"]
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq_url)["queueUrls"] == [queue_url]
    sqs.change_message_visibility(
        QueueUrl=dlq_url, ReceiptHandle=dead[0]["ReceiptHandle"], VisibilityTimeout=0
    )
    # Redrive back to the source queue.
    task = sqs.start_message_move_task(SourceArn=dlq_arn)
    assert task["TaskHandle"]
    tasks = wait_for_move_task(sqs, dlq_arn)
    assert tasks[0]["Status"] == "COMPLETED" and tasks[0]["ApproximateNumberOfMessagesMoved"] == 1
    back = sqs.receive_message(QueueUrl=queue_url)["Messages"]
    assert [m["Body"] for m in back] == ["poison"]


def test_a_message_crosses_dialects_sqs_grpc_sqs(sqs, grpc_client, queue_url):
    name = queue_url.rsplit("/", 1)[1]
    other_url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    other = other_url.rsplit("/", 1)[1]
    sqs.send_message(QueueUrl=queue_url, MessageBody="across", MessageAttributes=ATTRIBUTES)

    (message,) = grpc_client.receive(name, 1, visibility_timeout=30, wait_time=0)
    assert message.body == b"across"
    assert message.attributes["kind"] == "resize ✓"  # gRPC consumers read the values as is
    assert message.attributes["count"] == "-12.50e3"
    # The SQS types ride along in sqs:types, a name reserved to the SQS dialect: a gRPC sender
    # cannot write it (a value it wrote would be read as the dialect's own).
    assert "sqs:types" in message.attributes
    with pytest.raises(InvalidArgument) as refused:
        grpc_client.send(other, message.body, attributes=dict(message.attributes))
    assert "reserved" in str(refused.value)
    # Forwarded without it, the values arrive as they are, as Strings.
    plain_values = {k: v for k, v in message.attributes.items() if not k.startswith("sqs:")}
    grpc_client.send(other, message.body, attributes=plain_values)
    assert grpc_client.delete(name, message).ok

    (back,) = sqs.receive_message(QueueUrl=other_url, MessageAttributeNames=["All"])["Messages"]
    assert back["Body"] == "across"
    as_strings = {k: {"DataType": "String", "StringValue": v} for k, v in plain_values.items()}
    assert back["MessageAttributes"] == as_strings
    assert back["MD5OfMessageAttributes"] == expected_attributes_md5(as_strings)
    # A plain gRPC message reaches SQS consumers with String attributes.
    grpc_client.send(other, b"plain", attributes={"k": "v"})
    (plain,) = sqs.receive_message(QueueUrl=other_url, MessageAttributeNames=["All"])["Messages"]
    assert plain["MessageAttributes"] == {"k": {"DataType": "String", "StringValue": "v"}}
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url)


def test_receives_honour_the_queues_retry_policy(sqs, grpc_client, queue_url):
    """SQS cannot set a retry policy, but its receives obey one set over gRPC: a message whose
    visibility timeout ran out, or that was released with VisibilityTimeout=0, comes back only
    after the backoff, and a waiting long poll is woken then (not at its end)."""
    name = queue_url.rsplit("/", 1)[1]
    grpc_client.update_queue(name, retry_policy=(2, 2))
    sqs.send_message(QueueUrl=queue_url, MessageBody="flaky")
    started = time.monotonic()
    [first] = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=1)["Messages"]
    # The lease runs out after 1 s; the backoff keeps the message away 2 s more.
    again = sqs.receive_message(
        QueueUrl=queue_url, WaitTimeSeconds=15, AttributeNames=["ApproximateReceiveCount"]
    )["Messages"]
    waited = time.monotonic() - started
    assert [m["Body"] for m in again] == ["flaky"]
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    # (Lower bounds with some slack: on PostgreSQL the database's clock decides.)
    assert 2.5 <= waited < 15.0
    # Released without a delay: back after the backoff, not at once.
    sqs.change_message_visibility(
        QueueUrl=queue_url, ReceiptHandle=again[0]["ReceiptHandle"], VisibilityTimeout=0
    )
    released = time.monotonic()
    assert sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0).get("Messages", []) == []
    [third] = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=15)["Messages"]
    assert 1.5 <= time.monotonic() - released < 15.0
    assert third["Body"] == "flaky" and first["MessageId"] == third["MessageId"]
