"""leaseq.spark_ext against a real local SparkSession and a real `leaseq serve` process."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark import TaskContext
from pyspark.sql import functions as F

from leaseq.client import QueueClient
from leaseq.spark_ext import (
    ConsumeFailedError,
    ConsumeFailuresWarning,
    ack_dataframe,
    consume_process_ack,
    read_queue,
    register,
    write_queue,
)

pytestmark = pytest.mark.timeout(300)


def parquet_sink(directory: Path):
    """fn for consume_process_ack: write the batch as one parquet file (a new name per call)."""
    directory = str(directory)

    def fn(frame):
        table = pa.Table.from_pandas(frame[["message_id", "body"]], preserve_index=False)
        pq.write_table(table, f"{directory}/{uuid.uuid4().hex}.parquet")

    return fn


def read_sink(directory: Path) -> pa.Table:
    files = sorted(directory.glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else pa.table({})


def test_write_then_consume_200k_exactly_once(spark, server, client, queue, tmp_path, caplog):
    n = 200_000
    df = spark.range(0, n, numPartitions=4).select(
        F.col("id"), F.concat(F.lit("row-"), F.col("id").cast("string")).alias("body")
    )
    written = write_queue(df, queue, target=server.target, attributes_cols=["id"])
    assert (written.rows, written.enqueued, written.duplicates) == (n, n, 0)
    assert client.stats(queue).visible == n

    sink = tmp_path / "sink"
    sink.mkdir()
    caplog.set_level("INFO", logger="leaseq.spark_ext")
    result = consume_process_ack(
        spark,
        queue,
        parquet_sink(sink),
        target=server.target,
        num_partitions=2,
        batch_size=10_000,
        visibility_timeout=60,
        wait_time=0.5,
    )
    assert (result.received, result.acked, result.failed, result.lost) == (n, n, 0, 0)

    # Progress: per partition in the result and one driver log line each, with the rate.
    assert [p["partition"] for p in result.per_partition] == [0, 1]
    assert sum(p["received"] for p in result.per_partition) == n
    for part in result.per_partition:
        assert part["seconds"] > 0 and part["failures"] == []
        assert part["rows_per_second"] == pytest.approx(part["received"] / part["seconds"])
        # Where the time went: the phases of the task's loop, within its wall time.
        phases = [part["receive_seconds"], part["fn_seconds"], part["settle_seconds"]]
        assert all(p > 0 for p in phases) and sum(phases) <= part["seconds"], part
    assert result.seconds > 0 and result.rows_per_second == pytest.approx(n / result.seconds)
    lines = [r.getMessage() for r in caplog.records if r.name == "leaseq.spark_ext"]
    for part in result.per_partition:
        assert any(
            line.startswith(
                f"consume_process_ack partition {part['partition']}: "
                f"{part['received']:,} messages in "
            )
            and "/s)" in line
            and "; receive " in line
            and " s, fn " in line
            and " s, settle " in line
            for line in lines
        ), lines

    out = read_sink(sink)
    bodies = out.column("body").to_pylist()
    assert len(bodies) == n
    assert set(bodies) == {f"row-{i}".encode() for i in range(n)}
    assert len(set(out.column("message_id").to_pylist())) == n
    stats = client.stats(queue)
    assert (stats.total, stats.visible, stats.leased) == (0, 0, 0)


def test_task_failing_once_sends_no_duplicates_and_loses_nothing(spark, server, client, tmp_path):
    queue = "spark-retry"
    client.create_queue(queue, max_message_bytes=1024)
    n, bad = 40_000, 15_000

    def flaky(batches):
        # On the first attempt of partition 0 (ids 0..19,999) row 15,000 has a body over the
        # queue's max_message_bytes: the server refuses that row alone, so write_queue has
        # enqueued the rest of what it sent when it fails the task. The second attempt has the
        # row right, and re-sends the whole partition with the same dedup ids.
        ctx = TaskContext.get()
        for batch in batches:
            if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
                frame = batch.to_pandas()
                frame.loc[frame["id"] == bad, "body"] = "x" * 2000
                batch = pa.RecordBatch.from_pandas(frame, schema=batch.schema, preserve_index=False)
            yield batch

    df = (
        spark.range(0, n, numPartitions=2)
        .select(F.col("id"), F.concat(F.lit("m-"), F.col("id").cast("string")).alias("body"))
        .mapInArrow(flaky, "id long, body string")
    )
    target = server.target
    written = write_queue(df, queue, target=target)
    assert written.rows == n
    # The retried attempt re-sent the rows of the failed one: recognised by their dedup ids.
    assert written.duplicates == n // 2 - 1
    assert written.enqueued == n - written.duplicates
    assert client.stats(queue).total == n  # nothing lost, nothing twice

    sink = tmp_path / "sink"
    sink.mkdir()
    result = consume_process_ack(
        spark, queue, parquet_sink(sink), target=target, num_partitions=2, wait_time=0.5
    )
    assert result.acked == n
    bodies = read_sink(sink).column("body").to_pylist()
    assert sorted(bodies) == sorted(f"m-{i}".encode() for i in range(n))
    assert client.stats(queue).total == 0


def test_failed_rows_stay_in_the_queue_with_last_error(spark, server, client, queue, tmp_path):
    n = 2_000
    df = spark.range(0, n, numPartitions=2).select(F.col("id").cast("string").alias("body"))
    write_queue(df, queue, target=server.target)
    raising = {i for i in range(n) if i % 100 == 7}  # fn raises when these are in a batch
    refused = {i for i in range(n) if i % 100 == 3}  # fn reports these as failed
    sink = str(tmp_path)

    def fn(frame):
        ids = frame["body"].map(lambda b: int(b.decode()))
        bad = ids[ids.isin(list(raising))]
        if len(bad):
            raise ValueError(f"cannot process {bad.iloc[0]}")
        ok = frame[~ids.isin(list(refused))]
        if len(ok):
            pq.write_table(
                pa.Table.from_pandas(ok[["body"]], preserve_index=False),
                f"{sink}/{uuid.uuid4().hex}.parquet",
            )
        return ids.map(lambda i: "refused by fn" if i in refused else None)

    with pytest.warns(ConsumeFailuresWarning) as warned:
        result = consume_process_ack(
            spark, queue, fn, target=server.target, num_partitions=2, batch_size=500, wait_time=0.5
        )
    failed = raising | refused
    # The warning says how many failed, and why (the first few reasons).
    (warning,) = warned
    text = str(warning.message)
    assert text.startswith(f"consume_process_ack: fn failed with {result.failed:,} of ")
    assert "ValueError: cannot process" in text or "refused by fn" in text
    assert 1 <= len(result.failures) <= 5 and all(f in text for f in result.failures)
    # Each task calls fn at most once per message; with two tasks a failed message may have
    # failed in both.
    assert len(failed) <= result.failed <= 2 * len(failed)
    assert result.acked == n - len(failed)

    # The failed ones were released at once: visible again, each with its reason.
    left = client.peek(queue, 100)
    assert {int(m.body) for m in left} == failed
    for m in left:
        if int(m.body) in raising:
            assert m.last_error == f"ValueError: cannot process {int(m.body)}"
        else:
            assert m.last_error == "refused by fn"
    assert client.stats(queue).total == len(failed)
    done = {int(b) for b in read_sink(tmp_path).column("body").to_pylist()}
    assert done == set(range(n)) - failed


def test_raise_on_failure_raises_after_the_job_with_the_result(spark, server, client, queue):
    n = 200
    client.send_arrow(queue, pa.table({"body": [str(i).encode() for i in range(n)]}))
    refused = {i for i in range(n) if i % 50 == 3}

    def fn(table):
        return [
            None if int(b) not in refused else f"refused {int(b)}"
            for b in table.column("body").to_pylist()
        ]

    with pytest.raises(ConsumeFailedError) as caught:
        consume_process_ack(
            spark,
            queue,
            fn,
            target=server.target,
            num_partitions=1,
            wait_time=0.5,
            arrow=True,
            raise_on_failure=True,
        )
    result = caught.value.result
    assert (result.received, result.acked, result.failed) == (n, n - len(refused), len(refused))
    assert str(caught.value).startswith(
        f"consume_process_ack: fn failed with {len(refused)} of {n} messages"
    )
    assert "refused 3" in str(caught.value)
    # The failed ones are back in the queue, visible, with their reason.
    left = client.peek(queue, 100)
    assert {int(m.body) for m in left} == refused
    assert {m.last_error for m in left} == {f"refused {i}" for i in refused}


def test_each_partition_logs_its_progress_in_its_worker(spark, server, client, queue):
    # Spark's Python worker log capture (4.1+) keeps the lines the executors logged: each task
    # logs one at INFO though nobody configured logging in the worker.
    client.send_arrow(queue, pa.table({"body": [b"p"] * 300}))
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    try:
        result = consume_process_ack(
            spark,
            queue,
            lambda table: None,
            target=server.target,
            num_partitions=2,
            batch_size=100,
            wait_time=0.5,
            arrow=True,
        )
        logs = (
            spark.tvf.python_worker_logs()
            .where(F.col("logger") == "leaseq.spark_ext")
            .select("level", "msg")
            .collect()
        )
    finally:
        spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")
    assert result.acked == 300
    for part in result.per_partition:
        expected = (
            f"consume_process_ack partition {part['partition']}: {part['received']:,} messages in "
        )
        assert [r.level for r in logs if r.msg.startswith(expected)] == ["INFO"], logs


def test_a_workers_first_client_freezes_its_heap(spark, server):
    # PySpark's daemon runs a full gc.collect() after every task of a reused worker; what a
    # worker holds once its first client exists (pyspark, pyarrow, grpc, leaseq) is frozen so
    # that those collections skip it. Checked in a real Python worker.
    target = server.target

    def task(batches):
        import gc

        from leaseq.spark_ext._executor import ClientSettings, client_for

        for _ in batches:
            pass
        client_for(ClientSettings(target))
        frozen = gc.get_freeze_count()
        client_for(ClientSettings(target))  # cached: no second freeze
        yield pa.RecordBatch.from_pydict({"frozen": [frozen], "again": [gc.get_freeze_count()]})

    row = spark.range(1, numPartitions=1).mapInArrow(task, "frozen long, again long").first()
    assert row.frozen > 10_000  # the modules' objects, not a handful
    assert row.again == row.frozen


def test_read_queue_and_ack_dataframe(spark, server, client, queue):
    client.send_arrow(queue, pa.table({"body": [f"r{i}".encode() for i in range(300)]}))
    df = read_queue(
        spark,
        queue,
        target=server.target,
        num_partitions=2,
        max_messages_per_partition=200,
        visibility_timeout=60,
        wait_time=1,
    )
    assert df.columns == [
        "message_id",
        "receipt",
        "body",
        "attributes",
        "channel",
        "enqueued_at",
        "visible_at",
        "expires_at",
        "delivery_count",
    ]
    first = df.select("receipt").collect()
    # A second action while the leases live re-reads the same deliveries (receive attempt ids).
    again = df.select("receipt").collect()
    assert len(first) == 300
    assert sorted(r.receipt for r in again) == sorted(r.receipt for r in first)

    receipts = spark.createDataFrame([(r.receipt,) for r in first], "r string")
    acks = ack_dataframe(receipts, target=server.target, queue=queue, receipt_col="r")
    statuses = acks.collect()
    assert {r.status for r in statuses} == {"OK"} and all(r.done for r in statuses)
    # Running it again (as a retried task would) reports the same receipts as done.
    repeated = acks.collect()
    assert {r.status for r in repeated} == {"ALREADY_DELETED"} and all(r.done for r in repeated)
    assert client.stats(queue).total == 0


def test_data_source_round_trip(spark, server, client, queue):
    register(spark)
    rows = [(f"b{i}", f"k{i % 3}", "eu" if i % 2 else "us") for i in range(500)]
    source = spark.createDataFrame(rows, "body string, kind string, region string").repartition(2)
    (
        source.write.format("leaseq")
        .mode("append")
        .option("target", server.target)
        .option("queue", queue)
        .option("attributesCols", "kind")
        .option("channelCol", "region")
        .save()
    )
    assert client.stats(queue).visible == 500

    df = (
        spark.read.format("leaseq")
        .option("target", server.target)
        .option("queue", queue)
        .option("numPartitions", 2)
        .option("maxMessagesPerPartition", 400)
        .option("visibilityTimeout", 60)
        .option("waitTime", 1)
        .load()
    )
    got = df.collect()
    assert len(got) == 500
    by_body = {r.body.decode(): r for r in got}
    assert set(by_body) == {b for b, _, _ in rows}
    for body, kind, region in rows:
        assert by_body[body].attributes == {"kind": kind}
        assert by_body[body].channel == region
        assert by_body[body].delivery_count == 1
    acked = client.ack_arrow(queue, [r.receipt for r in got])
    assert set(acked.column("status").to_pylist()) == {"OK"}
    assert client.stats(queue).total == 0


def test_leases_are_extended_while_fn_runs(spark, server, client, queue):
    client.send_arrow(queue, pa.table({"body": [f"e{i}".encode() for i in range(50)]}))
    target = server.target

    def slow(table):
        # "Work" that outlasts the 1 s lease three times over: a long poll on an empty queue
        # (the server holds it for 3 s). Meanwhile nobody else may receive the batch.
        with QueueClient(target) as c:
            c.create_queue("spark-idle")
            assert c.receive("spark-idle", 1, wait_time=3) == []
            assert c.receive(queue, 10, wait_time=0) == []

    result = consume_process_ack(
        spark,
        queue,
        slow,
        target=target,
        num_partitions=1,
        visibility_timeout=1,
        wait_time=0.5,
        arrow=True,
    )
    assert (result.received, result.acked, result.lost) == (50, 50, 0)
    assert client.stats(queue).total == 0
