"""The stream source's faster paths keep exactly once: a commit's delete overlapped with the
next batch (and named by the offsets planned meanwhile, so that a restarted driver deletes it),
and a schema that selects the columns the partitions yield."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql.streaming.datasource import ReadMaxRows
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from leaseq.spark_ext import register
from leaseq.spark_ext.datasource import _lower
from leaseq.spark_ext.streaming import StreamReader

pytestmark = pytest.mark.timeout(600)


def send_bodies(client, queue: str, start: int, stop: int) -> None:
    client.send_arrow(queue, pa.table({"body": [f"m-{i}".encode() for i in range(start, stop)]}))


def read_all(reader: StreamReader, start: dict, end: dict) -> pa.Table:
    batches = [b for p in reader.partitions(start, end) for b in reader.read(p)]
    return pa.Table.from_batches(batches)


def test_a_delete_in_flight_is_named_by_the_next_offset_and_a_restart_deletes_it(
    server, client, queue
):
    send_bodies(client, queue, 0, 30)
    options = _lower({"target": server.target, "queue": queue, "numPartitions": "1"})
    first = StreamReader(options)
    second = StreamReader(options)  # the driver after a crash: the same logged offsets
    blocked = threading.Event()
    try:
        s0 = first.initialOffset()
        o1 = first.latestOffset(s0, ReadMaxRows(10))
        assert read_all(first, s0, o1).num_rows == 10
        o2 = first.latestOffset(o1, ReadMaxRows(10))  # Spark logs batch 2, then commits 1
        # Hold the driver's delete thread: batch 1's delete waits behind this.
        first._driver().deleter.submit(blocked.wait)
        first.commit(o1)  # returns at once: the delete runs while batch 2 reads
        assert client.stats(queue).leased == 10
        assert read_all(first, o1, o2).num_rows == 10
        o3 = first.latestOffset(o2, ReadMaxRows(10))
        assert o3["unconfirmed"] == [[1, 10, 1]]  # batch 1's delete was still in flight

        # The driver dies here, batch 3 logged and not run. The restarted one re-runs batch 3
        # from the log and, from the offset alone, deletes batch 1 with batches 2 and 3.
        got = read_all(second, o2, o3)
        assert got.num_rows == 10
        flush = second.latestOffset(o3, ReadMaxRows(10))
        assert flush["messages"] == 0
        second.commit(o3)  # the next batch is a flush batch: deleted here, before returning
        assert client.stats(queue).total == 0
        assert second.reportLatestOffset()["committedMessages"] == 30
    finally:
        blocked.set()
        first.stop()
        second.stop()


def test_a_failed_overlapped_delete_is_deleted_again_by_the_next_commit(server, client, queue):
    send_bodies(client, queue, 0, 20)
    reader = StreamReader(_lower({"target": server.target, "queue": queue, "numPartitions": "1"}))
    try:
        s0 = reader.initialOffset()
        o1 = reader.latestOffset(s0, ReadMaxRows(10))
        read_all(reader, s0, o1)
        o2 = reader.latestOffset(o1, ReadMaxRows(10))
        driver = reader._driver()
        real_delete = driver.client.delete
        calls = []

        def unavailable_once(*args, **kwargs):
            calls.append(args)
            if len(calls) == 1:
                raise ConnectionError("the server went away for a moment")
            return real_delete(*args, **kwargs)

        driver.client.delete = unavailable_once
        reader.commit(o1)  # in the background: it fails there
        read_all(reader, o1, o2)
        flush = reader.latestOffset(o2, ReadMaxRows(10))
        assert flush["messages"] == 0 and flush["unconfirmed"] == [[1, 10, 1]]
        reader.commit(o2)  # deletes batch 1 again with batch 2
        assert client.stats(queue).total == 0
        assert len(calls) == 2
    finally:
        reader.stop()


def test_a_schema_selects_the_columns_a_stream_yields(spark, server, client, queue, tmp_path):
    register(spark)
    n = 1_500
    send_bodies(client, queue, 0, n)
    stream = (
        spark.readStream.format("leaseq")
        .schema("body binary, message_id string")
        .option("target", server.target)
        .option("queue", queue)
        .option("maxMessagesPerTrigger", 1000)
        .load()
    )
    assert stream.columns == ["body", "message_id"]
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(tmp_path / "sink"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(timeout=300)
        assert query.exception() is None
    finally:
        query.stop()
    rows = spark.read.parquet(str(tmp_path / "sink")).collect()
    assert sorted(r.body for r in rows) == sorted(f"m-{i}".encode() for i in range(n))
    assert len({r.message_id for r in rows}) == n
    assert client.stats(queue).total == 0


@pytest.mark.parametrize(
    "schema",
    [
        StructType([StructField("body", StringType())]),  # body is binary
        StructType([StructField("message_id", StringType()), StructField("size", BinaryType())]),
    ],
)
def test_a_schema_naming_other_columns_or_types_is_refused_with_the_message_columns(
    server, queue, schema
):
    with pytest.raises(ValueError, match=r"message columns only.*body binary.*not: "):
        StreamReader(_lower({"target": server.target, "queue": queue}), schema)


def test_a_wrong_schema_fails_the_query_start_with_that_message(spark, server, queue, tmp_path):
    register(spark)
    stream = (
        spark.readStream.format("leaseq")
        .schema("body string")
        .option("target", server.target)
        .option("queue", queue)
        .load()
    )
    with pytest.raises(PySparkException, match="message columns only"):
        query = (
            stream.writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        try:
            query.awaitTermination(timeout=120)
            if query.exception() is not None:
                raise query.exception()
        finally:
            query.stop()
