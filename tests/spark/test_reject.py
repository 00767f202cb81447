"""consume_process_ack's fn rejecting rows (``leaseq.client.Reject``): they go to the dead letter
queue at once with the reason, instead of being released for a retry."""

from __future__ import annotations

import pyarrow as pa
import pytest

from leaseq.client import Reject
from leaseq.spark_ext import ConsumeFailuresWarning, consume_process_ack

pytestmark = pytest.mark.timeout(300)


def _bodies(client, queue: str, n: int) -> None:
    client.send_arrow(queue, pa.table({"body": [str(i).encode() for i in range(n)]}))


def test_rejected_rows_go_to_the_dead_letter_queue_and_failed_ones_are_retried(
    spark, server, client
):
    client.create_queue("spark-reject-dlq")
    client.create_queue(
        "spark-reject",
        visibility_timeout=60,
        dead_letter_queue="spark-reject-dlq",
        max_delivery_count=10,
    )
    n = 500
    _bodies(client, "spark-reject", n)
    poison = {i for i in range(n) if i % 50 == 3}
    flaky = {i for i in range(n) if i % 50 == 4}

    def fn(table):
        out = []
        for body in table.column("body").to_pylist():
            i = int(body)
            out.append(
                Reject(f"poison {i}") if i in poison else "try later" if i in flaky else None
            )
        return out

    with pytest.warns(ConsumeFailuresWarning):
        result = consume_process_ack(
            spark,
            "spark-reject",
            fn,
            target=server.target,
            num_partitions=2,
            batch_size=100,
            wait_time=0.5,
            arrow=True,
        )
    assert result.rejected == len(poison)
    assert result.acked == n - len(poison) - len(flaky)
    assert len(flaky) <= result.failed <= 2 * len(flaky)  # two tasks: a retry may fail twice
    # Rejected: in the dead letter queue now, each with its own reason, delivered once.
    dead = client.peek("spark-reject-dlq", 100)
    assert {int(m.body) for m in dead} == poison
    assert all(m.last_error == f"poison {int(m.body)}" for m in dead)
    assert {m.delivery_count for m in dead} == {1}
    # Failed: back in the queue, visible, for a retry.
    left = client.peek("spark-reject", 100)
    assert {int(m.body) for m in left} == flaky
    assert {m.last_error for m in left} == {"try later"}


def test_fn_raising_reject_rejects_its_whole_batch_without_bisecting(spark, server, client):
    client.create_queue("spark-reject-batch-dlq")
    client.create_queue(
        "spark-reject-batch",
        visibility_timeout=60,
        dead_letter_queue="spark-reject-batch-dlq",
        max_delivery_count=10,
    )
    _bodies(client, "spark-reject-batch", 300)
    calls = []

    def fn(table):
        bodies = [int(b) for b in table.column("body").to_pylist()]
        calls.append(len(bodies))
        if 150 in bodies:
            raise Reject("a batch with 150 is refused whole")

    result = consume_process_ack(
        spark,
        "spark-reject-batch",
        fn,
        target=server.target,
        num_partitions=1,
        batch_size=100,
        wait_time=0.5,
        arrow=True,
    )
    dead = client.peek("spark-reject-batch-dlq", 300)
    assert 150 in {int(m.body) for m in dead}
    assert result.rejected == len(dead) == 100  # the one batch that held 150, not bisected
    assert {m.last_error for m in dead} == {"a batch with 150 is refused whole"}
    assert result.acked == 200 and result.failed == 0
    assert client.stats("spark-reject-batch").total == 0


def test_without_a_dead_letter_queue_rejected_rows_are_released_and_said_so(
    spark, server, client, queue
):
    _bodies(client, queue, 100)

    def fn(table):
        return [Reject("no") if int(b) < 10 else None for b in table.column("body").to_pylist()]

    with pytest.warns(ConsumeFailuresWarning) as warned:
        result = consume_process_ack(
            spark, queue, fn, target=server.target, num_partitions=1, wait_time=0.5, arrow=True
        )
    assert (result.rejected, result.failed, result.acked) == (0, 10, 90)
    assert "no dead letter queue" in str(warned[0].message)
    left = client.peek(queue, 100)
    assert {int(m.body) for m in left} == set(range(10))
    assert {m.last_error for m in left} == {"no"}
