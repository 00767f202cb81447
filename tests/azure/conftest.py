"""A real `leaseq serve --azure-listen` process per module and store (SQLite, PostgreSQL), and the
clients the Azure tests talk to it with: azure-storage-queue (sync and aio), raw HTTP, and
leaseq's own gRPC client.

Each test makes its own queues (unique names), so the tests of a module share one server."""

from __future__ import annotations

import base64
import email.utils
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import requests
from azure.storage.queue import QueueClient, QueueServiceClient

from leaseq.client import QueueClient as LeaseqClient
from tests.support import http_frontend
from tests.support.http_frontend import FrontendServer

DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
FAULT = "unexpected error in Azure operation"  # what a 500 logs: bad input is never a server fault


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def azure_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FrontendServer]:
    yield from http_frontend.per_store(request, tmp_path_factory, "--azure-listen", FAULT)


def connection_string(
    server: FrontendServer, account: str = DEV_ACCOUNT, key: str = DEV_KEY
) -> str:
    """What a user of Azurite writes, with QueueEndpoint pointed at the test server's port."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
        f"QueueEndpoint={server.endpoint}/{account};"
    )


def unique(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def service(azure_server: FrontendServer) -> QueueServiceClient:
    # retry_total=0: an error answer is the test's to see, not the SDK's to retry.
    return QueueServiceClient.from_connection_string(connection_string(azure_server), retry_total=0)


@pytest.fixture
def queue(azure_server: FrontendServer) -> QueueClient:
    client = QueueClient.from_connection_string(
        connection_string(azure_server), unique(), retry_total=0
    )
    client.create_queue()
    return client


@pytest.fixture(scope="module")
def grpc_client(azure_server: FrontendServer) -> Iterator[LeaseqClient]:
    with LeaseqClient(azure_server.grpc_target) as client:
        yield client


# --- raw HTTP, signed as the REST reference describes -------------------------------------------


def shared_key_string(
    method: str, url: str, headers: dict[str, str], account: str = DEV_ACCOUNT
) -> str:
    """Azure's SharedKey string to sign, written from "Authorize with Shared Key" (independently
    of the server's shared_key.py)."""
    parts = urlsplit(url)
    h = {k.lower(): v for k, v in headers.items()}
    length = h.get("content-length", "")
    lines = [
        method,
        h.get("content-encoding", ""),
        h.get("content-language", ""),
        "" if length == "0" else length,
        h.get("content-md5", ""),
        h.get("content-type", ""),
        h.get("date", ""),
        h.get("if-modified-since", ""),
        h.get("if-match", ""),
        h.get("if-none-match", ""),
        h.get("if-unmodified-since", ""),
        h.get("range", ""),
    ]
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(h.items()) if k.startswith("x-ms-"))
    resource = f"/{account}{parts.path}"
    params: dict[str, list[str]] = {}
    for pair in filter(None, parts.query.split("&")):
        name, _, value = pair.partition("=")
        params.setdefault(requests.utils.unquote(name).lower(), []).append(
            requests.utils.unquote(value)
        )
    for name in sorted(params):
        resource += f"\n{name}:{','.join(sorted(params[name]))}"
    return "\n".join(lines) + "\n" + canonical_headers + resource


def sign(text: str, key: str = DEV_KEY) -> str:
    import hashlib
    import hmac

    return base64.b64encode(
        hmac.new(base64.b64decode(key), text.encode(), hashlib.sha256).digest()
    ).decode()


def http_date(offset: float = 0.0) -> str:
    return email.utils.formatdate(time.time() + offset, usegmt=True)


def raw(
    method: str,
    url: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    account: str = DEV_ACCOUNT,
    key: str = DEV_KEY,
    signed: bool = True,
) -> requests.Response:
    """One request as the SDK would send it (x-ms-date, x-ms-version, SharedKey), with the given
    headers over those."""
    all_headers = {"x-ms-date": http_date(), "x-ms-version": "2018-03-28"}
    if body:
        all_headers["Content-Length"] = str(len(body))
        all_headers["Content-Type"] = "application/xml"
    all_headers.update(headers or {})
    if signed and "Authorization" not in all_headers:
        text = shared_key_string(method, url, all_headers, account)
        all_headers["Authorization"] = f"SharedKey {account}:{sign(text, key)}"
    prepared = requests.Request(method, url, data=body or None, headers=all_headers).prepare()
    # The URL exactly as given (requests would re-quote it): raw tests send odd paths.
    prepared.url = url
    with requests.Session() as session:
        return session.send(prepared, timeout=30)
