"""The "leaseq" Structured Streaming source and sink against a real local SparkSession
(local[2,2]: a task gets a second attempt) and a real `leaseq serve` process."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.datasource import ReadMaxRows

from leaseq.client import QueueClient
from leaseq.spark_ext import register
from leaseq.spark_ext.datasource import _lower
from leaseq.spark_ext.streaming import StreamReader

pytestmark = pytest.mark.timeout(
    600
)  # a loaded machine (helpers running Spark beside CI) took over 120 s for two batches


def wait_for(condition, timeout: float = 240.0, what: str = "condition") -> None:
    """Poll a condition that lives in another process (the server, Spark's stream thread)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def send_bodies(client: QueueClient, queue: str, start: int, stop: int) -> None:
    client.send_arrow(queue, pa.table({"body": [f"m-{i}".encode() for i in range(start, stop)]}))


def stream_from(spark, server, queue: str, **options):
    reader = (
        spark.readStream.format("leaseq")
        .option("target", server.target)
        .option("queue", queue)
        .option("numPartitions", 2)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def to_parquet(df, sink: Path, checkpoint: Path, **trigger):
    writer = (
        df.select("message_id", "body", "delivery_count")
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
    )
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()


def assert_exactly_once(spark, client, queue: str, sink: Path, n: int) -> None:
    """Every message in the sink once (read through the sink's commit log: files of failed or
    cancelled attempts do not count), each delivered once (a replay makes no new delivery),
    and nothing left in the queue."""
    rows = spark.read.parquet(str(sink)).collect()
    bodies = sorted(r.body for r in rows)
    assert len(bodies) == n, f"{len(bodies)} rows in the sink for {n} messages"
    assert bodies == sorted(f"m-{i}".encode() for i in range(n))
    assert len({r.message_id for r in rows}) == n
    assert {r.delivery_count for r in rows} == {1}
    stats = client.stats(queue)
    assert (stats.total, stats.visible, stats.leased) == (0, 0, 0)


class Producer(threading.Thread):
    """Sends m-0 .. m-(n-1) in chunks, paced, and holds the last `held` messages back until
    `release` is set: the test can stop its query while the producer still has more to send."""

    def __init__(self, target: str, queue: str, n: int, held: int, chunk: int = 200) -> None:
        super().__init__(name="producer", daemon=True)
        self.target, self.queue, self.n, self.held, self.chunk = target, queue, n, held, chunk
        self.sent = 0
        self.release = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with QueueClient(self.target) as client:
                while self.sent < self.n:
                    if self.sent >= self.n - self.held:
                        self.release.wait()
                    else:
                        # Pacing (a rate, not a synchronisation): keep sending across batches.
                        self.release.wait(0.05)
                    stop = min(self.sent + self.chunk, self.n)
                    send_bodies(client, self.queue, self.sent, stop)
                    self.sent = stop
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error


def test_stop_and_restart_from_checkpoint_mid_stream_exactly_once(
    spark, server, client, queue, tmp_path
):
    register(spark)
    n = 12_000
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    producer = Producer(server.target, queue, n, held=4_000)
    producer.start()
    query = to_parquet(
        stream_from(spark, server, queue, maxMessagesPerTrigger=1000), sink, checkpoint
    )
    try:
        wait_for(lambda: client.stats(queue).deleted_total >= 2_000, what="two batches")
    finally:
        query.stop()
    assert producer.sent < n  # stopped mid-stream: more is coming

    query = to_parquet(
        stream_from(spark, server, queue, maxMessagesPerTrigger=1000), sink, checkpoint
    )
    try:
        producer.release.set()
        producer.join(timeout=120)
        assert producer.error is None and producer.sent == n
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    assert_exactly_once(spark, client, queue, sink, n)


def _kill_first_attempt(marker: str):
    def fn(batches):
        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId"))
        for record_batch in batches:
            yield record_batch
            if batch == 1 and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
                Path(marker).touch()
                os._exit(1)  # the Python worker dies in the middle of the micro-batch

    return fn


def test_a_task_killed_mid_batch_is_retried_with_the_same_messages(
    spark, server, client, queue, tmp_path
):
    register(spark)
    n = 5_000
    send_bodies(client, queue, 0, n)
    marker = tmp_path / "killed"
    stream = stream_from(spark, server, queue, maxMessagesPerTrigger=1000)
    stream = stream.mapInArrow(_kill_first_attempt(str(marker)), stream.schema)
    query = to_parquet(stream, tmp_path / "sink", tmp_path / "checkpoint")
    try:
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    assert marker.exists()  # the kill happened, and the retry re-read the same messages
    assert_exactly_once(spark, client, queue, tmp_path / "sink", n)


def _fail_batch_while_armed(armed: str):
    def fn(batches):
        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId"))
        for record_batch in batches:
            yield record_batch
            if batch == 2 and ctx.partitionId() == 1 and os.path.exists(armed):
                raise RuntimeError("batch 2 fails while armed")

    return fn


def test_a_failed_batch_is_replayed_exactly_after_a_restart(spark, server, client, queue, tmp_path):
    register(spark)
    n = 5_000
    send_bodies(client, queue, 0, n)
    armed = tmp_path / "armed"
    armed.touch()
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def start():
        stream = stream_from(spark, server, queue, maxMessagesPerTrigger=1000)
        stream = stream.mapInArrow(_fail_batch_while_armed(str(armed)), stream.schema)
        return to_parquet(stream, sink, checkpoint)

    query = start()
    try:
        with pytest.raises(StreamingQueryException, match="batch 2 fails while armed"):
            query.awaitTermination(timeout=120)  # both attempts of the task fail: it dies
    finally:
        query.stop()
    assert client.stats(queue).leased > 0  # batch 2's messages stay leased for its re-run
    armed.unlink()

    query = start()
    try:
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    assert_exactly_once(spark, client, queue, sink, n)


def test_trigger_available_now_reads_in_limited_batches_and_ends(
    spark, server, client, queue, tmp_path
):
    register(spark)
    n = 2_500
    send_bodies(client, queue, 0, n)
    query = to_parquet(
        stream_from(spark, server, queue, maxMessagesPerTrigger=1000),
        tmp_path / "sink",
        tmp_path / "checkpoint",
        availableNow=True,
    )
    try:
        assert query.awaitTermination(timeout=120)
        assert query.exception() is None
        rows = [p["numInputRows"] for p in query.recentProgress]
        backlog = [json.loads(p["sources"][0]["latestOffset"]) for p in query.recentProgress]
    finally:
        query.stop()
    # Admission control: 1,000 per trigger; then one flush batch commits the last one.
    assert [r for r in rows if r] == [1000, 1000, 500]
    # Progress: the source's "latestOffset" in each progress is the backlog and the run's work.
    assert set(backlog[0]) == {
        "backlog",
        "uncommittedBatches",
        "committedMessages",
        "leasesExtended",
        "commitSeconds",
        "commitWaitSeconds",
        "planSeconds",
    }
    assert backlog[0]["backlog"] == n - 1000 and backlog[-1]["backlog"] == 0
    committed = [b["committedMessages"] for b in backlog]
    assert committed == sorted(committed) and committed[0] == 0 and committed[-1] >= 2000
    assert_exactly_once(spark, client, queue, tmp_path / "sink", n)


def _fail_after_writing_once(marker: str):
    def fn(batches):
        ctx = TaskContext.get()
        yield from batches
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            Path(marker).touch()
            raise RuntimeError("fails after the sink sent the partition")

    return fn


def test_stream_sink_is_idempotent_per_batch_and_partition(spark, server, client, queue, tmp_path):
    register(spark)
    n = 3_000
    send_bodies(client, queue, 0, n)
    target = f"{queue}-out"
    client.create_queue(target)
    stream = stream_from(spark, server, queue, maxMessagesPerTrigger=1000)
    marker = tmp_path / "failed"
    fail_once = _fail_after_writing_once(str(marker))
    stream = stream.select("body").mapInArrow(fail_once, "body binary")
    query = (
        stream.writeStream.format("leaseq")
        .option("target", server.target)
        .option("queue", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    # Every task of partition 0 failed once after sending: its retry re-sent the same dedup ids.
    assert marker.exists()
    out = client.stats(target)
    assert out.total == n
    got = client.receive_arrow(target, n, visibility_timeout=60, wait_time=0)
    assert sorted(got.column("body").to_pylist()) == sorted(f"m-{i}".encode() for i in range(n))
    assert client.stats(queue).total == 0


def test_driver_extends_uncommitted_batches_with_probes_that_deliver_nothing(server, client, queue):
    send_bodies(client, queue, 0, 20)
    lease = 2.0
    reader = StreamReader(
        _lower(
            {
                "target": server.target,
                "queue": queue,
                "numPartitions": "2",
                "visibilityTimeout": str(lease),
            }
        )
    )
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(100))
        assert (end["batch"], end["messages"], end["partitions"]) == (1, 20, 2)
        first, second = reader.partitions(start, end)
        read_first = pa.Table.from_batches(list(reader.read(first)))
        assert read_first.num_rows == 10
        keeper = reader._driver().keeper

        def rounds_past(count: int) -> int:
            with keeper.changed:
                keeper.changed.wait_for(lambda: keeper.rounds >= count, timeout=30)
                return keeper.rounds

        # A probe of the partition not read yet delivers nothing under its attempt id.
        rounds_past(keeper.rounds + 1)
        stats = client.stats(queue)
        assert (stats.visible, stats.leased) == (10, 10)

        read_second = pa.Table.from_batches(list(reader.read(second)))
        # A re-read of a partition replays it: same messages, same receipts.
        again = pa.Table.from_batches(list(reader.read(first)))
        assert again.column("receipt").to_pylist() == read_first.column("receipt").to_pylist()

        # The batch completed; nothing else is visible: Spark would now run the flush batch.
        flush = reader.latestOffset(end, ReadMaxRows(100))
        assert (flush["batch"], flush["messages"], flush["partitions"]) == (2, 0, 0)
        began = time.monotonic()
        while time.monotonic() - began < 2.5 * lease:
            rounds_past(keeper.rounds + 1)
        stats = client.stats(queue)
        assert (stats.visible, stats.leased) == (0, 20)  # outlived its lease 2.5 times over
        peeked = client.peek(queue, 100, include_leased=True)
        assert {m.delivery_count for m in peeked} == {1}
        ids = set(read_first.column("message_id").to_pylist())
        ids |= set(read_second.column("message_id").to_pylist())
        assert ids == {m.message_id for m in peeked}

        reader.commit(end)  # as Spark does when it constructs the flush batch
        assert client.stats(queue).total == 0
        assert reader.latestOffset(flush, ReadMaxRows(100)) == flush  # nothing more to do
    finally:
        reader.stop()


def test_a_batch_plan_splits_partitions_into_requests_of_10000():
    from leaseq.spark_ext.streaming import MAX_PER_PARTITION, BatchPlan

    plan = BatchPlan.plan("q", 3, 50_000, 2)
    assert (plan.partitions, plan.sizes()) == (2, [25_000, 25_000])
    assert plan.receives(1) == [
        ("leaseq-stream:q:3:1", 10_000),
        ("leaseq-stream:q:3:1.1", 10_000),
        ("leaseq-stream:q:3:1.2", 5_000),
    ]
    assert len(plan.attempt_ids()) == 6 and len(set(plan.attempt_ids())) == 6
    # Request 0 keeps the id a partition had when it was one request (offsets logged then).
    assert plan.attempt_id(1) == "leaseq-stream:q:3:1"
    big = BatchPlan.plan("q", 1, 3 * MAX_PER_PARTITION + 1, 1)
    assert big.partitions == 4 and max(big.sizes()) <= MAX_PER_PARTITION
    assert BatchPlan.plan("q", 1, 3, 5).sizes() == [1, 1, 1]  # never an empty partition


def test_a_partition_of_several_requests_replays_exactly_and_commits(server, client, queue):
    send_bodies(client, queue, 0, 23_000)
    reader = StreamReader(
        _lower(
            {
                "target": server.target,
                "queue": queue,
                "numPartitions": "1",
                "visibilityTimeout": "60",
            }
        )
    )
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(30_000))
        assert (end["messages"], end["partitions"]) == (23_000, 1)
        (partition,) = reader.partitions(start, end)
        assert [n for _, n in partition.receives] == [10_000, 10_000, 3_000]
        first = pa.Table.from_batches(list(reader.read(partition)))
        assert first.num_rows == 23_000
        assert len(set(first.column("message_id").to_pylist())) == 23_000
        # A retried task: every request replays, same rows, same order, same receipts.
        again = pa.Table.from_batches(list(reader.read(partition)))
        assert again.column("receipt").to_pylist() == first.column("receipt").to_pylist()
        stats = client.stats(queue)
        assert (stats.visible, stats.leased) == (0, 23_000)
        assert {m.delivery_count for m in client.peek(queue, 100, include_leased=True)} == {1}
        reader.commit(end)
        assert client.stats(queue).total == 0
    finally:
        reader.stop()


def test_a_partition_stops_at_its_first_short_request(server, client, queue):
    send_bodies(client, queue, 0, 12_000)
    reader = StreamReader(
        _lower(
            {
                "target": server.target,
                "queue": queue,
                "numPartitions": "1",
                "visibilityTimeout": "60",
            }
        )
    )
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(30_000))
        (partition,) = reader.partitions(start, end)
        taken = client.receive_arrow(queue, 5_000, visibility_timeout=60, wait_time=0)
        # 7,000 left: request 0 takes all of them and comes back short; request 1 is not made.
        first = pa.Table.from_batches(list(reader.read(partition)))
        assert first.num_rows == 7_000
        client.ack_arrow(queue, taken)
        send_bodies(client, queue, 12_000, 13_000)
        again = pa.Table.from_batches(list(reader.read(partition)))  # the replay stops there too
        assert again.column("receipt").to_pylist() == first.column("receipt").to_pylist()
        reader.commit(end)
        stats = client.stats(queue)
        assert (stats.total, stats.visible) == (1_000, 1_000)
    finally:
        reader.stop()


def test_a_batch_never_leases_past_the_queues_max_in_flight(server, client):
    # Without the cap, "no limit" (or a limit over max_in_flight) planned a batch whose tasks
    # failed with OverLimit; the batch before is still leased while the next one reads.
    queue = "spark-stream-max-in-flight"
    client.create_queue(queue, visibility_timeout=60, max_in_flight=300)
    send_bodies(client, queue, 0, 1_000)
    reader = StreamReader(
        _lower(
            {
                "target": server.target,
                "queue": queue,
                "numPartitions": "1",
                "maxMessagesPerTrigger": "0",
            }
        )
    )
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert first["messages"] == 150  # half of max_in_flight: two batches in a row fit
        rows = sum(b.num_rows for p in reader.partitions(start, first) for b in reader.read(p))
        client.receive(queue, 100, visibility_timeout=60, wait_time=0)  # another consumer's
        second = reader.latestOffset(first, reader.getDefaultReadLimit())
        assert second["messages"] == 300 - 150 - 100  # what max_in_flight leaves
        rows += sum(b.num_rows for p in reader.partitions(first, second) for b in reader.read(p))
        assert rows == 200 and client.stats(queue).leased == 300
        reader.commit(first)
        reader.commit(second)
        assert client.stats(queue).total == 800
    finally:
        reader.stop()
