"""SigV4 on the SQS endpoint: with --auth-policy, signatures are checked against the policy's
access keys and the principal's grants apply as over gRPC; without a policy, on loopback, any
credentials work (as emulators do)."""

from __future__ import annotations

import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from leaseq.server.auth import PolicyError, parse_policy

from .conftest import REGION, SqsServer, boto3_client, start_server, stop_server, unique

POLICY = """
[[principals]]
name = "admin"
access_keys = [{ id = "AKIAADMIN", secret = "admin-secret" }]
[[principals.grants]]
queues = ["*"]
actions = ["*"]

[[principals]]
name = "orders-sender"
access_keys = [{ id = "AKIASENDER", secret = "sender-secret" }, { id = "AKIASENDER2", secret = "other" }]
[[principals.grants]]
queues = ["orders-*"]
actions = ["send"]
"""


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory) -> Iterator[SqsServer]:
    directory = tmp_path_factory.mktemp("sqs-auth")
    policy = directory / "policy.toml"
    policy.write_text(POLICY)
    server = start_server(
        f"sqlite:///{directory / 'leaseq.db'}", directory, "--auth-policy", str(policy)
    )
    try:
        yield server
    finally:
        stop_server(server)


def code_of(excinfo) -> str:
    return excinfo.value.response["Error"]["Code"]


def test_signed_requests_act_with_the_principals_grants(auth_server):
    admin = boto3_client(auth_server.endpoint, "AKIAADMIN", "admin-secret")
    sender = boto3_client(auth_server.endpoint, "AKIASENDER", "sender-secret")
    orders = admin.create_queue(QueueName=unique("orders"))["QueueUrl"]
    private = admin.create_queue(QueueName=unique("private"))["QueueUrl"]

    sender.send_message(QueueUrl=orders, MessageBody="allowed")
    with pytest.raises(ClientError) as excinfo:
        sender.receive_message(QueueUrl=orders)
    assert code_of(excinfo) == "AccessDenied"
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as excinfo:
        sender.send_message(QueueUrl=private, MessageBody="no")
    assert code_of(excinfo) == "AccessDenied"
    with pytest.raises(ClientError) as excinfo:
        sender.create_queue(QueueName=unique("orders"))
    assert code_of(excinfo) == "AccessDenied"
    with pytest.raises(ClientError) as excinfo:
        sender.purge_queue(QueueUrl=orders)
    assert code_of(excinfo) == "AccessDenied"
    # ListQueues lists only the queues the principal holds some action on.
    listed = sender.list_queues().get("QueueUrls", [])
    assert orders in listed and private not in listed
    assert private in admin.list_queues()["QueueUrls"]
    assert [m["Body"] for m in admin.receive_message(QueueUrl=orders)["Messages"]] == ["allowed"]
    assert "Messages" not in admin.receive_message(QueueUrl=private)


def test_bad_credentials_are_refused(auth_server):
    wrong_secret = boto3_client(auth_server.endpoint, "AKIAADMIN", "not-the-secret")
    with pytest.raises(ClientError) as excinfo:
        wrong_secret.list_queues()
    assert code_of(excinfo) == "SignatureDoesNotMatch"
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    unknown = boto3_client(auth_server.endpoint, "AKIANOBODY", "x")
    with pytest.raises(ClientError) as excinfo:
        unknown.list_queues()
    assert code_of(excinfo) == "InvalidClientTokenId"
    request = urllib.request.Request(
        auth_server.endpoint + "/",
        data=b"Action=ListQueues",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(request, timeout=30)
    assert unsigned.value.code == 403
    root = ET.fromstring(unsigned.value.read())
    assert root.find("{*}Error/{*}Code").text == "MissingAuthenticationToken"


def _signed(
    endpoint: str, method: str, url: str, body: bytes, key: str, secret: str
) -> urllib.request.Request:
    request = AWSRequest(
        method=method,
        url=url,
        data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"} if body else {},
    )
    SigV4Auth(Credentials(key, secret), "sqs", REGION).add_auth(request)
    prepared = request.prepare()
    return urllib.request.Request(
        prepared.url, data=body or None, headers=dict(prepared.headers), method=method
    )


def test_signed_query_protocol_requests_post_and_get(auth_server):
    name = unique("orders")
    body = f"Action=CreateQueue&QueueName={name}&Attribute.1.Name=DelaySeconds&Attribute.1.Value=0".encode()
    request = _signed(
        auth_server.endpoint, "POST", auth_server.endpoint + "/", body, "AKIAADMIN", "admin-secret"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    url = f"{auth_server.endpoint}/000000000000/{name}?Action=SendMessage&MessageBody=hello%20world%21&Version=2012-11-05"
    request = _signed(auth_server.endpoint, "GET", url, b"", "AKIASENDER2", "other")
    with urllib.request.urlopen(request, timeout=30) as response:
        root = ET.fromstring(response.read())
    assert root.find("{*}SendMessageResult/{*}MessageId").text
    # The same signed request with a changed parameter no longer verifies.
    tampered = urllib.request.Request(
        request.full_url.replace("hello", "jello"),
        headers=dict(request.header_items()),
        method="GET",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(tampered, timeout=30)
    assert refused.value.code == 403


@pytest.mark.parametrize(
    "entry, message",
    [
        ('access_keys = [{ id = "A" }]', "secret: required"),
        ('access_keys = [{ secret = "TOPSECRET" }]', "id: required"),
        ('access_keys = "A:TOPSECRET"', "a list of"),
        ('access_keys = [{ id = "A", secret = "TOPSECRET", region = "x" }]', "unknown key"),
        (
            'access_keys = [{ id = "A", secret = "TOPSECRET" }, { id = "A", secret = "TOPSECRET2" }]',
            "listed twice",
        ),
    ],
)
def test_malformed_access_keys_are_refused_without_quoting_secrets(entry, message):
    with pytest.raises(PolicyError) as excinfo:
        parse_policy(f'[[principals]]\nname = "p"\n{entry}\n')
    assert message in str(excinfo.value)
    assert "TOPSECRET" not in str(excinfo.value)
