"""Tags, the infrastructure tools' attributes (Policy, KMS/SSE), RedriveAllowPolicy,
AddPermission / RemovePermission and PurgeQueueInProgress, through boto3 against a real server
on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from .conftest import unique


def error_code(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return excinfo.value.response["Error"]["Code"]


def arn_of(sqs, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]


# --- tags -----------------------------------------------------------------------------------


def test_tags_are_kept_merged_removed_and_die_with_the_queue(sqs):
    name = unique()
    url = sqs.create_queue(QueueName=name, tags={"env": "prod", "team": "ops"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "prod", "team": "ops"}
    sqs.tag_queue(QueueUrl=url, Tags={"env": "test", "cost-center": "42"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {
        "env": "test",
        "team": "ops",
        "cost-center": "42",
    }
    sqs.untag_queue(QueueUrl=url, TagKeys=["team", "not-there"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "test", "cost-center": "42"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["env", "cost-center"])
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)
    sqs.tag_queue(QueueUrl=url, Tags={"a": "1"})
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.list_queue_tags(QueueUrl=url)
    again = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=again)


def test_tag_limits_are_sqs_errors(sqs, queue_url):
    sqs.tag_queue(QueueUrl=queue_url, Tags={f"k{i}": "v" for i in range(50)})
    with pytest.raises(ClientError) as excinfo:  # a 51st
        sqs.tag_queue(QueueUrl=queue_url, Tags={"one-more": "v"})
    assert error_code(excinfo) == "InvalidParameterValue"
    assert len(sqs.list_queue_tags(QueueUrl=queue_url)["Tags"]) == 50
    for tags in ({"k" * 129: "v"}, {"key": "v" * 257}):
        with pytest.raises(ClientError) as excinfo:
            sqs.tag_queue(QueueUrl=queue_url, Tags=tags)
        assert error_code(excinfo) == "InvalidParameterValue"
    with pytest.raises(ClientError) as excinfo:
        sqs.untag_queue(QueueUrl=queue_url, TagKeys=[])
    assert error_code(excinfo) == "MissingParameter"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.tag_queue(QueueUrl=queue_url + "-missing", Tags={"a": "b"})


# --- stored attributes ------------------------------------------------------------------------


POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "sns",
            "Effect": "Allow",
            "Principal": {"Service": "sns.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": "*",
        }
    ],
}


def test_infrastructure_attributes_are_accepted_stored_and_returned(sqs):
    # What Terraform's aws_sqs_queue sends for a queue with a policy and KMS encryption.
    attributes = {
        "Policy": json.dumps(POLICY),
        "KmsMasterKeyId": "alias/aws/sqs",
        "KmsDataKeyReusePeriodSeconds": "600",
        "VisibilityTimeout": "45",
    }
    url = sqs.create_queue(QueueName=unique(), Attributes=attributes)["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert json.loads(got["Policy"]) == POLICY
    assert got["KmsMasterKeyId"] == "alias/aws/sqs"
    assert got["KmsDataKeyReusePeriodSeconds"] == "600"
    assert got["VisibilityTimeout"] == "45"
    assert "SqsManagedSseEnabled" not in got  # KMS, not SSE-SQS
    # The same CreateQueue again is idempotent; a different stored attribute is not.
    assert sqs.create_queue(QueueName=url.rsplit("/", 1)[1], Attributes=attributes)["QueueUrl"]
    with pytest.raises(sqs.exceptions.QueueNameExists):
        sqs.create_queue(
            QueueName=url.rsplit("/", 1)[1], Attributes={**attributes, "KmsMasterKeyId": "other"}
        )
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"KmsMasterKeyId": "", "SqsManagedSseEnabled": "true"}
    )
    got = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["KmsMasterKeyId", "SqsManagedSseEnabled", "LastModifiedTimestamp"],
    )["Attributes"]
    assert got.get("KmsMasterKeyId") is None and got["SqsManagedSseEnabled"] == "true"
    assert int(got["LastModifiedTimestamp"]) > 0
    plain = sqs.create_queue(QueueName=unique())["QueueUrl"]
    assert (
        sqs.get_queue_attributes(QueueUrl=plain, AttributeNames=["SqsManagedSseEnabled"])[
            "Attributes"
        ]["SqsManagedSseEnabled"]
        == "true"  # SQS's default for a new queue
    )


@pytest.mark.parametrize(
    "attributes",
    [
        {"Policy": "{not json"},
        {"Policy": json.dumps({"Statement": [{"Sid": str(i)} for i in range(21)]})},
        {"Policy": json.dumps({"Padding": "x" * 8200})},
        {"KmsDataKeyReusePeriodSeconds": "59"},
        {"KmsDataKeyReusePeriodSeconds": "86401"},
        {"SqsManagedSseEnabled": "maybe"},
        {"RedriveAllowPolicy": json.dumps({"redrivePermission": "sometimes"})},
        {"RedriveAllowPolicy": json.dumps({"redrivePermission": "byQueue"})},
        {
            "RedriveAllowPolicy": json.dumps(
                {"redrivePermission": "allowAll", "sourceQueueArns": ["arn:aws:sqs:r:1:q"]}
            )
        },
    ],
)
def test_bad_stored_attribute_values_are_invalid_attribute_value(sqs, queue_url, attributes):
    with pytest.raises(ClientError) as excinfo:
        sqs.set_queue_attributes(QueueUrl=queue_url, Attributes=attributes)
    assert error_code(excinfo) == "InvalidAttributeValue"


def test_redrive_allow_policy_is_enforced(sqs, sqs_server):
    dlq = sqs.create_queue(QueueName=unique("dlq"))["QueueUrl"]
    dlq_arn = arn_of(sqs, dlq)
    allowed_name, refused_name = unique("allowed"), unique("refused")
    allowed_arn = dlq_arn.rsplit(":", 1)[0] + ":" + allowed_name
    sqs.set_queue_attributes(
        QueueUrl=dlq,
        Attributes={
            "RedriveAllowPolicy": json.dumps(
                {"redrivePermission": "byQueue", "sourceQueueArns": [allowed_arn]}
            )
        },
    )
    redrive = {"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3})}
    sqs.create_queue(QueueName=allowed_name, Attributes=redrive)
    with pytest.raises(ClientError) as excinfo:
        sqs.create_queue(QueueName=refused_name, Attributes=redrive)
    assert error_code(excinfo) == "InvalidParameterValue"
    assert "RedriveAllowPolicy" in excinfo.value.response["Error"]["Message"]
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=refused_name)  # nothing was made
    other = sqs.create_queue(QueueName=refused_name)["QueueUrl"]
    with pytest.raises(ClientError) as excinfo:
        sqs.set_queue_attributes(QueueUrl=other, Attributes=redrive)
    assert error_code(excinfo) == "InvalidParameterValue"
    sqs.set_queue_attributes(
        QueueUrl=dlq,
        Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "denyAll"})},
    )
    with pytest.raises(ClientError):
        sqs.set_queue_attributes(QueueUrl=other, Attributes=redrive)
    sqs.set_queue_attributes(
        QueueUrl=dlq,
        Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "allowAll"})},
    )
    sqs.set_queue_attributes(QueueUrl=other, Attributes=redrive)
    got = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["RedriveAllowPolicy"])
    assert json.loads(got["Attributes"]["RedriveAllowPolicy"]) == {"redrivePermission": "allowAll"}


def test_add_and_remove_permission_edit_the_policy_statements(sqs, queue_url):
    arn = arn_of(sqs, queue_url)
    sqs.add_permission(
        QueueUrl=queue_url,
        Label="send-from-partner",
        AWSAccountIds=["111122223333"],
        Actions=["SendMessage", "GetQueueUrl"],
    )
    sqs.add_permission(
        QueueUrl=queue_url, Label="all-for-ops", AWSAccountIds=["444455556666"], Actions=["*"]
    )
    policy = json.loads(
        sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["Policy"])["Attributes"][
            "Policy"
        ]
    )
    assert policy["Version"] == "2012-10-17"
    first, second = policy["Statement"]
    assert first == {
        "Sid": "send-from-partner",
        "Effect": "Allow",
        "Principal": {"AWS": ["arn:aws:iam::111122223333:root"]},
        "Action": ["SQS:SendMessage", "SQS:GetQueueUrl"],
        "Resource": arn,
    }
    assert second["Sid"] == "all-for-ops" and second["Action"] == ["SQS:*"]
    with pytest.raises(ClientError) as excinfo:  # the label is taken
        sqs.add_permission(
            QueueUrl=queue_url,
            Label="all-for-ops",
            AWSAccountIds=["444455556666"],
            Actions=["ReceiveMessage"],
        )
    assert error_code(excinfo) == "InvalidParameterValue"
    with pytest.raises(ClientError) as excinfo:
        sqs.add_permission(
            QueueUrl=queue_url, Label="x", AWSAccountIds=["111122223333"], Actions=["Fly"]
        )
    assert error_code(excinfo) == "InvalidParameterValue"
    sqs.remove_permission(QueueUrl=queue_url, Label="send-from-partner")
    policy = json.loads(
        sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["Policy"])["Attributes"][
            "Policy"
        ]
    )
    assert [s["Sid"] for s in policy["Statement"]] == ["all-for-ops"]
    with pytest.raises(ClientError) as excinfo:
        sqs.remove_permission(QueueUrl=queue_url, Label="send-from-partner")
    assert error_code(excinfo) == "InvalidParameterValue"
    sqs.remove_permission(QueueUrl=queue_url, Label="all-for-ops")
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["Policy"])
    assert "Policy" not in attributes.get("Attributes", {})


def test_purge_twice_within_60_seconds_is_purge_queue_in_progress(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="a")
    sqs.purge_queue(QueueUrl=queue_url)
    sqs.send_message(QueueUrl=queue_url, MessageBody="b")
    with pytest.raises(sqs.exceptions.PurgeQueueInProgress) as excinfo:
        sqs.purge_queue(QueueUrl=queue_url)
    assert error_code(excinfo) == "AWS.SimpleQueueService.PurgeQueueInProgress"
    got = sqs.receive_message(QueueUrl=queue_url)["Messages"]
    assert [m["Body"] for m in got] == ["b"]  # the refused purge removed nothing
