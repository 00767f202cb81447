"""The Spark helpers from a Spark Connect client: the same tests' SparkSession serves Spark
Connect too (``SparkConnectService`` on its context: no second JVM), and a client session
(``SparkSession.builder.remote("sc://...")``) drives it over gRPC, as a user of a Connect-only
cluster would. Functions reach the executors pickled by the client, not through Py4J."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from leaseq.spark_ext import consume_process_ack, read_queue, register, write_queue

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="session")
def connect_client(spark):
    """A Spark Connect client session of the tests' local Spark (started on its port)."""
    jvm = spark._jvm
    jvm.org.apache.spark.sql.connect.service.SparkConnectService.start(spark._jsc.sc())
    port = spark.conf.get("spark.connect.grpc.binding.port")
    from pyspark.sql import SparkSession

    try:
        session = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").create()
    finally:
        # create() marks the whole process as Connect (SPARK_CONNECT_MODE_ENABLED), which
        # would switch the other tests' pyspark.sql.functions to Connect: only while one of
        # these tests runs (the `remote` fixture).
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    yield session
    session.stop()  # the server goes with the tests' SparkSession
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


@pytest.fixture
def remote(connect_client, monkeypatch):
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    return connect_client


def bodies(remote, n: int):
    return remote.range(0, n, numPartitions=2).selectExpr("binary(concat('m-', id)) AS body")


def expected(n: int) -> list[bytes]:
    return sorted(f"m-{i}".encode() for i in range(n))


def test_write_queue_and_consume_process_ack(remote, server, client, queue, tmp_path):
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    assert isinstance(remote, ConnectSession)
    n = 3_000
    written = write_queue(bodies(remote, n), queue, target=server.target)
    assert (written.rows, written.enqueued) == (n, n)
    sink = str(tmp_path)

    def fn(table: pa.Table) -> None:
        pq.write_table(
            table.select(["message_id", "body"]),
            f"{sink}/{table.column('message_id')[0].as_py()}.parquet",
        )

    result = consume_process_ack(
        remote,
        queue,
        fn,
        target=server.target,
        num_partitions=2,
        batch_size=1_000,
        wait_time=0,
        arrow=True,
    )
    assert (result.received, result.acked, result.failed) == (n, n, 0)
    got = pq.read_table(sink).column("body").to_pylist()
    assert sorted(got) == expected(n)
    assert client.stats(queue).total == 0


def test_the_data_source_reads_and_writes(remote, server, client, queue):
    register(remote)
    n = 500
    (
        bodies(remote, n)
        .write.format("leaseq")
        .option("target", server.target)
        .option("queue", queue)
        .mode("append")
        .save()
    )
    assert client.stats(queue).visible == n
    rows = (
        remote.read.format("leaseq")
        .option("target", server.target)
        .option("queue", queue)
        .option("numPartitions", 2)
        .option("maxMessagesPerPartition", n)
        .load()
        .select("body")
        .collect()
    )
    assert sorted(r.body for r in rows) == expected(n)
    assert client.stats(queue).leased == n
    leased = read_queue(
        remote, queue, target=server.target, num_partitions=1, max_messages_per_partition=n
    )
    assert leased.count() == 0  # every message is leased by the read above


def test_the_stream_source_and_sink(remote, server, client, queue, tmp_path):
    register(remote)
    n = 2_500
    client.send_arrow(queue, pa.table({"body": [f"m-{i}".encode() for i in range(n)]}))
    source = (
        remote.readStream.format("leaseq")
        .schema("message_id string, body binary")
        .option("target", server.target)
        .option("queue", queue)
        .option("numPartitions", 2)
        .option("maxMessagesPerTrigger", 1_000)
        .load()
    )
    query = (
        source.writeStream.format("parquet")
        .option("path", str(tmp_path / "lake"))
        .option("checkpointLocation", str(tmp_path / "chk-source"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    lake = remote.read.parquet(str(tmp_path / "lake"))
    assert sorted(r.body for r in lake.select("body").collect()) == expected(n)
    assert client.stats(queue).total == 0

    out = f"{queue}-out"
    client.create_queue(out)
    query = (
        remote.readStream.schema("message_id string, body binary")
        .parquet(str(tmp_path / "lake"))
        .writeStream.format("leaseq")
        .option("target", server.target)
        .option("queue", out)
        .option("checkpointLocation", str(tmp_path / "chk-sink"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    assert client.stats(out).visible == n
    got = client.receive_arrow(out, n, visibility_timeout=60, wait_time=0)
    assert sorted(got.column("body").to_pylist()) == expected(n)
