"""Retries after a real UNAVAILABLE: only for safe calls, with backoff, until the server is back.

The scenarios are made deterministic with the client's own retry log line: the first
"retrying" record (emitted before the backoff wait) starts the server, so the first attempt
always fails (nothing listens yet) and a later one always finds the server.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from leaseq.client import (
    AsyncQueueClient,
    DeadlineExceeded,
    InvalidArgument,
    LeaseqError,
    QueueClient,
    RetryPolicy,
    SendEntry,
    Unavailable,
)
from leaseq.server.app import serve
from tests.support.process import free_port
from tests.support.server import running_server

PATIENT = RetryPolicy(max_attempts=20, initial_backoff=0.01, max_backoff=0.1)


class ServerOnPort:
    """A real server on a port chosen in advance (`leaseq.server.app.serve` in a thread)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await serve(
            "memory://",
            f"127.0.0.1:{self.port}",
            grace=0.5,
            ready=lambda port: self._ready.set(),
            stop=self._stop,
        )

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()
            assert self._ready.wait(30), "the server did not start"

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


class OnRetry(logging.Handler):
    """Collects the client's retry log records and runs an action at the first one."""

    def __init__(self, action: Callable[[], None] | None = None) -> None:
        super().__init__(logging.DEBUG)
        self.action = action
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" not in record.getMessage():
            return
        self.records.append(record)
        if len(self.records) == 1 and self.action is not None:
            self.action()


@pytest.fixture
def on_retry() -> Iterator[Callable[..., OnRetry]]:
    logger = logging.getLogger("leaseq.client")
    installed: list[OnRetry] = []
    old_level = logger.level
    logger.setLevel(logging.DEBUG)

    def install(action: Callable[[], None] | None = None) -> OnRetry:
        handler = OnRetry(action)
        logger.addHandler(handler)
        installed.append(handler)
        return handler

    yield install
    for handler in installed:
        logger.removeHandler(handler)
    logger.setLevel(old_level)


@pytest.fixture
def late_server() -> Iterator[ServerOnPort]:
    server = ServerOnPort(free_port())
    yield server
    server.stop()


def test_a_safe_call_waits_for_the_server(
    late_server: ServerOnPort, on_retry: Callable[..., OnRetry]
) -> None:
    log = on_retry(late_server.start)
    with QueueClient(f"127.0.0.1:{late_server.port}", retry=PATIENT) as client:
        assert client.list_queues() == []
        client.create_queue("after-retry")
    assert log.records, "the first attempt cannot have reached the server"
    assert "ListQueues failed with UNAVAILABLE (attempt 1 of 20)" in log.records[0].getMessage()


async def test_async_safe_call_waits_for_the_server(
    late_server: ServerOnPort, on_retry: Callable[..., OnRetry]
) -> None:
    log = on_retry(late_server.start)
    async with AsyncQueueClient(f"127.0.0.1:{late_server.port}", retry=PATIENT) as client:
        await client.create_queue("q")
        assert [m.body for m in await client.peek("q")] == []
    assert log.records


def test_sends_with_dedup_ids_are_retried(
    late_server: ServerOnPort, on_retry: Callable[..., OnRetry]
) -> None:
    log = on_retry(late_server.start)
    with QueueClient(f"127.0.0.1:{late_server.port}", retry=PATIENT) as client:
        # The queue does not exist yet: the retried send reaches the server and gets NOT_FOUND,
        # which proves it was retried (and is not retried further).
        with pytest.raises(LeaseqError) as caught:
            entries = [SendEntry("a", dedup_id="1"), SendEntry(b"", dedup_id="2")]
            client.send_batch("missing", entries)
    assert caught.value.code.name == "NOT_FOUND"
    assert log.records


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.send("q", "no dedup id"), id="send"),
        pytest.param(lambda c: c.send_batch("q", [SendEntry("a", dedup_id="1"), "b"]), id="mixed"),
        pytest.param(lambda c: c.delete_queue("q"), id="delete_queue"),
        pytest.param(lambda c: c.purge_queue("q"), id="purge_queue"),
        pytest.param(lambda c: c.update_message("q", "r", body="x"), id="update_message"),
        pytest.param(lambda c: c.redrive("q"), id="redrive"),
    ],
)
def test_unsafe_calls_are_not_retried(
    call: Callable[[QueueClient], object], on_retry: Callable[..., OnRetry]
) -> None:
    log = on_retry()
    with QueueClient(f"127.0.0.1:{free_port()}", retry=PATIENT) as client:  # nothing listens
        with pytest.raises(Unavailable):
            call(client)
    assert log.records == []


