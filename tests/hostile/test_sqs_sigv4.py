"""What a SigV4 signature binds on the SQS port (with --auth-policy): the body received, the
credential scope (service, day, region), the action (X-Amz-Target) and the query string as it
parses. Each test replays or rewrites a request an attacker captured or crafted; each was
accepted before."""

from __future__ import annotations

import datetime
import hashlib
import http.client
import json
import socket
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.sqs.conftest import REGION, SqsServer, boto3_client, start_server, stop_server, unique

KEY, SECRET = "AKIAADMIN", "admin-secret"
POLICY = f"""
[[principals]]
name = "admin"
access_keys = [{{ id = "{KEY}", secret = "{SECRET}" }}]
[[principals.grants]]
queues = ["*"]
actions = ["*"]
"""
FORM = "application/x-www-form-urlencoded"
JSON = "application/x-amz-json-1.0"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqsServer]:
    directory = tmp_path_factory.mktemp("sqs-sigv4")
    policy = directory / "policy.toml"
    policy.write_text(POLICY)
    server = start_server(
        f"sqlite:///{directory / 'leaseq.db'}", directory, "--auth-policy", str(policy)
    )
    try:
        yield server
    finally:
        stop_server(server)  # no request was a server fault


@pytest.fixture(scope="module")
def admin(server: SqsServer):
    return boto3_client(server.endpoint, KEY, SECRET)


class _Signer(SigV4Auth):
    """botocore's SigV4, with a credential scope day of our choosing (X-Amz-Date stays now)."""

    def __init__(self, service: str, scope_day: str | None) -> None:
        super().__init__(Credentials(KEY, SECRET), service, REGION)
        self.scope_day = scope_day

    def _day(self, request: AWSRequest) -> str:
        return self.scope_day or request.context["timestamp"][0:8]

    def scope(self, request: AWSRequest) -> str:
        return f"{KEY}/{self.credential_scope(request)}"

    def credential_scope(self, request: AWSRequest) -> str:
        return f"{self._day(request)}/{self._region_name}/{self._service_name}/aws4_request"

    def signature(self, string_to_sign: str, request: AWSRequest) -> str:
        key = self._sign(f"AWS4{SECRET}".encode(), self._day(request))
        for part in (self._region_name, self._service_name, "aws4_request"):
            key = self._sign(key, part)
        return self._sign(key, string_to_sign, hex=True)


def signed(
    url: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    method: str = "POST",
    service: str = "sqs",
    scope_day: str | None = None,
    content_sha256: bool = False,
) -> dict[str, str]:
    """The headers of the signed request (Host, X-Amz-Date, Authorization and the given ones);
    content_sha256: also send (and sign) x-amz-content-sha256, as S3 clients do."""
    headers = dict(headers or {})
    if content_sha256:
        headers["X-Amz-Content-SHA256"] = hashlib.sha256(body).hexdigest()
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    _Signer(service, scope_day).add_auth(request)
    prepared = request.prepare()
    out = dict(prepared.headers)
    out["Host"] = urlsplit(url).netloc
    return out


