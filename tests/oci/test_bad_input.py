"""Bad input on the OCI endpoint: a 4xx in OCI's shape ({"code", "message"}, opc-request-id),
never a 500 (the server fixture also checks the log holds no server fault), data unchanged."""

from __future__ import annotations

import oci
import pytest
import requests
from oci.queue.models import PutMessagesDetails, PutMessagesDetailsEntry

from tests.support import http_frontend
from tests.support.http_frontend import FrontendServer

from .conftest import TENANCY, ApiKey


def send(
    server: FrontendServer, key: ApiKey, method: str, path: str, body: bytes | None = None
) -> requests.Response:
    signer = oci.signer.Signer(TENANCY, key.user, key.fingerprint, str(key.key_file))
    headers = {"content-type": "application/json"} if body is not None else {}
    prepared = requests.Request(
        method, f"{server.endpoint}/20210201{path}", data=body, headers=headers, auth=signer
    ).prepare()
    with requests.Session() as session:
        return session.send(prepared, timeout=30)


CASES = [
    ("GET", "/queues/{q}/messages?limit=21", None, 400, "InvalidParameter"),
    ("GET", "/queues/{q}/messages?limit=abc", None, 400, "InvalidParameter"),
    ("GET", "/queues/{q}/messages?visibilityInSeconds=43201", None, 400, "InvalidParameter"),
    ("GET", "/queues/{q}/messages?timeoutInSeconds=31", None, 400, "InvalidParameter"),
    (
        "GET",
        "/queues/{q}/messages?timeoutInSeconds=0&channelFilter=a*b",
        None,
        400,
        "InvalidParameter",
    ),
    ("POST", "/queues/{q}/messages", b"{not json", 400, "InvalidParameter"),
    ("POST", "/queues/{q}/messages", b"[1]", 400, "InvalidParameter"),
    ("POST", "/queues/{q}/messages", b'{"messages": []}', 400, "MissingParameter"),
    ("POST", "/queues/{q}/messages", b'{"messages": [{"content": 5}]}', 400, "InvalidParameter"),
    ("POST", "/queues/{q}/messages", b'{"messages": [{"content": ""}]}', 400, "InvalidParameter"),
    (
        "POST",
        "/queues/{q}/messages",
        b'{"messages": [{"content": "x", "metadata": {"channelId": "' + b"c" * 65 + b'"}}]}',
        400,
        "InvalidParameter",
    ),
    (
        "POST",
        "/queues/{q}/messages",
        b'{"messages": [' + b",".join([b'{"content": "x"}'] * 21) + b"]}",
        400,
        "InvalidParameter",
    ),
    ("PUT", "/queues/{q}/messages/nodot", b'{"visibilityInSeconds": 5}', 400, "InvalidParameter"),
    (
        "PUT",
        "/queues/{q}/messages/AAAA.1",
        b'{"visibilityInSeconds": true}',
        400,
        "InvalidParameter",
    ),
    ("PUT", "/queues/{q}/messages/AAAA.1", b"{}", 400, "MissingParameter"),
    ("DELETE", "/queues/{q}/messages/AAAA.1", None, 400, "InvalidParameter"),
    (
        "POST",
        "/queues/{q}/messages/actions/deleteMessages",
        b'{"entries": [{"receipt": 1}]}',
        400,
        "InvalidParameter",
    ),
    ("GET", "/queues/ocid1.queue.oc1.iad.other/messages", None, 404, "NotAuthorizedOrNotFound"),
    (
        "GET",
        "/queues/ocid1.queue.oc1.leaseq.no-such-queue/stats",
        None,
        404,
        "NotAuthorizedOrNotFound",
    ),
    ("GET", "/queues/ocid1.queue.oc1.leaseq.bad%20name", None, 400, "InvalidParameter"),
    (
        "POST",
        "/queues",
        b'{"displayName": "has space", "compartmentId": "c"}',
        400,
        "InvalidParameter",
    ),
    ("POST", "/queues", b'{"displayName": "ok-name"}', 400, "MissingParameter"),
    (
        "POST",
        "/queues",
        b'{"displayName": "ok-name", "compartmentId": "c", "retentionInSeconds": 9}',
        400,
        "InvalidParameter",
    ),
    (
        "POST",
        "/queues",
        b'{"displayName": "ok-name", "compartmentId": "c", "deadLetterQueueDeliveryCount": 21}',
        400,
        "InvalidParameter",
    ),
    ("PUT", "/queues/{q}", b'{"displayName": "renamed"}', 400, "InvalidParameter"),
    ("POST", "/queues/{q}/actions/purge", b'{"purgeType": "ALL"}', 400, "InvalidParameter"),
    ("GET", "/queues?limit=0", None, 400, "InvalidParameter"),
    ("GET", "/queues?page=garbage", None, 400, "InvalidParameter"),
    (
        "GET",
        "/workRequests/ocid1.queueworkrequest.oc1.leaseq.nope",
        None,
        404,
        "NotAuthorizedOrNotFound",
    ),
    ("GET", "/nothing/here", None, 404, "NotFound"),
    ("PATCH", "/queues", b"{}", 405, "MethodNotAllowed"),
    ("GET", "/consumerGroups", None, 501, "NotImplemented"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), CASES)