def test_attempts_are_bounded(on_retry: Callable[..., OnRetry]) -> None:
    log = on_retry()
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.001, max_backoff=0.001)
    with QueueClient(f"127.0.0.1:{free_port()}", retry=policy) as client:
        with pytest.raises(Unavailable):
            client.get_queue("q")
    assert len(log.records) == 2  # 3 attempts, 2 waits


@pytest.mark.parametrize("retry_deadline_exceeded", [True, False])
def test_deadline_exceeded_is_retried_for_safe_calls(
    on_retry: Callable[..., OnRetry], retry_deadline_exceeded: bool
) -> None:
    log = on_retry()
    policy = RetryPolicy(
        max_attempts=2, initial_backoff=0.001, retry_deadline_exceeded=retry_deadline_exceeded
    )
    # A listener that never answers: every attempt ends by its deadline.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        target = f"127.0.0.1:{silent.getsockname()[1]}"
        with QueueClient(target, retry=policy, timeout=0.2) as client:
            with pytest.raises(DeadlineExceeded):
                client.get_queue("q")  # safe: retried when the policy says so
            with pytest.raises(DeadlineExceeded):
                client.send("q", "x")  # never retried: it might have been enqueued
    expected = ["GetQueue failed with DEADLINE_EXCEEDED"] if retry_deadline_exceeded else []
    assert [r.getMessage().split(" (")[0] for r in log.records] == expected


def test_retry_none_disables_retries(on_retry: Callable[..., OnRetry]) -> None:
    log = on_retry()
    with QueueClient(f"127.0.0.1:{free_port()}", retry=None) as client:
        with pytest.raises(Unavailable):
            client.get_queue("q")
    assert log.records == []


def test_server_retry_info_sets_the_wait(on_retry: Callable[..., OnRetry]) -> None:
    log = on_retry()
    policy = RetryPolicy(max_attempts=2, initial_backoff=0.001, max_backoff=0.02)
    with running_server() as server:
        server.drain()  # UNAVAILABLE with RetryInfo 1 s
        with QueueClient(server.target, retry=policy) as client:
            with pytest.raises(Unavailable) as caught:
                client.get_queue("q")
    assert caught.value.retry_after == pytest.approx(1.0)
    # The server's delay, capped at max_backoff, instead of the jittered backoff.
    [record] = log.records
    assert "retrying in 0.020 s" in record.getMessage()


def test_other_errors_are_not_retried(
    client: QueueClient, on_retry: Callable[..., OnRetry]
) -> None:
    log = on_retry()
    with pytest.raises(InvalidArgument):
        client.receive("q", max_messages=0)
    assert log.records == []


# --- the policy's arithmetic -----------------------------------------------------------------


def test_backoff_grows_is_capped_and_jittered() -> None:
    policy = RetryPolicy(max_attempts=10, initial_backoff=0.1, max_backoff=1.0, jitter=0.2)
    error = Unavailable("down")
    for attempts, base in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        for _ in range(50):
            delay = policy.delay(attempts, error)
            assert delay is not None and base * 0.8 <= delay <= base * 1.2
    assert policy.delay(10, error) is None  # attempts used up


def test_no_jitter_is_exact() -> None:
    policy = RetryPolicy(initial_backoff=0.5, multiplier=3, max_backoff=10, jitter=0)
    assert [policy.delay(n, Unavailable()) for n in (1, 2, 3, 4, 5)] == [0.5, 1.5, 4.5, 10, None]


def test_only_unavailable_is_retried() -> None:
    assert RetryPolicy().delay(1, InvalidArgument("bad")) is None


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"initial_backoff": -1}, {"multiplier": 0.5}, {"jitter": 2}],
)
def test_policy_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
