"""consume_process_ack misused, against a real local SparkSession and a real `leaseq serve`:
each misuse raises its documented error, and the queue's messages end up visible, not
deleted, not failed (last_error untouched) and delivered at most once (never a second time)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from leaseq.client import QueueClient
from leaseq.client.errors import QueueNotFound, Unavailable
from leaseq.spark_ext import FnResultError, consume_process_ack, write_queue
from tests.support.process import free_port

pytestmark = pytest.mark.timeout(300)


def fill(client: QueueClient, queue: str, n: int) -> None:
    client.send_arrow(queue, pa.table({"body": [f"m-{i}".encode() for i in range(n)]}))


def untouched_or_delivered_once(client: QueueClient, queue: str, n: int) -> list[int]:
    """Assert every message is visible with no last_error; their delivery counts."""
    stats = client.stats(queue)
    assert (stats.total, stats.visible, stats.leased) == (n, n, 0)
    peeked = client.peek(queue, n)
    assert len(peeked) == n
    assert {m.last_error for m in peeked} == {""}
    counts = [m.delivery_count for m in peeked]
    assert max(counts) <= 1, "a message was delivered a second time"
    return counts


def calls_of(directory: Path) -> list[int]:
    """The batch sizes fn was called with (one marker file per call, written by the worker)."""
    return sorted(int(p.name.split("-")[0]) for p in directory.iterdir())


def test_fn_returning_its_dataframe_fails_the_job_and_leaves_the_queue_visible(
    spark, server, client, queue, tmp_path
):
    n, batch = 1_000, 100
    fill(client, queue, n)
    marks = str(tmp_path)

    def fn(frame):  # the mapInPandas habit
        (Path(marks) / f"{len(frame)}-{uuid.uuid4().hex}").touch()
        return frame

    with pytest.raises(FnResultError) as caught:
        consume_process_ack(
            spark,
            queue,
            fn,
            target=server.target,
            num_partitions=2,
            batch_size=batch,
            wait_time=0.5,
        )
    text = str(caught.value)
    assert "fn returned a pandas.core.frame.DataFrame of shape (100, 9)" in text
    assert "accepted: None (every row succeeded), or one value per row" in text
    # Each task called fn once, with a whole batch: no bisection, no second batch.
    calls = calls_of(tmp_path)
    assert 1 <= len(calls) <= 2 and set(calls) == {batch}
    counts = untouched_or_delivered_once(client, queue, n)
    assert sum(counts) == sum(calls)  # exactly the rows fn saw were delivered, once


def test_fn_returning_a_wrong_length_stops_after_one_call_even_when_it_raised_first(
    spark, server, client, queue, tmp_path
):
    n = 300
    fill(client, queue, n)
    marks = str(tmp_path)

    def fn(table):
        (Path(marks) / f"{table.num_rows}-{uuid.uuid4().hex}").touch()
        if table.num_rows > 50:
            raise ValueError("too big")  # starts a bisection ...
        return [True]  # ... that meets a wrong length: stop there

    with pytest.raises(FnResultError, match="fn returned 1 values for a batch of 50 rows"):
        consume_process_ack(
            spark,
            queue,
            fn,
            target=server.target,
            num_partitions=1,
            batch_size=100,
            wait_time=0.5,
            arrow=True,
        )
    assert calls_of(tmp_path) == [50, 100]
    counts = untouched_or_delivered_once(client, queue, n)
    assert sum(counts) == 100


def _jobs_run_by(spark, call) -> list[int]:
    """Run ``call`` under a job group of its own; the Spark jobs it started."""
    group = f"leaseq-test-{uuid.uuid4().hex}"
    context = spark.sparkContext
    context.setJobGroup(group, "misuse test")
    try:
        call()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return list(context.statusTracker().getJobIdsForGroup(group))


def _noop(frame):
    return None


@pytest.mark.parametrize(
    "overrides, error, text",
    [
        pytest.param(dict(fn="not a function"), TypeError, "fn must be callable", id="fn"),
        pytest.param(
            dict(num_partitions=0),
            ValueError,
            "num_partitions must be at least 1, got 0",
            id="partitions-0",
        ),
        pytest.param(
            dict(num_partitions=2.0),
            TypeError,
            "num_partitions must be an int, got float",
            id="partitions-float",
        ),
        pytest.param(
            dict(batch_size=0),
            ValueError,
            "batch_size must be between 1 and 10,000, got 0",
            id="batch-0",
        ),
        pytest.param(
            dict(batch_size=20_000),
            ValueError,
            "batch_size must be between 1 and 10,000",
            id="batch-20k",
        ),
        pytest.param(
            dict(max_messages_per_partition=0),
            ValueError,
            "max_messages_per_partition",
            id="max-messages-0",
        ),
        pytest.param(
            dict(visibility_timeout=0),
            ValueError,
            "visibility_timeout must be more than 0",
            id="lease-0",
        ),
        pytest.param(
            dict(wait_time=60),
            ValueError,
            "wait_time must be at least 0 and at most 30",
            id="wait-60",
        ),
        pytest.param(
            dict(release_delay=-1),
            ValueError,
            "release_delay must be at least 0",
            id="delay-negative",
        ),
        pytest.param(
            dict(receive_ahead=9),
            ValueError,
            "receive_ahead must be between 0 and 8, got 9",
            id="ahead-9",
        ),
        pytest.param(
            dict(acks_in_flight=-1),
            ValueError,
            "acks_in_flight must be between 0 and 8, got -1",
            id="acks-negative",
        ),
    ],
)
def test_bad_arguments_fail_before_any_job(spark, server, client, queue, overrides, error, text):
    fill(client, queue, 10)
    arguments = dict(fn=_noop, num_partitions=2, batch_size=100, wait_time=0.5)
    arguments.update(overrides)
    fn = arguments.pop("fn")

    def call():
        with pytest.raises(error, match=text):
            consume_process_ack(spark, queue, fn, target=server.target, **arguments)

    assert _jobs_run_by(spark, call) == []
    assert untouched_or_delivered_once(client, queue, 10) == [0] * 10


def test_an_unreachable_target_fails_in_the_driver_with_the_cause(spark, server, client, queue):
    fill(client, queue, 10)
    nowhere = f"127.0.0.1:{free_port()}"

    def call():
        with pytest.raises(Unavailable) as caught:
            consume_process_ack(spark, queue, _noop, target=nowhere, num_partitions=2)
        assert str(caught.value).startswith(
            f"consume_process_ack: cannot use queue {queue!r} at {nowhere}: "
        )
        assert "Connection refused" in str(caught.value) or "connect" in str(caught.value)

    assert _jobs_run_by(spark, call) == []
    assert untouched_or_delivered_once(client, queue, 10) == [0] * 10


def test_a_missing_queue_fails_in_the_driver(spark, server):
    def call():
        with pytest.raises(QueueNotFound, match="cannot use queue 'spark-no-such-queue'"):
            consume_process_ack(
                spark, "spark-no-such-queue", _noop, target=server.target, num_partitions=2
            )

    assert _jobs_run_by(spark, call) == []


def test_write_queue_to_an_unreachable_target_fails_before_the_job(spark):
    nowhere = f"127.0.0.1:{free_port()}"
    df = spark.createDataFrame([("a",), ("b",)], "body string")

    def call():
        with pytest.raises(Unavailable) as caught:
            write_queue(df, "jobs", target=nowhere)
        assert str(caught.value).startswith(f"write_queue: cannot use queue 'jobs' at {nowhere}: ")

    assert _jobs_run_by(spark, call) == []
