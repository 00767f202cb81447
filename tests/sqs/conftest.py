"""A real `leaseq serve --sqs-listen` process per module and store (SQLite, PostgreSQL), and the
clients the SQS tests talk to it with: boto3, raw HTTP, and leaseq's own gRPC client.

Each test makes its own queues (unique names), so the tests of a module share one server."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from leaseq.client import QueueClient
from tests.support import http_frontend
from tests.support.http_frontend import FrontendServer

REGION = "us-east-1"


SqsServer = FrontendServer
FAULT = "unexpected error in SQS action"  # what a 500 logs: bad input is never a server fault


def start_server(store_url: str, directory: Path, *extra: str, store: str = "sqlite") -> SqsServer:
    return http_frontend.start("--sqs-listen", store_url, directory, *extra, store=store)


def stop_server(server: SqsServer) -> None:
    http_frontend.stop(server, FAULT)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def sqs_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SqsServer]:
    yield from http_frontend.per_store(request, tmp_path_factory, "--sqs-listen", FAULT)


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


def wait_for_move_task(sqs, source_arn: str, timeout: float = 30.0) -> list[dict]:
    """ListMessageMoveTasks' results once the latest task has ended (move tasks run in the
    server, asynchronously: the test can only ask, as an SQS user does)."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = sqs.list_message_move_tasks(SourceArn=source_arn, MaxResults=10)["Results"]
        if tasks and tasks[0]["Status"] not in ("RUNNING", "CANCELLING"):
            return tasks
        assert time.monotonic() < deadline, f"the move task still runs: {tasks}"
        time.sleep(0.05)
