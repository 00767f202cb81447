"""Queue actions through boto3 against a real `leaseq serve --sqs-listen` (SQLite, PostgreSQL)."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from .conftest import boto3_client, unique


def error_code(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return excinfo.value.response["Error"]["Code"]


def test_create_queue_with_attributes_and_read_each_back(sqs, sqs_server):
    name = unique()
    settable = {
        "VisibilityTimeout": "45",
        "MessageRetentionPeriod": "3600",
        "DelaySeconds": "5",
        "ReceiveMessageWaitTimeSeconds": "2",
        "MaximumMessageSize": "2048",
    }
    url = sqs.create_queue(QueueName=name, Attributes=settable)["QueueUrl"]
    assert url == f"{sqs_server.endpoint}/000000000000/{name}"
    everything = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert {k: everything[k] for k in settable} == settable
    assert everything["QueueArn"] == f"arn:aws:sqs:us-east-1:000000000000:{name}"
    assert "RedrivePolicy" not in everything
    for key in (
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ):
        assert everything[key] == "0"
    assert int(everything["CreatedTimestamp"]) > 1_600_000_000
    for key, value in everything.items():
        one = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[key])["Attributes"]
        assert one == {key: value}


def test_sqs_defaults_for_attributes_left_out(sqs):
    url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "30"
    assert attrs["MessageRetentionPeriod"] == "345600"
    assert attrs["ReceiveMessageWaitTimeSeconds"] == "0"
    assert attrs["DelaySeconds"] == "0"


def test_queue_url_uses_the_host_the_client_used(sqs_server):
    client = boto3_client(f"http://localhost:{sqs_server.port}")
    name = unique()
    url = client.create_queue(QueueName=name)["QueueUrl"]
    assert url == f"http://localhost:{sqs_server.port}/000000000000/{name}"
    assert client.get_queue_url(QueueName=name)["QueueUrl"] == url


def test_create_queue_is_idempotent_and_refuses_different_attributes(sqs):
    name = unique()
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "10"})["QueueUrl"]
    assert (
        sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "10"})["QueueUrl"] == url
    )
    # SQS compares only the attributes given: none given, the existing queue is answered.
    assert sqs.create_queue(QueueName=name)["QueueUrl"] == url
    with pytest.raises(sqs.exceptions.QueueNameExists) as excinfo:
        sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "11"})
    assert error_code(excinfo) == "QueueAlreadyExists"


@pytest.mark.parametrize(
    "name, attributes, code",
    [
        ("jobs", {"FifoQueue": "true"}, "InvalidParameterValue"),  # a FIFO name ends in .fifo
        ("jobs", {"ContentBasedDeduplication": "true"}, "InvalidAttributeName"),
        ("jobs.fifo", {}, "InvalidParameterValue"),  # .fifo needs FifoQueue=true
        ("jobs.fifo", {"FifoQueue": "false"}, "InvalidParameterValue"),
        ("jobs.fifo", {"FifoQueue": "yes"}, "InvalidAttributeValue"),
        ("jobs.fifo", {"FifoQueue": "true", "DeduplicationScope": "x"}, "InvalidAttributeValue"),
        (
            "jobs.fifo",
            {"FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId"},
            "InvalidAttributeValue",  # needs DeduplicationScope messageGroup
        ),
        ("a.b", {}, "InvalidParameterValue"),
        ("bad name!", {}, "InvalidParameterValue"),
        ("x" * 81, {}, "InvalidParameterValue"),
        ("jobs", {"NoSuchAttribute": "1"}, "InvalidAttributeName"),
        ("jobs", {"VisibilityTimeout": "43201"}, "InvalidAttributeValue"),
        ("jobs", {"VisibilityTimeout": "ten"}, "InvalidAttributeValue"),
        ("jobs", {"ReceiveMessageWaitTimeSeconds": "21"}, "InvalidAttributeValue"),
        ("jobs", {"MessageRetentionPeriod": "59"}, "InvalidAttributeValue"),
        ("jobs", {"DelaySeconds": "901"}, "InvalidAttributeValue"),
        ("jobs", {"MaximumMessageSize": "1023"}, "InvalidAttributeValue"),
        ("jobs", {"RedrivePolicy": "{not json"}, "InvalidAttributeValue"),
        ("jobs", {"ApproximateNumberOfMessages": "3"}, "InvalidAttributeName"),
    ],
)
def test_create_queue_errors(sqs, name, attributes, code):
    with pytest.raises(ClientError) as excinfo:
        sqs.create_queue(QueueName=name, Attributes=attributes)
    assert error_code(excinfo) == code
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=name)


def test_get_queue_url_and_missing_queues(sqs, queue_url):
    name = queue_url.rsplit("/", 1)[1]
    assert sqs.get_queue_url(QueueName=name)["QueueUrl"] == queue_url
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as excinfo:
        sqs.get_queue_url(QueueName=unique("missing"))
    assert error_code(excinfo) == "AWS.SimpleQueueService.NonExistentQueue"
    missing_url = queue_url.rsplit("/", 1)[0] + "/" + unique("missing")
    for call in (
        lambda: sqs.get_queue_attributes(QueueUrl=missing_url, AttributeNames=["All"]),
        lambda: sqs.receive_message(QueueUrl=missing_url),
        lambda: sqs.purge_queue(QueueUrl=missing_url),
        lambda: sqs.delete_queue(QueueUrl=missing_url),
        lambda: sqs.delete_message(QueueUrl=missing_url, ReceiptHandle="x"),
    ):
        with pytest.raises(sqs.exceptions.QueueDoesNotExist):
            call()


def test_list_queues_by_prefix_with_paging(sqs, sqs_server):
    prefix = unique("list")
    names = sorted(f"{prefix}-{i}" for i in range(5))
    for name in names:
        sqs.create_queue(QueueName=name)
    listed = sqs.list_queues(QueueNamePrefix=prefix)["QueueUrls"]
    assert listed == [f"{sqs_server.endpoint}/000000000000/{n}" for n in names]
    seen, token = [], None
    while True:
        kwargs = {"NextToken": token} if token else {}
        page = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2, **kwargs)
        assert len(page["QueueUrls"]) <= 2
        seen += page["QueueUrls"]
        token = page.get("NextToken")
        if not token:
            break
    assert seen == listed
    paginated = [
        url
        for page in sqs.get_paginator("list_queues").paginate(
            QueueNamePrefix=prefix, PaginationConfig={"PageSize": 3}
        )
        for url in page["QueueUrls"]
    ]
    assert paginated == listed
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix=unique("none"))
    with pytest.raises(ClientError) as excinfo:
        sqs.list_queues(QueueNamePrefix=prefix, MaxResults=1001)
    assert error_code(excinfo) == "InvalidParameterValue"
    with pytest.raises(ClientError) as excinfo:
        sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2, NextToken="garbage")
    assert error_code(excinfo) == "InvalidParameterValue"


def test_set_queue_attributes_and_redrive_policy(sqs, queue_url):
    dlq_name = unique("dlq")
    dlq_url = sqs.create_queue(QueueName=dlq_name)["QueueUrl"]
    dlq_arn = f"arn:aws:sqs:us-east-1:000000000000:{dlq_name}"
    policy = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}
    sqs.set_queue_attributes(
        QueueUrl=queue_url,
        Attributes={"VisibilityTimeout": "90", "RedrivePolicy": json.dumps(policy)},
    )
    attrs = sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["VisibilityTimeout", "RedrivePolicy", "DelaySeconds"]
    )["Attributes"]
    assert attrs["VisibilityTimeout"] == "90"
    assert attrs["DelaySeconds"] == "0"  # untouched
    assert json.loads(attrs["RedrivePolicy"]) == policy
    # The dead letter queue cannot be deleted while a redrive policy names it.
    with pytest.raises(ClientError) as excinfo:
        sqs.delete_queue(QueueUrl=dlq_url)
    assert error_code(excinfo) == "InvalidParameterValue"
    for bad in (
        {"deadLetterTargetArn": dlq_arn},
        {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 0},
        {
            "deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:" + unique("nope"),
            "maxReceiveCount": 1,
        },
        {"deadLetterTargetArn": "not-an-arn", "maxReceiveCount": 1},
    ):
        with pytest.raises(ClientError) as excinfo:
            sqs.set_queue_attributes(
                QueueUrl=queue_url, Attributes={"RedrivePolicy": json.dumps(bad)}
            )
        assert error_code(excinfo) in ("InvalidAttributeValue", "InvalidParameterValue"), bad
    with pytest.raises(ClientError) as excinfo:
        sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={"FifoQueue": "true"})
    assert error_code(excinfo) == "InvalidAttributeName"
    with pytest.raises(ClientError) as excinfo:
        sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["Bogus"])
    assert error_code(excinfo) == "InvalidAttributeName"
    # An empty RedrivePolicy removes it; then the dead letter queue can go.
    sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={"RedrivePolicy": ""})
    assert (
        "RedrivePolicy"
        not in sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    )
    assert (
        json.loads(
            sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"].get(
                "RedrivePolicy", "null"
            )
        )
        is None
    )
    sqs.delete_queue(QueueUrl=dlq_url)


def test_purge_and_delete_queue(sqs):
    url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(4)]
    )
    sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)
    sqs.purge_queue(QueueUrl=url)
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (
        attrs["ApproximateNumberOfMessages"]
        == attrs["ApproximateNumberOfMessagesNotVisible"]
        == "0"
    )
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=url.rsplit("/", 1)[1])


def test_start_message_move_task_errors(sqs, queue_url):
    name = queue_url.rsplit("/", 1)[1]
    with pytest.raises(ClientError) as excinfo:  # not any queue's dead letter queue
        sqs.start_message_move_task(SourceArn=f"arn:aws:sqs:us-east-1:000000000000:{name}")
    assert error_code(excinfo) == "InvalidParameterValue"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.start_message_move_task(
            SourceArn="arn:aws:sqs:us-east-1:000000000000:" + unique("nope")
        )
    with pytest.raises(sqs.exceptions.ResourceNotFoundException):
        sqs.cancel_message_move_task(TaskHandle="whatever")
