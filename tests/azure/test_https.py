"""The Azure endpoint over HTTPS (--tls-cert/--tls-key), without a policy (the development
account) on a SQLite file: the SDK with DefaultEndpointsProtocol=https, sync and aio, a SAS that
allows https only, and the `-secondary` account name; without the CA the SDK refuses the
certificate."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.storage.queue import QueueClient, QueueSasPermissions, generate_queue_sas
from azure.storage.queue.aio import QueueClient as AsyncQueueClient

from tests.ops.conftest import Serve
from tests.security.certs import CA
from tests.support.process import free_port

from .conftest import DEV_ACCOUNT, DEV_KEY, unique


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(https endpoint, CA file) of one server."""
    directory = tmp_path_factory.mktemp("azure-https")
    ca = CA("leaseq Azure test CA")
    (directory / "ca.pem").write_bytes(ca.pem)
    cert, key = ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",), server=True).write(
        directory, "server"
    )
    port = free_port()
    server = Serve(
        directory,
        f"sqlite:///{directory / 'leaseq.db'}",
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "--azure-listen",
        f"127.0.0.1:{port}",
    ).start()
    try:
        yield f"https://127.0.0.1:{port}", str(Path(directory / "ca.pem"))
    finally:
        server.kill()


def connection(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=https;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
        f"QueueEndpoint={endpoint}/{DEV_ACCOUNT};"
    )


def test_the_sdk_over_https(tls):
    endpoint, ca = tls
    queue = QueueClient.from_connection_string(
        connection(endpoint), unique(), retry_total=0, connection_verify=ca
    )
    queue.create_queue()
    sent = queue.send_message("over tls")
    got = queue.receive_message(visibility_timeout=30)
    assert (got.id, got.content) == (sent.id, "over tls")
    queue.delete_message(got)
    with pytest.raises(ServiceRequestError):  # the SDK's default trust store lacks the test CA
        QueueClient.from_connection_string(
            connection(endpoint), queue.queue_name, retry_total=0
        ).get_queue_properties()


def test_aio_over_https(tls):
    endpoint, ca = tls

    async def main() -> str:
        async with AsyncQueueClient.from_connection_string(
            connection(endpoint), unique(), retry_total=0, connection_verify=ca
        ) as queue:
            await queue.create_queue()
            await queue.send_message("aio tls")
            got = await queue.receive_message()
            await queue.delete_message(got)
            return got.content

    assert asyncio.run(main()) == "aio tls"


def test_an_https_only_sas_and_the_secondary_over_https(tls):
    endpoint, ca = tls
    owner = QueueClient.from_connection_string(
        connection(endpoint), unique(), retry_total=0, connection_verify=ca
    )
    owner.create_queue()
    token = generate_queue_sas(
        DEV_ACCOUNT,
        owner.queue_name,
        DEV_KEY,
        permission=QueueSasPermissions(read=True, add=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
        protocol="https",
    )
    client = QueueClient(
        f"{endpoint}/{DEV_ACCOUNT}",
        owner.queue_name,
        credential=token,
        retry_total=0,
        connection_verify=ca,
    )
    client.send_message("https only")
    secondary = QueueClient(
        f"{endpoint}/{DEV_ACCOUNT}-secondary",
        owner.queue_name,
        credential={"account_name": DEV_ACCOUNT, "account_key": DEV_KEY},
        retry_total=0,
        connection_verify=ca,
    )
    assert [m.content for m in secondary.peek_messages()] == ["https only"]
