"""The Celery app of tests/sqs/test_celery.py: a broker over leaseq's SQS endpoint (kombu's SQS
transport, as a user configures it against any SQS endpoint), results in files, and the tasks
the tests run. The worker process imports it by name (`celery -A tests.sqs.celery_app worker`);
its settings come from the environment the test gives it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery

BROKER = os.environ.get("LEASEQ_TEST_CELERY_BROKER", "sqs://any:any@127.0.0.1:9324")
RESULTS = Path(os.environ.get("LEASEQ_TEST_CELERY_RESULTS", "results"))
MARKS = Path(os.environ.get("LEASEQ_TEST_CELERY_MARKS", "marks"))
PREFIX = os.environ.get("LEASEQ_TEST_CELERY_PREFIX", "celery-")

app = Celery("leaseq_tests", broker=BROKER, backend=f"file://{RESULTS}")
app.conf.update(
    broker_transport_options={
        "region": "us-east-1",
        "is_secure": False,
        "queue_name_prefix": PREFIX,
        "visibility_timeout": 4,  # seconds before an unacknowledged task comes back
        "wait_time_seconds": 1,
        "polling_interval": 0.1,
    },
    broker_connection_retry_on_startup=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
)


def _mark(name: str) -> int:
    """Append a line to the mark file `name`; the number of lines after."""
    MARKS.mkdir(parents=True, exist_ok=True)
    path = MARKS / name
    with path.open("a") as file:
        file.write(f"{time.time()}\n")
    return len(path.read_text().splitlines())


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def stamp() -> float:
    """When the worker ran it."""
    return time.time()


@app.task(bind=True, max_retries=5)
def flaky(self, name: str, failures: int) -> int:
    """Fails `failures` times (each run marked), then answers the number of runs."""
    runs = _mark(name)
    if runs <= failures:
        raise self.retry(countdown=0.5, exc=RuntimeError(f"run {runs} fails"))
    return runs


@app.task(acks_late=True)
def slow_once(name: str) -> int:
    """Marks each run; the first one sleeps far longer than the test waits (the worker running
    it gets killed), later ones answer at once."""
    runs = _mark(name)
    if runs == 1:
        time.sleep(600)
    return runs