def test_bad_input_is_a_4xx_in_oci_shape(
    oci_server: FrontendServer,
    api_key: ApiKey,
    queue_id: str,
    method: str,
    path: str,
    body: bytes | None,
    status: int,
    code: str,
) -> None:
    answer = send(oci_server, api_key, method, path.format(q=queue_id), body)
    assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text
    assert answer.json()["message"] and answer.headers["opc-request-id"]


def test_a_refused_batch_sends_nothing(messages: oci.queue.QueueClient, queue_id: str) -> None:
    too_large = "x" * (1024 * 1024 + 1)  # above the queue's max_message_bytes
    details = PutMessagesDetails(
        messages=[
            PutMessagesDetailsEntry(content="fine"),
            PutMessagesDetailsEntry(content=too_large),
        ]
    )
    with pytest.raises(oci.exceptions.ServiceError) as refused:
        messages.put_messages(queue_id, details)
    assert refused.value.status == 400 and "messages[1]" in refused.value.message
    assert messages.get_stats(queue_id).data.queue.visible_messages == 0


def test_serve_flags() -> None:
    http_frontend.assert_a_busy_port_fails_with_one_line("--oci-listen")
    http_frontend.assert_non_loopback_needs_auth_or_allow_unauthenticated("--oci-listen")


def test_oversized_and_undecodable_bodies(
    oci_server: FrontendServer, api_key: ApiKey, queue_id: str
) -> None:
    path = f"{oci_server.endpoint}/20210201/queues/{queue_id}/messages"
    signer = oci.signer.Signer(TENANCY, api_key.user, api_key.fingerprint, str(api_key.key_file))
    big = b'{"messages": [{"content": "' + b"x" * (12 * 1024 * 1024) + b'"}]}'
    answer = requests.post(
        path, data=big, headers={"content-type": "application/json"}, auth=signer, timeout=30
    )
    assert (answer.status_code, answer.json()["code"]) == (413, "PayloadTooLarge")
    garbage = b"not gzip at all"
    answer = requests.post(
        path,
        data=garbage,
        headers={"content-type": "application/json", "content-encoding": "gzip"},
        auth=signer,
        timeout=30,
    )
    assert answer.status_code == 400 and answer.json()["code"] in (
        "InvalidParameter",
        "NotAuthenticated",
    )


def test_a_stale_date_is_refused(oci_server: FrontendServer, api_key: ApiKey) -> None:
    import email.utils
    import time

    signer = oci.signer.Signer(TENANCY, api_key.user, api_key.fingerprint, str(api_key.key_file))
    stale = email.utils.formatdate(time.time() - 600, usegmt=True)
    answer = requests.get(
        f"{oci_server.endpoint}/20210201/queues", headers={"date": stale}, auth=signer, timeout=30
    )
    assert (answer.status_code, answer.json()["code"]) == (401, "NotAuthenticated")
    assert "5 minutes" in answer.json()["message"]
