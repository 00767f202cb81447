"""TLS on the HTTP ports: with --tls-cert/--tls-key every HTTP port serves HTTPS with the gRPC
port's certificate (boto3, the Azure SDK and Chromium each over it), mutual TLS with
--tls-client-ca; and a non-loopback HTTP port without TLS needs --allow-unauthenticated."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import oci
import pytest
from azure.storage.queue import QueueClient as AzureQueueClient

from leaseq.server.auth import hash_token
from tests.console.conftest import CHROMIUM, CHROMIUM_ARGS, sign_in
from tests.oci.conftest import TENANCY, ApiKey, make_key
from tests.ops.conftest import Serve
from tests.security.certs import CA
from tests.sqs.conftest import REGION
from tests.support.http_frontend import serve
from tests.support.process import free_port

DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
TOKEN = "tls-console-token-0123456789abcdef"


def boto3_client(
    endpoint: str, verify: str | bool = True, client_cert: tuple[str, str] | None = None
):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name=REGION,
        verify=verify,
        aws_access_key_id="AKIATLS",
        aws_secret_access_key="tls-secret",
        config=Config(retries={"max_attempts": 1}, client_cert=client_cert),
    )


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path
    client: tuple[str, str]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = CA("leaseq HTTP test CA")
    (directory / "ca.pem").write_bytes(ca.pem)
    cert, key = ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",), server=True).write(
        directory, "server"
    )
    client_cert, client_key = ca.issue("client.internal", dns=("client.internal",)).write(
        directory, "client"
    )
    return Pki(directory / "ca.pem", cert, key, (str(client_cert), str(client_key)))


@dataclass
class Https:
    sqs: str
    azure: str
    console: str
    oci: str
    oci_key: ApiKey


def _serve(tmp_path: Path, pki: Pki, *extra: str) -> tuple[Serve, Https]:
    sqs, azure, console, oci_port = free_port(), free_port(), free_port(), free_port()
    key = make_key(tmp_path, "ocid1.user.oc1..aaaatls")
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'[[principals]]\nname = "admin"\ntokens = ["{hash_token(TOKEN)}"]\n'
        'access_keys = [{ id = "AKIATLS", secret = "tls-secret" }]\n'
        f'azure_keys = [{{ account = "devstoreaccount1", key = "{DEV_KEY}" }}]\n'
        f'oci_keys = [{{ tenancy = "{TENANCY}", user = "{key.user}", '
        f'public_key = """{key.public_pem}""" }}]\n'
        '[[principals.grants]]\nqueues = ["*"]\nactions = ["*"]\n'
    )
    server = Serve(
        tmp_path,
        "memory://",
        "--tls-cert",
        str(pki.cert),
        "--tls-key",
        str(pki.key),
        "--auth-policy",
        str(policy),
        "--sqs-listen",
        f"127.0.0.1:{sqs}",
        "--azure-listen",
        f"127.0.0.1:{azure}",
        "--console-listen",
        f"127.0.0.1:{console}",
        "--oci-listen",
        f"127.0.0.1:{oci_port}",
        *extra,
    ).start()
    return server, Https(
        f"https://127.0.0.1:{sqs}",
        f"https://127.0.0.1:{azure}",
        f"https://127.0.0.1:{console}",
        f"https://127.0.0.1:{oci_port}",
        key,
    )


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Https]:
    server, endpoints = _serve(tmp_path_factory.mktemp("https"), pki)
    try:
        yield endpoints
    finally:
        server.kill()


def test_boto3_over_https(https: Https, pki: Pki) -> None:
    sqs = boto3_client(https.sqs, str(pki.ca))
    url = sqs.create_queue(QueueName="over-tls")["QueueUrl"]
    assert url.startswith(https.sqs + "/")
    sqs.send_message(QueueUrl=url, MessageBody="secret")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url)["Messages"]] == ["secret"]
    with pytest.raises(Exception, match="(?i)ssl|certificate"):
        boto3_client(https.sqs).list_queues()  # the test CA is not trusted


def test_the_azure_sdk_over_https(https: Https, pki: Pki) -> None:
    connection = (
        f"DefaultEndpointsProtocol=https;AccountName=devstoreaccount1;AccountKey={DEV_KEY};"
        f"QueueEndpoint={https.azure}/devstoreaccount1;"
    )
    queue = AzureQueueClient.from_connection_string(
        connection, "azure-over-tls", retry_total=0, connection_verify=str(pki.ca)
    )
    queue.create_queue()
    queue.send_message("secret")
    assert [m.content for m in queue.receive_messages()] == ["secret"]


def test_the_oci_sdk_over_https(https: Https, pki: Pki) -> None:
    admin = oci.queue.QueueAdminClient(https.oci_key.config(), service_endpoint=https.oci)
    # The CA as a user passes it to requests; trust_env off, or REQUESTS_CA_BUNDLE would win.
    admin.base_client.session.verify = str(pki.ca)
    admin.base_client.session.trust_env = False
    assert admin.list_queues(compartment_id=TENANCY).status == 200
    untrusted = oci.queue.QueueAdminClient(
        https.oci_key.config(),
        service_endpoint=https.oci,
        retry_strategy=oci.retry.NoneRetryStrategy(),
    )
    with pytest.raises(Exception, match="(?i)ssl|certificate"):
        untrusted.list_queues(compartment_id=TENANCY)  # the test CA is not trusted


def test_chromium_signs_in_to_the_console_over_https(https: Https) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(ignore_https_errors=True, base_url=https.console)
            context.set_default_timeout(15_000)
            page = context.new_page()
            sign_in(page, TOKEN)  # the session cookie is Secure: it works over HTTPS
            cookies = context.cookies()
            assert cookies and all(cookie["secure"] for cookie in cookies)
        finally:
            browser.close()


def test_mutual_tls_asks_every_http_port_for_a_client_certificate(tmp_path: Path, pki: Pki) -> None:
    server, endpoints = _serve(tmp_path, pki, "--tls-client-ca", str(pki.ca))
    try:
        with pytest.raises(Exception, match="(?i)ssl|certificate|connection|handshake"):
            boto3_client(endpoints.sqs, str(pki.ca)).list_queues()
        sqs = boto3_client(endpoints.sqs, str(pki.ca), client_cert=pki.client)
        assert sqs.create_queue(QueueName="mutual")["QueueUrl"].startswith(endpoints.sqs)
    finally:
        server.kill()


@pytest.mark.parametrize(
    "flag", ["--sqs-listen", "--azure-listen", "--console-listen", "--oci-listen"]
)
def test_a_non_loopback_http_port_without_tls_is_refused_at_start(
    tmp_path: Path, flag: str
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'[[principals]]\nname = "p"\ntokens = ["{hash_token(TOKEN)}"]\n'
        'access_keys = [{ id = "AKIATLS", secret = "tls-secret" }]\n'
        f'azure_keys = [{{ account = "devstoreaccount1", key = "{DEV_KEY}" }}]\n'
    )
    result = serve(flag, f"0.0.0.0:{free_port()}", "--auth-policy", str(policy))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        "TLS" in result.stderr
        and "--allow-unauthenticated" in result.stderr
        and flag in result.stderr
    )
