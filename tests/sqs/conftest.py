"""A real `leaseq serve --sqs-listen` process per module and store (SQLite, PostgreSQL), and the
clients the SQS tests talk to it with: boto3, raw HTTP, and leaseq's own gRPC client.

Each test makes its own queues (unique names), so the tests of a module share one server."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from leaseq.client import QueueClient
from tests.support import postgres
from tests.support.process import ServerProcess, free_port

REGION = "us-east-1"


@dataclass
class SqsServer:
    process: ServerProcess
    sqs_port: int
    store: str

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.sqs_port}"

    @property
    def grpc_target(self) -> str:
        return self.process.target


def wait_listening(port: int, process: ServerProcess, timeout: float = 30.0) -> None:
    """The endpoint accepts connections (it starts before gRPC health says SERVING, so this
    is immediate; kept as a guard with a clear failure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            if process.process is not None and process.process.poll() is not None:
                raise RuntimeError(process.log_path.read_text()[-2000:]) from None
            time.sleep(0.05)
    raise TimeoutError(f"SQS endpoint not listening: {process.log_path.read_text()[-2000:]}")


def start_server(
    store_url: str, directory: Path, *extra: str, store: str = "sqlite"
) -> SqsServer:
    sqs_port = free_port()
    process = ServerProcess(
        store_url,
        free_port(),
        directory / "server.log",
        ("--sqs-listen", f"127.0.0.1:{sqs_port}", "--log-level", "debug", *extra),
    )
    process.start()
    wait_listening(sqs_port, process)
    return SqsServer(process, sqs_port, store)


def stop_server(server: SqsServer) -> None:
    process = server.process
    if process.process is not None and process.process.poll() is None:
        assert process.terminate() == 0, process.log_path.read_text()[-2000:]
    log = process.log_path.read_text()
    # Bad input is never a server fault: no request of any test may have been a 500.
    assert "unexpected error in SQS action" not in log, log[-3000:]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def sqs_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqsServer]:
    directory = tmp_path_factory.mktemp("sqs")
    if request.param == "sqlite":
        server = start_server(f"sqlite:///{directory / 'leaseq.db'}", directory)
        try:
            yield server
        finally:
            stop_server(server)
        return
    postgres.require_postgres()
    schema = postgres.new_schema()
    server = start_server(postgres.store_url(schema), directory, store="postgres")
    try:
        yield server
    finally:
        try:
            stop_server(server)
        finally:
            postgres.drop_schema(schema)


def boto3_client(endpoint: str, key: str = "test", secret: str = "test", **config: object):
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}, read_timeout=60, **config),
    )


@pytest.fixture(scope="module")
def sqs(sqs_server: SqsServer):
    return boto3_client(sqs_server.endpoint)


@pytest.fixture(scope="module")
def grpc_client(sqs_server: SqsServer) -> Iterator[QueueClient]:
    with QueueClient(sqs_server.grpc_target) as client:
        yield client


def unique(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def queue_url(sqs) -> str:
    return sqs.create_queue(QueueName=unique())["QueueUrl"]