def send(
    url: str, body: bytes, headers: dict[str, str], method: str = "POST"
) -> tuple[int, bytes, dict[str, str]]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        path = parts.path or "/"
        connection.request(
            method,
            path + (f"?{parts.query}" if parts.query else ""),
            body=body or None,
            headers=headers,
        )
        response = connection.getresponse()
        return response.status, response.read(), {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def query_error(payload: bytes) -> tuple[str, str]:
    root = ET.fromstring(payload)
    return root.find("{*}Error/{*}Code").text, root.find("{*}Error/{*}Message").text


def queue_exists(admin, url: str) -> bool:
    return url in admin.list_queues(QueueNamePrefix=url.rsplit("/", 1)[1]).get("QueueUrls", [])


def test_a_signed_list_queues_replayed_with_a_delete_queue_body_is_refused(server, admin):
    important = admin.create_queue(QueueName=unique("important"))["QueueUrl"]
    endpoint = server.endpoint + "/"
    listing = b"Action=ListQueues&Version=2012-11-05"
    for content_sha256 in (True, False):
        headers = signed(endpoint, listing, {"Content-Type": FORM}, content_sha256=content_sha256)
        status, _, _ = send(endpoint, listing, headers)
        assert status == 200  # the request as signed is good
        forged = f"Action=DeleteQueue&QueueUrl={important}".encode()
        status, payload, _ = send(
            endpoint, forged, dict(headers, **{"Content-Length": str(len(forged))})
        )
        assert status == 403
        code, message = query_error(payload)
        assert code == "SignatureDoesNotMatch", message
        assert queue_exists(admin, important)
    # A claimed body hash that is not the body's is refused even when the signature covers it.
    headers = signed(endpoint, listing, {"Content-Type": FORM, "X-Amz-Content-SHA256": "0" * 64})
    status, payload, _ = send(endpoint, listing, headers)
    assert status == 403
    assert query_error(payload) == (
        "SignatureDoesNotMatch",
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
    )
    unsigned_payload = signed(
        endpoint, listing, {"Content-Type": FORM, "X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"}
    )
    assert send(endpoint, listing, unsigned_payload)[0] == 403


def test_a_json_send_message_with_a_forged_message_body_is_refused(server, admin):
    url = admin.create_queue(QueueName=unique())["QueueUrl"]
    endpoint = server.endpoint + "/"
    target = {"Content-Type": JSON, "X-Amz-Target": "AmazonSQS.SendMessage"}
    body = json.dumps({"QueueUrl": url, "MessageBody": "pay 1 EUR"}).encode()
    headers = signed(endpoint, body, target, content_sha256=True)
    forged = json.dumps({"QueueUrl": url, "MessageBody": "pay 1000 EUR"}).encode()
    status, payload, response_headers = send(
        endpoint, forged, dict(headers, **{"Content-Length": str(len(forged))})
    )
    assert status == 403
    assert json.loads(payload)["__type"].endswith("#InvalidSignatureException")
    assert response_headers["x-amzn-query-error"] == "SignatureDoesNotMatch;Sender"
    assert send(endpoint, body, headers)[0] == 200  # the request as signed
    got = admin.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["pay 1 EUR"]


def test_an_unsigned_x_amz_target_cannot_change_the_action(server, admin):
    important = admin.create_queue(QueueName=unique("important"))["QueueUrl"]
    endpoint = server.endpoint + "/"
    body = json.dumps({"QueueUrl": important, "AttributeNames": ["All"]}).encode()
    headers = signed(
        endpoint, body, {"Content-Type": JSON}
    )  # X-Amz-Target left out of the signature
    headers["X-Amz-Target"] = "AmazonSQS.DeleteQueue"
    status, payload, response_headers = send(endpoint, body, headers)
    assert status == 400
    assert json.loads(payload)["__type"].endswith("#IncompleteSignatureException")
    assert response_headers["x-amzn-query-error"] == "IncompleteSignature;Sender"
    assert queue_exists(admin, important)


@pytest.mark.parametrize("service", ["s3", "sts", "SQS"])
def test_a_credential_scoped_to_another_service_is_refused(server, admin, service):
    endpoint = server.endpoint + "/"
    body = b"Action=ListQueues"
    status, payload, _ = send(
        endpoint, body, signed(endpoint, body, {"Content-Type": FORM}, service=service)
    )
    assert status == 403
    assert query_error(payload) == (
        "SignatureDoesNotMatch",
        "Credential should be scoped to correct service: 'sqs'.",
    )


def test_a_scope_day_other_than_x_amz_date_is_refused(server, admin):
    endpoint = server.endpoint + "/"
    body = b"Action=ListQueues"
    today = datetime.datetime.now(datetime.UTC)
    for other in (today - datetime.timedelta(days=1), today - datetime.timedelta(days=400)):
        day = other.strftime("%Y%m%d")
        headers = signed(endpoint, body, {"Content-Type": FORM}, scope_day=day)
        status, payload, _ = send(endpoint, body, headers)
        assert status == 403
        code, message = query_error(payload)
        assert code == "SignatureDoesNotMatch"
        assert (
            message.startswith("Date in Credential scope does not match YYYYMMDD")
            and day in message
        )
    # JSON protocol: the same refusal in its shape.
    target = {"Content-Type": JSON, "X-Amz-Target": "AmazonSQS.ListQueues"}
    headers = signed(endpoint, b"{}", target, scope_day="20200101")
    status, payload, response_headers = send(endpoint, b"{}", headers)
    assert (
        status == 403 and response_headers["x-amzn-query-error"] == "SignatureDoesNotMatch;Sender"
    )


def test_plus_and_percent_2b_sign_what_they_parse_as(server, admin):
    """'+' is a space to the form parser and '%2B' a plus sign: a signature over one is not a
    signature over the other."""
    name = unique()
    queue = admin.create_queue(QueueName=name)["QueueUrl"]
    signed_url = f"{server.endpoint}/000000000000/{name}?Action=SendMessage&MessageBody=1%2B1&Version=2012-11-05"
    headers = signed(signed_url, method="GET")
    rewritten = signed_url.replace("1%2B1", "1+1")
    status, payload, _ = send(rewritten, b"", headers, method="GET")
    assert status == 403, payload
    assert query_error(payload)[0] == "SignatureDoesNotMatch"
    assert "Messages" not in admin.receive_message(QueueUrl=queue)
    assert send(signed_url, b"", headers, method="GET")[0] == 200
    # A space signed as '+' (as a browser's form would send it) is that space.
    spaced_url = signed_url.replace("1%2B1", "one+two")
    assert send(spaced_url, b"", signed(spaced_url, method="GET"), method="GET")[0] == 200
    bodies = sorted(
        m["Body"] for m in admin.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    )
    assert bodies == ["1+1", "one two"]


def test_incomplete_signatures_are_400_incomplete_signature(server):
    endpoint = server.endpoint + "/"
    body = b"Action=ListQueues"
    good = signed(endpoint, body, {"Content-Type": FORM})
    for authorization in (
        "AWS4-HMAC-SHA256 Credential=AKIAADMIN/20261201/us-east-1/sqs/aws4_request",
        "Basic YWRtaW46YWRtaW4=",
        good["Authorization"].replace("us-east-1", "not a region"),
    ):
        status, payload, _ = send(endpoint, body, dict(good, Authorization=authorization))
        assert status in (400, 403), payload
        assert query_error(payload)[0] in ("IncompleteSignature", "SignatureDoesNotMatch")
    no_date = {k: v for k, v in good.items() if k != "X-Amz-Date"}
    status, payload, _ = send(endpoint, body, no_date)
    assert status == 400 and query_error(payload)[0] == "IncompleteSignature"


def test_non_utf8_bytes_in_a_signed_header_are_a_403_not_a_500(server):
    endpoint = server.endpoint + "/"
    body = b"Action=ListQueues"
    headers = signed(endpoint, body, {"Content-Type": FORM, "X-Custom": "abc"})
    lines = [b"POST / HTTP/1.1"]
    for name, value in headers.items():
        if name.lower() == "content-length":
            continue
        raw = b"\xff\xfe\x80 not utf-8" if name == "X-Custom" else value.encode()
        lines.append(name.encode() + b": " + raw)
    lines += [f"Content-Length: {len(body)}".encode(), b"Connection: close"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
        connection.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"403", answer[:500]
    assert query_error(rest.partition(b"\r\n\r\n")[2])[0] == "SignatureDoesNotMatch"
