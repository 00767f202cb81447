"""Message move tasks through boto3: asynchronous, at MaxNumberOfMessagesPerSecond, cancellable,
with SQS's statuses, counts and limits."""

from __future__ import annotations

import json
import time

import pytest
from botocore.exceptions import ClientError

from .conftest import unique, wait_for_move_task


def error_code(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return excinfo.value.response["Error"]["Code"]


def dead_letter_pair(sqs, messages: int) -> tuple[str, str, str]:
    """(source url, dlq url, dlq arn) with `messages` messages sent straight to the DLQ (with
    no source queue of their own: a task moves them to a DestinationArn)."""
    dlq = sqs.create_queue(QueueName=unique("dlq"))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    source = sqs.create_queue(
        QueueName=unique("src"),
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5})
        },
    )["QueueUrl"]
    for start in range(0, messages, 10):
        sqs.send_message_batch(
            QueueUrl=dlq,
            Entries=[
                {"Id": str(i), "MessageBody": f"m{i}"}
                for i in range(start, min(start + 10, messages))
            ],
        )
    return source, dlq, dlq_arn


def count(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def test_a_rate_limited_task_runs_asynchronously_and_completes(sqs):
    source, dlq, dlq_arn = dead_letter_pair(sqs, 30)
    began = time.monotonic()
    handle = sqs.start_message_move_task(
        SourceArn=dlq_arn,
        DestinationArn=dlq_arn.rsplit(":", 1)[0] + ":" + source.rsplit("/", 1)[1],
        MaxNumberOfMessagesPerSecond=10,
    )["TaskHandle"]
    (running,) = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
    # 10 a second: the call answered before the move could be done.
    assert running["Status"] == "RUNNING" and running["TaskHandle"] == handle
    assert running["MaxNumberOfMessagesPerSecond"] == 10
    assert running["ApproximateNumberOfMessagesToMove"] == 30
    assert running["ApproximateNumberOfMessagesMoved"] < 30
    with pytest.raises(sqs.exceptions.UnsupportedOperation):  # one active task per source
        sqs.start_message_move_task(SourceArn=dlq_arn)
    (done,) = wait_for_move_task(sqs, dlq_arn)[:1]
    assert time.monotonic() - began >= 2.0  # three steps of 10, a second apart
    assert done["Status"] == "COMPLETED" and done["ApproximateNumberOfMessagesMoved"] == 30
    assert "TaskHandle" not in done  # only a running task shows its handle
    assert count(sqs, source) == 30 and count(sqs, dlq) == 0
    with pytest.raises(sqs.exceptions.ResourceNotFoundException):
        sqs.cancel_message_move_task(TaskHandle=handle)  # not running any more


def test_a_task_is_cancelled_between_steps(sqs):
    source, dlq, dlq_arn = dead_letter_pair(sqs, 40)
    destination = dlq_arn.rsplit(":", 1)[0] + ":" + source.rsplit("/", 1)[1]
    handle = sqs.start_message_move_task(
        SourceArn=dlq_arn, DestinationArn=destination, MaxNumberOfMessagesPerSecond=5
    )["TaskHandle"]
    cancelled = sqs.cancel_message_move_task(TaskHandle=handle)
    assert cancelled["ApproximateNumberOfMessagesMoved"] <= 5
    (task,) = wait_for_move_task(sqs, dlq_arn)[:1]
    assert task["Status"] == "CANCELLED"
    moved = task["ApproximateNumberOfMessagesMoved"]
    assert 0 < moved < 40  # the step running when the cancel came finished
    assert count(sqs, source) == moved and count(sqs, dlq) == 40 - moved
    # A new task may start now; the list shows the most recent first, MaxResults of them.
    sqs.start_message_move_task(SourceArn=dlq_arn, DestinationArn=destination)
    tasks = wait_for_move_task(sqs, dlq_arn)
    assert [t["Status"] for t in tasks] == ["COMPLETED", "CANCELLED"]
    assert tasks[0]["ApproximateNumberOfMessagesMoved"] == 40 - moved
    assert len(sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]) == 1  # default 1
    assert count(sqs, source) == 40


def test_move_task_limits_and_errors(sqs, queue_url):
    _, _, dlq_arn = dead_letter_pair(sqs, 0)
    for rate in (0, 501):
        with pytest.raises(ClientError) as excinfo:
            sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=rate)
        assert error_code(excinfo) == "InvalidParameterValue"
    with pytest.raises(ClientError) as excinfo:
        sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=11)
    assert error_code(excinfo) == "InvalidParameterValue"
    name = queue_url.rsplit("/", 1)[1]
    with pytest.raises(ClientError) as excinfo:  # not a dead letter queue
        sqs.start_message_move_task(SourceArn=dlq_arn.rsplit(":", 1)[0] + ":" + name)
    assert error_code(excinfo) == "InvalidParameterValue"
    for handle in ("whatever", "eyJzIjogMX0="):
        with pytest.raises(sqs.exceptions.ResourceNotFoundException):
            sqs.cancel_message_move_task(TaskHandle=handle)
    # An empty dead letter queue: the task completes having moved nothing.
    sqs.start_message_move_task(SourceArn=dlq_arn)
    (task,) = wait_for_move_task(sqs, dlq_arn)[:1]
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesMoved"] == 0
