"""Celery over kombu's SQS transport against a real `leaseq serve --sqs-listen`: a real worker
process (`celery worker`, solo pool), results, countdown/ETA, retries, and an acks_late task
redelivered to a new worker after the first one is killed with SIGKILL mid-task."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from .conftest import SqsServer, start_server, stop_server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[SqsServer]:
    directory = tmp_path_factory.mktemp("sqs-celery")
    server = start_server(f"sqlite:///{directory / 'leaseq.db'}", directory)
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture(scope="module")
def environment(server, tmp_path_factory) -> Iterator[dict[str, str]]:
    """What the app (tests/sqs/celery_app.py) reads, in this process and the workers'."""
    directory = tmp_path_factory.mktemp("celery")
    settings = {
        "LEASEQ_TEST_CELERY_BROKER": f"sqs://any:any@127.0.0.1:{server.port}",
        "LEASEQ_TEST_CELERY_RESULTS": str(directory / "results"),
        "LEASEQ_TEST_CELERY_MARKS": str(directory / "marks"),
        "LEASEQ_TEST_CELERY_PREFIX": f"t{uuid.uuid4().hex[:8]}-",
    }
    (directory / "results").mkdir()
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)  # before the app is imported below
    try:
        yield settings
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Worker:
    def __init__(self, environment: dict[str, str], log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.sqs.celery_app", "worker"]
            + ["--pool", "solo", "--loglevel", "info", "--without-gossip", "--without-mingle"],
            cwd=ROOT,
            env={**os.environ, **environment},
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while "ready." not in self.log.read_text(errors="replace"):
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def app(environment):
    from tests.sqs import celery_app

    return celery_app


@pytest.fixture(scope="module")
def worker(environment, app, tmp_path_factory) -> Iterator[Worker]:
    running = Worker(environment, tmp_path_factory.mktemp("worker") / "worker.log")
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()


def marks(environment: dict[str, str], name: str) -> list[float]:
    path = Path(environment["LEASEQ_TEST_CELERY_MARKS"]) / name
    return [float(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_task_runs_and_its_result_comes_back(app, worker):
    results = [app.add.delay(i, 10) for i in range(5)]
    assert [r.get(timeout=60) for r in results] == [10, 11, 12, 13, 14]


def test_countdown_and_eta_delay_the_run(app, worker):
    sent = time.time()
    later = app.stamp.apply_async(countdown=3)
    eta = app.stamp.apply_async(eta=datetime.now(UTC) + timedelta(seconds=2))
    assert later.get(timeout=60) >= sent + 3
    assert eta.get(timeout=60) >= sent + 2


def test_a_failing_task_is_retried_until_it_succeeds(app, worker, environment):
    name = f"flaky-{uuid.uuid4().hex[:8]}"
    assert app.flaky.delay(name, 2).get(timeout=60) == 3
    runs = marks(environment, name)
    assert len(runs) == 3
    assert all(b - a >= 0.4 for a, b in zip(runs, runs[1:]))  # each retry after its countdown


def test_an_acks_late_task_comes_back_after_its_worker_is_killed(
    app, environment, tmp_path_factory
):
    name = f"slow-{uuid.uuid4().hex[:8]}"
    first = Worker(environment, tmp_path_factory.mktemp("killed") / "worker.log")
    second = None
    try:
        first.wait_ready()
        result = app.slow_once.delay(name)
        deadline = time.monotonic() + 60
        while not marks(environment, name):
            assert time.monotonic() < deadline, first.log.read_text()[-3000:]
            time.sleep(0.1)
        first.process.send_signal(signal.SIGKILL)  # mid-task: the message was never acked
        first.process.wait(30)
        second = Worker(environment, tmp_path_factory.mktemp("second") / "worker.log")
        second.wait_ready()
        # The lease (visibility_timeout 4 s) ends; the new worker receives it and runs it again.
        assert result.get(timeout=90) == 2
        assert len(marks(environment, name)) == 2
    finally:
        first.stop()
        if second is not None:
            second.stop()
