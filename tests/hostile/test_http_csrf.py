"""Cross-site requests (CSRF) on every HTTP port without an auth policy (the loopback default):
a page of another site must not act through the visitor's browser. Browsers say who sent a
request (Sec-Fetch-Site, Origin); SDKs send neither and keep working. And an SQS GET carries
only actions that change nothing (a link or an <img> cannot purge)."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from azure.storage.queue import QueueClient as AzureQueueClient

from tests.azure.conftest import connection_string
from tests.hostile.http_raw import request
from tests.sqs.conftest import boto3_client
from tests.support.http_frontend import FrontendServer, start, stop
from tests.support.process import free_port

EVIL = "http://evil.example"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
# What a browser adds to a request a page of another site makes (a <form>, a no-cors fetch).
CROSS_SITE_FORM = {
    **FORM,
    "Origin": EVIL,
    "Sec-Fetch-Site": "cross-site",
    "Sec-Fetch-Mode": "navigate",
}
NO_CORS_FETCH = {**FORM, "Origin": EVIL}  # an older browser: Origin alone
IMG = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "image"}


@dataclass
class Ports:
    server: FrontendServer
    sqs: int
    azure: int
    console: int
    oci: int


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ports]:
    directory = tmp_path_factory.mktemp("csrf")
    azure, console, oci = free_port(), free_port(), free_port()
    server = start(
        "--sqs-listen",
        f"sqlite:///{directory / 'leaseq.db'}",
        directory,
        "--azure-listen",
        f"127.0.0.1:{azure}",
        "--console-listen",
        f"127.0.0.1:{console}",
        "--oci-listen",
        f"127.0.0.1:{oci}",
    )
    try:
        yield Ports(server, server.port, azure, console, oci)
    finally:
        stop(server, "Traceback")


def _form(**fields: str) -> bytes:
    return urllib.parse.urlencode(fields).encode()


def test_sqs_refuses_cross_site_requests_and_state_changes_by_get(ports: Ports) -> None:
    sqs = boto3_client(f"http://127.0.0.1:{ports.sqs}")  # an SDK: neither header, works
    url = sqs.create_queue(QueueName="important")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="keep me")
    path = urllib.parse.urlsplit(url).path

    status, _, body = request(
        ports.sqs,
        "POST",
        "/",
        CROSS_SITE_FORM,
        _form(Action="SendMessage", QueueUrl=url, MessageBody="forged"),
    )
    assert status == 403 and b"AccessDenied" in body
    status, _, body = request(
        ports.sqs, "POST", "/", NO_CORS_FETCH, _form(Action="DeleteQueue", QueueUrl=url)
    )
    assert status == 403
    status, _, body = request(ports.sqs, "GET", f"{path}?Action=PurgeQueue", IMG)
    assert status == 403
    # Without any browser header (a link pasted elsewhere, curl): still no state change by GET.
    for action in ("PurgeQueue", "DeleteQueue", "ReceiveMessage", "SendMessage&MessageBody=x"):
        status, _, body = request(ports.sqs, "GET", f"{path}?Action={action}")
        assert status == 405, (action, body)
    # Reads by GET, and a same-origin browser request, pass.
    status, _, body = request(
        ports.sqs, "GET", "/?Action=ListQueues", {"Sec-Fetch-Site": "same-origin"}
    )
    assert status == 200 and b"important" in body
    same_origin = {**FORM, "Origin": f"http://127.0.0.1:{ports.sqs}"}
    status, _, _ = request(
        ports.sqs, "POST", "/", same_origin, _form(Action="GetQueueUrl", QueueName="important")
    )
    assert status == 200

    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "1"
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert [m["Body"] for m in got] == ["keep me"]


def test_azure_refuses_cross_site_requests(ports: Ports) -> None:
    server = FrontendServer(ports.server.process, ports.azure, "sqlite")
    queue = AzureQueueClient.from_connection_string(
        connection_string(server), "azure-csrf", retry_total=0
    )
    queue.create_queue()
    queue.send_message("keep me")
    status, headers, _ = request(
        ports.azure, "DELETE", "/devstoreaccount1/azure-csrf/messages", {"Origin": EVIL}
    )
    assert status == 403 and headers["x-ms-error-code"] == "AuthorizationFailure"
    assert queue.get_queue_properties().approximate_message_count == 1


def test_the_console_refuses_cross_site_changes_but_opens_from_a_link(ports: Ports) -> None:
    status, headers, body = request(ports.console, "GET", "/api/session")
    session = {
        "Cookie": re.match(r"([^;]+)", headers["set-cookie"]).group(1),
        "X-CSRF-Token": json.loads(body)["csrf"],
        "Content-Type": "application/json",
    }
    created = json.dumps({"name": "console-csrf"}).encode()
    status, _, body = request(
        ports.console, "POST", "/api/queues", {**session, "Sec-Fetch-Site": "cross-site"}, created
    )
    assert status == 403 and b"CROSS_SITE" in body
    status, _, body = request(
        ports.console, "POST", "/api/queues", {**session, "Origin": EVIL}, created
    )
    assert status == 403
    status, _, _ = request(
        ports.console, "GET", "/", {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    )
    assert status == 200
    status, _, body = request(
        ports.console, "POST", "/api/queues", {**session, "Sec-Fetch-Site": "same-origin"}, created
    )
    assert status < 300, body


def test_oci_refuses_cross_site_requests(ports: Ports) -> None:
    created = json.dumps({"displayName": "oci-csrf", "compartmentId": "ocid1.compartment.oc1..x"})
    for headers in ({"Origin": EVIL}, {"Sec-Fetch-Site": "cross-site"}):
        status, _, body = request(
            ports.oci,
            "POST",
            "/20210201/queues",
            {**headers, "Content-Type": "application/json"},
            created.encode(),
        )
        assert status == 403 and json.loads(body)["code"] == "NotAuthorized", body
