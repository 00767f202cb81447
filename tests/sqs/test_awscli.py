"""aws-cli (from PyPI) against a real `leaseq serve --sqs-listen`, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from .conftest import boto3_client, unique, wait_for_move_task

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def aws(sqs_server, tmp_path_factory):
    home = tmp_path_factory.mktemp("aws-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(home / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "credentials"),
        "HOME": str(home),
    }

    def run(*args: str, ok: bool = True, service: str = "sqs") -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "awscli",
                service,
                *args,
                "--endpoint-url",
                sqs_server.endpoint,
                "--output",
                "json",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if ok:
            assert result.returncode == 0, result.stderr
        return result

    return run


def test_aws_cli_queue_and_message_commands(aws, sqs_server):
    name = unique("cli")
    url = json.loads(
        aws("create-queue", "--queue-name", name, "--attributes", "VisibilityTimeout=600").stdout
    )["QueueUrl"]
    assert url == f"{sqs_server.endpoint}/000000000000/{name}"
    assert json.loads(aws("get-queue-url", "--queue-name", name).stdout)["QueueUrl"] == url
    assert url in json.loads(aws("list-queues", "--queue-name-prefix", name).stdout)["QueueUrls"]

    sent = json.loads(
        aws(
            "send-message",
            "--queue-url",
            url,
            "--message-body",
            "from the cli",
            "--message-attributes",
            '{"n": {"DataType": "Number", "StringValue": "3"}}',
        ).stdout
    )
    assert sent["MD5OfMessageBody"] == hashlib.md5(b"from the cli").hexdigest()
    batch = json.loads(
        aws(
            "send-message-batch",
            "--queue-url",
            url,
            "--entries",
            json.dumps([{"Id": "a", "MessageBody": "A"}, {"Id": "b", "MessageBody": "bad\u0000"}]),
        ).stdout
    )
    assert [s["Id"] for s in batch["Successful"]] == ["a"]
    assert batch["Failed"][0]["Code"] == "InvalidMessageContents"

    attrs = json.loads(
        aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All").stdout
    )["Attributes"]
    assert attrs["VisibilityTimeout"] == "600" and attrs["ApproximateNumberOfMessages"] == "2"

    got = json.loads(
        aws(
            "receive-message",
            "--queue-url",
            url,
            "--max-number-of-messages",
            "10",
            "--message-attribute-names",
            "All",
            "--wait-time-seconds",
            "1",
        ).stdout
    )["Messages"]
    assert sorted(m["Body"] for m in got) == ["A", "from the cli"]
    for message in got:
        aws(
            "change-message-visibility",
            "--queue-url",
            url,
            "--receipt-handle",
            message["ReceiptHandle"],
            "--visibility-timeout",
            "60",
        )
        aws("delete-message", "--queue-url", url, "--receipt-handle", message["ReceiptHandle"])

    aws("set-queue-attributes", "--queue-url", url, "--attributes", "DelaySeconds=1")
    aws("purge-queue", "--queue-url", url)
    aws("delete-queue", "--queue-url", url)


def test_aws_cli_reports_sqs_errors(aws):
    result = aws("get-queue-url", "--queue-name", unique("missing"), ok=False)
    assert result.returncode != 0
    assert "NonExistentQueue" in result.stderr or "QueueDoesNotExist" in result.stderr
    result = aws(
        "create-queue", "--queue-name", "x.fifo", "--attributes", "FifoQueue=false", ok=False
    )
    assert result.returncode != 0 and "InvalidParameterValue" in result.stderr


def test_aws_cli_tags_policy_permissions_and_identity(aws):
    name = unique("cli")
    url = json.loads(aws("create-queue", "--queue-name", name, "--tags", "env=prod").stdout)[
        "QueueUrl"
    ]
    aws("tag-queue", "--queue-url", url, "--tags", "team=ops")
    tags = json.loads(aws("list-queue-tags", "--queue-url", url).stdout)["Tags"]
    assert tags == {"env": "prod", "team": "ops"}
    aws("untag-queue", "--queue-url", url, "--tag-keys", "env")
    assert json.loads(aws("list-queue-tags", "--queue-url", url).stdout)["Tags"] == {"team": "ops"}
    aws(
        "set-queue-attributes",
        "--queue-url",
        url,
        "--attributes",
        json.dumps({"KmsMasterKeyId": "alias/aws/sqs", "KmsDataKeyReusePeriodSeconds": "300"}),
    )
    aws(
        "add-permission",
        "--queue-url",
        url,
        "--label",
        "partner",
        "--aws-account-ids",
        "111122223333",
        "--actions",
        "SendMessage",
    )
    attrs = json.loads(
        aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All").stdout
    )["Attributes"]
    assert attrs["KmsMasterKeyId"] == "alias/aws/sqs"
    assert attrs["KmsDataKeyReusePeriodSeconds"] == "300"
    assert [s["Sid"] for s in json.loads(attrs["Policy"])["Statement"]] == ["partner"]
    aws("remove-permission", "--queue-url", url, "--label", "partner")
    result = aws("remove-permission", "--queue-url", url, "--label", "partner", ok=False)
    assert result.returncode != 0 and "InvalidParameterValue" in result.stderr
    identity = json.loads(aws("get-caller-identity", service="sts").stdout)
    assert identity["Account"] == "000000000000"


def test_aws_cli_message_move_task(aws, sqs_server):
    dlq = json.loads(aws("create-queue", "--queue-name", unique("clidlq")).stdout)["QueueUrl"]
    dlq_arn = json.loads(
        aws("get-queue-attributes", "--queue-url", dlq, "--attribute-names", "QueueArn").stdout
    )["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"})
    source = json.loads(
        aws(
            "create-queue",
            "--queue-name",
            unique("clisrc"),
            "--attributes",
            json.dumps({"RedrivePolicy": policy}),
        ).stdout
    )["QueueUrl"]
    source_arn = dlq_arn.rsplit(":", 1)[0] + ":" + source.rsplit("/", 1)[1]
    aws("send-message", "--queue-url", dlq, "--message-body", "dead")
    handle = json.loads(
        aws(
            "start-message-move-task",
            "--source-arn",
            dlq_arn,
            "--destination-arn",
            source_arn,
            "--max-number-of-messages-per-second",
            "50",
        ).stdout
    )["TaskHandle"]
    assert handle
    (task,) = wait_for_move_task(boto3_client(sqs_server.endpoint), dlq_arn)[:1]
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesMoved"] == 1
    listed = json.loads(aws("list-message-move-tasks", "--source-arn", dlq_arn).stdout)
    assert listed["Results"][0]["Status"] == "COMPLETED"
    got = json.loads(aws("receive-message", "--queue-url", source).stdout)["Messages"]
    assert [m["Body"] for m in got] == ["dead"]
