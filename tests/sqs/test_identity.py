"""The account id (`serve --sqs-account-id`) in queue URLs, ARNs and message attributes, and
sts:GetCallerIdentity answered on the SQS endpoint (boto3's STS client, signed and unsigned)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.support import http_frontend

from .conftest import REGION, SqsServer, boto3_client, start_server, stop_server, unique

ACCOUNT = "123456789012"
POLICY = """
[[principals]]
name = "deployer"
access_keys = [{ id = "AKIADEPLOYER", secret = "deployer-secret" }]
[[principals.grants]]
queues = ["*"]
actions = ["*"]
"""


def sts_client(endpoint: str, key: str = "test", secret: str = "test"):
    return boto3.client(
        "sts",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


@pytest.fixture(scope="module")
def account_server(tmp_path_factory) -> Iterator[SqsServer]:
    directory = tmp_path_factory.mktemp("sqs-account")
    server = start_server(
        f"sqlite:///{directory / 'leaseq.db'}", directory, "--sqs-account-id", ACCOUNT
    )
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture(scope="module")
def policy_server(tmp_path_factory) -> Iterator[SqsServer]:
    directory = tmp_path_factory.mktemp("sqs-sts-auth")
    (directory / "policy.toml").write_text(POLICY)
    server = start_server(
        f"sqlite:///{directory / 'leaseq.db'}",
        directory,
        "--auth-policy",
        str(directory / "policy.toml"),
    )
    try:
        yield server
    finally:
        stop_server(server)


def test_the_configured_account_is_in_urls_arns_and_sender_ids(account_server):
    sqs = boto3_client(account_server.endpoint)
    name = unique()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert url == f"{account_server.endpoint}/{ACCOUNT}/{name}"
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    assert arn == f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
    source = sqs.create_queue(
        QueueName=unique(),
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})
        },
    )["QueueUrl"]
    policy = sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["RedrivePolicy"])
    assert json.loads(policy["Attributes"]["RedrivePolicy"])["deadLetterTargetArn"] == arn
    sqs.send_message(QueueUrl=url, MessageBody="x")
    (message,) = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["SenderId"])[
        "Messages"
    ]
    assert message["Attributes"] == {"SenderId": ACCOUNT}


def test_get_caller_identity_answers_the_account(account_server):
    identity = sts_client(account_server.endpoint).get_caller_identity()
    assert identity["Account"] == ACCOUNT
    assert identity["Arn"] == f"arn:aws:iam::{ACCOUNT}:root"


def test_get_caller_identity_names_the_signing_principal(policy_server):
    identity = sts_client(
        policy_server.endpoint, "AKIADEPLOYER", "deployer-secret"
    ).get_caller_identity()
    assert identity["Account"] == "000000000000"  # the default account
    assert identity["Arn"] == "arn:aws:iam::000000000000:user/deployer"
    assert identity["UserId"] == "deployer"
    with pytest.raises(ClientError) as excinfo:  # a wrong secret
        sts_client(policy_server.endpoint, "AKIADEPLOYER", "wrong").get_caller_identity()
    assert excinfo.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_a_request_signed_for_sts_may_only_ask_get_caller_identity(policy_server):
    sqs = boto3_client(policy_server.endpoint, "AKIADEPLOYER", "deployer-secret")
    url = sqs.create_queue(QueueName=unique())["QueueUrl"]
    # An SQS action signed with an STS scope, as a confused client could send it.

    request = AWSRequest(
        method="POST",
        url=policy_server.endpoint + "/",
        data=f"Action=PurgeQueue&QueueUrl={url}&Version=2012-11-05".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    SigV4Auth(Credentials("AKIADEPLOYER", "deployer-secret"), "sts", REGION).add_auth(request)
    prepared = request.prepare()
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(
            urllib.request.Request(
                prepared.url, data=prepared.body, headers=dict(prepared.headers), method="POST"
            )
        )
    assert excinfo.value.code == 403
    assert b"SignatureDoesNotMatch" in excinfo.value.read()


def test_a_bad_account_id_fails_start_up():
    result = http_frontend.serve("--sqs-listen", "127.0.0.1:0", "--sqs-account-id", "12345")
    assert result.returncode != 0
    assert "12 digits" in result.stderr
