"""Fixtures of the client tests: one real server per module, a client, a fresh queue per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from leaseq.client import AsyncQueueClient, QueueClient, RetryPolicy
from tests.support.server import RunningServer, running_server

# Tests must fail fast, not wait out a long backoff, when something is wrong.
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server() as srv:
        yield srv


@pytest.fixture
def client(server: RunningServer) -> Iterator[QueueClient]:
    with QueueClient(server.target, retry=FAST_RETRY, timeout=10) as c:
        yield c


@pytest.fixture
async def aclient(server: RunningServer) -> AsyncIterator[AsyncQueueClient]:
    async with AsyncQueueClient(server.target, retry=FAST_RETRY, timeout=10) as c:
        yield c


@pytest.fixture
def queue_name() -> str:
    """A name no other test uses (the server is shared by a module's tests)."""
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def queue(client: QueueClient, queue_name: str) -> str:
    client.create_queue(queue_name)
    return queue_name
