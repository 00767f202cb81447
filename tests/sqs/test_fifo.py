"""SQS FIFO queues and MessageGroupId through boto3, against a real server: order and blocking per
group, deduplication (explicit, content-based, per group), ReceiveRequestAttemptId, the FIFO
system attributes, dead-lettering, SQS's FIFO errors, and MessageGroupId on standard queues as
fair queues."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from .conftest import unique


def error_code(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return excinfo.value.response["Error"]["Code"]


def fifo_queue(sqs, **attributes: str) -> str:
    return sqs.create_queue(
        QueueName=unique("f") + ".fifo", Attributes={"FifoQueue": "true", **attributes}
    )["QueueUrl"]


def send(sqs, url: str, body: str, group: str, dedup: str | None = None) -> dict:
    return sqs.send_message(
        QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=dedup or body
    )


def bodies(messages: list[dict]) -> list[str]:
    return [m["Body"] for m in messages]


def receive(sqs, url: str, count: int = 10, **more) -> list[dict]:
    return sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=count, **more).get("Messages", [])


def test_a_fifo_queue_and_its_attributes(sqs):
    url = fifo_queue(sqs, ContentBasedDeduplication="true", DeduplicationScope="messageGroup")
    assert url.endswith(".fifo")
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert got["FifoQueue"] == "true"
    assert got["ContentBasedDeduplication"] == "true"
    assert got["DeduplicationScope"] == "messageGroup"
    assert got["FifoThroughputLimit"] == "perQueue"
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "FifoThroughputLimit": "perMessageGroupId",
            "ContentBasedDeduplication": "false",
        },
    )
    got = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["FifoThroughputLimit", "ContentBasedDeduplication"]
    )["Attributes"]
    assert got == {"FifoThroughputLimit": "perMessageGroupId", "ContentBasedDeduplication": "false"}
    with pytest.raises(ClientError) as excinfo:  # the type is fixed
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "false"})
    assert error_code(excinfo) == "InvalidAttributeValue"
    standard = sqs.create_queue(QueueName=unique())["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=standard, AttributeNames=["All"])["Attributes"]
    assert "FifoQueue" not in got
    with pytest.raises(ClientError) as excinfo:
        sqs.set_queue_attributes(QueueUrl=standard, Attributes={"DeduplicationScope": "queue"})
    assert error_code(excinfo) == "InvalidAttributeName"
    # The same CreateQueue again is idempotent; another scope is QueueNameExists.
    name = url.rsplit("/", 1)[1]
    assert sqs.list_queues(QueueNamePrefix=name[:-3])["QueueUrls"] == [url]  # "...f.fi"
    assert sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"] == url
    with pytest.raises(sqs.exceptions.QueueNameExists):
        sqs.create_queue(
            QueueName=name, Attributes={"FifoQueue": "true", "DeduplicationScope": "queue"}
        )


def test_groups_come_out_in_order_and_a_leased_group_is_blocked(sqs):
    url = fifo_queue(sqs)
    sent_sequence = []
    for i in range(4):
        sent_sequence.append(send(sqs, url, f"a{i}", "A")["SequenceNumber"])
        send(sqs, url, f"b{i}", "B")
    first = receive(sqs, url, 3, VisibilityTimeout=60)
    assert bodies(first) == ["a0", "a1", "a2"]  # one group's run, in send order
    # Group A is blocked while a0..a2 are leased: a3 waits; B is delivered.
    second = receive(sqs, url, 10, VisibilityTimeout=60)
    assert bodies(second) == ["b0", "b1", "b2", "b3"]
    assert receive(sqs, url) == []
    # a1 goes back: A stays blocked by the leases of a0 and a2 until they end.
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first[1]["ReceiptHandle"], VisibilityTimeout=0
    )
    assert receive(sqs, url) == []
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first[2]["ReceiptHandle"], VisibilityTimeout=0
    )
    # The released messages come back before the rest of their group, in order.
    again = receive(sqs, url, 10, AttributeNames=["All"])
    assert bodies(again) == ["a1", "a2", "a3"]
    assert [m["Attributes"]["MessageGroupId"] for m in again] == ["A", "A", "A"]
    assert [m["Attributes"]["MessageDeduplicationId"] for m in again] == ["a1", "a2", "a3"]
    sequence = [int(m["Attributes"]["SequenceNumber"]) for m in again]
    assert sequence == sorted(sequence) and len(set(sequence)) == 3
    assert sequence == [int(s) for s in sent_sequence[1:]]  # what each SendMessage answered
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"


def test_deduplication_explicit_content_based_and_per_group(sqs):
    url = fifo_queue(sqs)
    first = send(sqs, url, "one", "g", dedup="d1")
    repeat = send(sqs, url, "one again", "g", dedup="d1")
    assert repeat["MessageId"] == first["MessageId"]  # accepted, not enqueued twice
    assert "SequenceNumber" in first and "SequenceNumber" not in repeat
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {
                "Id": "x",
                "MessageBody": "two",
                "MessageGroupId": "g",
                "MessageDeduplicationId": "d2",
            },
            {
                "Id": "y",
                "MessageBody": "dup",
                "MessageGroupId": "g",
                "MessageDeduplicationId": "d1",
            },
        ],
    )
    ids = {e["Id"]: e["MessageId"] for e in batch["Successful"]}
    assert ids["y"] == first["MessageId"]
    assert bodies(receive(sqs, url)) == ["one", "two"]

    content = fifo_queue(sqs, ContentBasedDeduplication="true")
    a = sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="g")
    b = sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="h")
    assert a["MessageId"] == b["MessageId"]  # the queue scope: the body alone decides
    got = receive(sqs, content, AttributeNames=["MessageDeduplicationId"])
    assert bodies(got) == ["same"]
    assert got[0]["Attributes"]["MessageDeduplicationId"] == (
        "0967115f2813a3541eaef77de9d9d5773f1c0c04314b0bbfe4ff3b3b1c55b5d5"  # SHA-256 of "same"
    )

    scoped = fifo_queue(sqs, DeduplicationScope="messageGroup")
    a = send(sqs, scoped, "in g", "g", dedup="d")
    b = send(sqs, scoped, "in h", "h", dedup="d")
    assert a["MessageId"] != b["MessageId"]  # one id, two groups: two messages
    assert sorted(bodies(receive(sqs, scoped))) == ["in g", "in h"]


def test_receive_request_attempt_id_repeats_the_receive(sqs):
    url = fifo_queue(sqs)
    for i in range(3):
        send(sqs, url, f"m{i}", "g")
    first = receive(sqs, url, 2, ReceiveRequestAttemptId="attempt-1", VisibilityTimeout=60)
    repeat = receive(sqs, url, 2, ReceiveRequestAttemptId="attempt-1", VisibilityTimeout=60)
    assert bodies(first) == ["m0", "m1"] == bodies(repeat)  # a lost answer is received again
    assert [m["MessageId"] for m in first] == [m["MessageId"] for m in repeat]
    with pytest.raises(ClientError) as excinfo:
        receive(sqs, url, ReceiveRequestAttemptId="no spaces allowed")
    assert error_code(excinfo) == "InvalidParameterValue"


@pytest.mark.parametrize(
    "arguments, code",
    [
        ({"MessageDeduplicationId": "d"}, "MissingParameter"),  # no MessageGroupId
        ({"MessageGroupId": "g"}, "InvalidParameterValue"),  # no dedup id, no content-based
        (
            {"MessageGroupId": "g", "MessageDeduplicationId": "d", "DelaySeconds": 5},
            "InvalidParameterValue",
        ),
        ({"MessageGroupId": "with space", "MessageDeduplicationId": "d"}, "InvalidParameterValue"),
        ({"MessageGroupId": "g" * 129, "MessageDeduplicationId": "d"}, "InvalidParameterValue"),
        ({"MessageGroupId": "g", "MessageDeduplicationId": "é"}, "InvalidParameterValue"),
    ],
)
def test_fifo_send_errors(sqs, arguments, code):
    url = fifo_queue(sqs)
    with pytest.raises(ClientError) as excinfo:
        sqs.send_message(QueueUrl=url, MessageBody="x", **arguments)
    assert error_code(excinfo) == code
    assert receive(sqs, url) == []


def test_dead_letter_queues_of_fifo_queues(sqs):
    dlq = fifo_queue(sqs)
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = {"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})}
    with pytest.raises(ClientError) as excinfo:  # a standard queue's DLQ is standard
        sqs.create_queue(QueueName=unique(), Attributes=policy)
    assert error_code(excinfo) == "InvalidParameterValue"
    assert "same type" in excinfo.value.response["Error"]["Message"]
    standard = sqs.create_queue(QueueName=unique())["QueueUrl"]
    standard_arn = sqs.get_queue_attributes(QueueUrl=standard, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    with pytest.raises(ClientError) as excinfo:  # and a FIFO queue's FIFO
        fifo_queue(
            sqs,
            RedrivePolicy=json.dumps({"deadLetterTargetArn": standard_arn, "maxReceiveCount": 1}),
        )
    assert error_code(excinfo) == "InvalidParameterValue"
    source = fifo_queue(sqs, **policy)
    send(sqs, source, "poison", "g")
    send(sqs, source, "next", "g")
    (poison,) = receive(sqs, source, 1, VisibilityTimeout=0)
    assert poison["Body"] == "poison"
    # Over maxReceiveCount: the head moves to the dead letter queue, which unblocks the group.
    assert bodies(receive(sqs, source)) == ["next"]
    got = receive(sqs, dlq, AttributeNames=["MessageGroupId"])
    assert bodies(got) == ["poison"] and got[0]["Attributes"]["MessageGroupId"] == "g"


def test_message_group_id_on_a_standard_queue_makes_it_fair(sqs):
    url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    for start in range(0, 40, 10):
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "MessageBody": f"noisy{i}", "MessageGroupId": "noisy"}
                for i in range(start, start + 10)
            ],
        )
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"quiet{i}", MessageGroupId="quiet")
    # The quiet tenant's messages, sent after 40 of the noisy one's, come in the first receive.
    got = receive(sqs, url, 10, MessageSystemAttributeNames=["MessageGroupId"])
    assert sorted(b for b in bodies(got) if b.startswith("quiet")) == ["quiet0", "quiet1", "quiet2"]
    assert {m["Attributes"]["MessageGroupId"] for m in got} == {"noisy", "quiet"}
    assert "SequenceNumber" not in got[0]["Attributes"]  # FIFO queues only
