"""consume_process_ack's pipeline (receives leased ahead of fn, acks in flight behind it),
against a real local SparkSession and a real `leaseq serve`: the same outcome as the sequential
loop, leases kept on batches waiting for fn, and batches leased ahead of a misused fn put back."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from leaseq.spark_ext import ConsumeFailuresWarning, FnResultError, consume_process_ack

pytestmark = pytest.mark.timeout(300)


def fill(client, queue: str, n: int) -> None:
    client.send_arrow(queue, pa.table({"body": [f"m-{i}".encode() for i in range(n)]}))


def _fail_sevens(table):
    # Rows whose number ends in 7 fail; a list of one verdict per row.
    return [None if not b.endswith(b"7") else "ends in 7" for b in table.column("body").to_pylist()]


@pytest.mark.parametrize("ahead, acks", [(0, 0), (1, 2), (3, 3)])
def test_pipelined_or_not_the_same_acks_and_failures(spark, server, client, queue, ahead, acks):
    n = 2_000
    fill(client, queue, n)
    with pytest.warns(ConsumeFailuresWarning, match="fn failed with"):
        result = consume_process_ack(
            spark,
            queue,
            _fail_sevens,
            target=server.target,
            num_partitions=2,
            batch_size=150,
            wait_time=0.5,
            arrow=True,
            receive_ahead=ahead,
            acks_in_flight=acks,
            release_delay=300,  # failures stay out of sight: each is given to fn once
        )
    sevens = sum(1 for i in range(n) if str(i).endswith("7"))
    assert (result.received, result.acked, result.failed, result.lost) == (n, n - sevens, sevens, 0)
    assert client.stats(queue).total == sevens
    left = client.peek(queue, sevens, include_leased=True, include_delayed=True)
    assert sorted(m.body for m in left) == sorted(
        f"m-{i}".encode() for i in range(n) if str(i).endswith("7")
    )
    assert {m.last_error for m in left} == {"ends in 7"}
    assert {m.delivery_count for m in left} == {1}  # each failure given to fn once


def test_a_batch_leased_ahead_keeps_its_lease_while_fn_works_on_the_one_before(
    spark, server, client, queue
):
    # fn takes longer than the lease: the batch received ahead waits that long for its turn,
    # and its lease must be extended from its arrival, not from its turn in fn (else it ends,
    # another receive takes the messages again, and the ack finds the lease gone).
    n = 300
    fill(client, queue, n)

    def slow(table):
        time.sleep(2.5)  # the work itself: longer than the 1.5 s lease

    result = consume_process_ack(
        spark,
        queue,
        slow,
        target=server.target,
        num_partitions=2,
        batch_size=100,
        visibility_timeout=1.5,
        wait_time=0.5,
        arrow=True,
        receive_ahead=1,
    )
    assert (result.received, result.acked, result.lost) == (n, n, 0)
    assert client.stats(queue).total == 0


def test_a_fn_misused_after_its_first_batch_puts_back_the_batches_leased_ahead(
    spark, server, client, queue, tmp_path
):
    n, batch, ahead = 1_000, 100, 2
    fill(client, queue, n)
    marks = str(tmp_path)

    def fn(frame):
        from pathlib import Path

        calls = len(list(Path(marks).iterdir()))
        (Path(marks) / str(calls)).touch()
        return None if calls == 0 else frame  # right the first time, then the DataFrame

    with pytest.raises(FnResultError, match="fn returned a pandas.core.frame.DataFrame"):
        consume_process_ack(
            spark,
            queue,
            fn,
            target=server.target,
            num_partitions=1,
            batch_size=batch,
            wait_time=0.5,
            receive_ahead=ahead,
        )
    # The first batch was acked; everything else is visible again with no last_error, and no
    # message was delivered twice: the misused batch and the ones leased ahead of it (never
    # given to fn) are released by the driver after the job.
    left = n - batch
    stats = client.stats(queue)
    assert (stats.total, stats.visible, stats.leased) == (left, left, 0)
    peeked = client.peek(queue, left)
    assert {m.last_error for m in peeked} == {""}
    counts = [m.delivery_count for m in peeked]
    assert max(counts) == 1
    assert batch <= sum(counts) <= batch * (1 + ahead)
