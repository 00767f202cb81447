"""ReceiveMessage's system attributes and defaults through boto3: MessageSystemAttributeNames,
AWSTraceHeader kept and returned (with its MD5), message ids in SQS's UUID form, and the wait of
a queue made over gRPC with a default above SQS's 20 s."""

from __future__ import annotations

import hashlib
import re
import struct
import time

import pytest
from botocore.exceptions import ClientError

from .conftest import unique

TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def md5_of_string_attributes(values: dict[str, str]) -> str:
    digest = hashlib.md5()
    for name in sorted(values):
        for part in (name.encode(), b"String"):
            digest.update(struct.pack(">I", len(part)) + part)
        value = values[name].encode()
        digest.update(b"\x01" + struct.pack(">I", len(value)) + value)
    return digest.hexdigest()


def test_message_ids_are_uuids(sqs, queue_url, grpc_client):
    sent = sqs.send_message(QueueUrl=queue_url, MessageBody="x")
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", sent["MessageId"]
    )
    (got,) = sqs.receive_message(QueueUrl=queue_url)["Messages"]
    assert got["MessageId"] == sent["MessageId"]
    batch = sqs.send_message_batch(QueueUrl=queue_url, Entries=[{"Id": "a", "MessageBody": "y"}])
    assert len(batch["Successful"][0]["MessageId"]) == 36
    # The same message over gRPC: its id without the dashes.
    (peeked,) = [
        m
        for m in grpc_client.peek(queue_url.rsplit("/", 1)[1], include_leased=True)
        if m.body == b"x"
    ]
    assert peeked.message_id == sent["MessageId"].replace("-", "")


def test_aws_trace_header_is_kept_and_returned(sqs, queue_url):
    sent = sqs.send_message(
        QueueUrl=queue_url,
        MessageBody="traced",
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}},
    )
    assert sent["MD5OfMessageSystemAttributes"] == md5_of_string_attributes(
        {"AWSTraceHeader": TRACE}
    )
    (got,) = sqs.receive_message(
        QueueUrl=queue_url, MessageSystemAttributeNames=["AWSTraceHeader"]
    )["Messages"]
    assert got["Attributes"] == {"AWSTraceHeader": TRACE}
    assert "MessageAttributes" not in got  # not a user attribute
    sqs.change_message_visibility(
        QueueUrl=queue_url, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=0
    )
    (again,) = sqs.receive_message(QueueUrl=queue_url, AttributeNames=["All"])["Messages"]
    assert again["Attributes"]["AWSTraceHeader"] == TRACE
    assert set(again["Attributes"]) == {
        "SenderId",
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
        "AWSTraceHeader",
    }


@pytest.mark.parametrize(
    "system",
    [
        {"Other": {"DataType": "String", "StringValue": "x"}},
        {"AWSTraceHeader": {"DataType": "Number", "StringValue": "1"}},
        {"AWSTraceHeader": {"DataType": "String", "StringValue": "x" * 2049}},
    ],
)
def test_bad_message_system_attributes_are_invalid_parameter_value(sqs, queue_url, system):
    with pytest.raises(ClientError) as excinfo:
        sqs.send_message(QueueUrl=queue_url, MessageBody="x", MessageSystemAttributes=system)
    assert excinfo.value.response["Error"]["Code"] == "InvalidParameterValue"


def test_message_system_attribute_names_choose_the_attributes(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="x")
    (got,) = sqs.receive_message(
        QueueUrl=queue_url,
        MessageSystemAttributeNames=["ApproximateReceiveCount", "SequenceNumber"],
        VisibilityTimeout=0,
    )["Messages"]
    assert got["Attributes"] == {"ApproximateReceiveCount": "1"}  # no SequenceNumber: standard


def test_a_grpc_queue_with_a_30_s_default_waits_at_most_20_s(sqs, sqs_server, grpc_client):
    name = unique()
    grpc_client.create_queue(name, receive_wait_time=30)
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    began = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    waited = time.monotonic() - began
    assert 19.0 <= waited < 25.0, waited
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ReceiveMessageWaitTimeSeconds"]
    )["Attributes"]
    assert attributes["ReceiveMessageWaitTimeSeconds"] == "30"  # reported as it is
