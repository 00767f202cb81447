"""The Python Data Source ``"leaseq"``: batch read (lease messages) and Arrow batch write (send);
streaming read and write too (``spark.readStream`` / ``df.writeStream``, see ``streaming.py``).

Register it once per session, then::

    spark.dataSource.register(LeaseqDataSource)       # or: leaseq.spark_ext.register(spark)
    df = (spark.read.format("leaseq").option("target", "host:50051").option("queue", "jobs")
          .option("numPartitions", 2).option("maxMessagesPerPartition", 10000)
          .option("visibilityTimeout", 60).option("waitTime", 1).load())
    (df2.write.format("leaseq").option("target", "host:50051").option("queue", "jobs")
        .option("bodyCol", "body").mode("append").save())

Read options: ``target``, ``queue`` (required), ``numPartitions`` (1), ``maxMessagesPerPartition``
(10000), ``visibilityTimeout`` (the queue's default), ``waitTime`` (0), ``token``. The schema is
always the message schema (``SPARK_MESSAGE_DDL``); each partition yields ``pyarrow.RecordBatch``
es of exactly that schema. Reading leases, as ``read_queue`` does, with the same caveat: every
action reads again.

Write options: ``target``, ``queue`` (required), ``bodyCol`` (body), ``attributesCols`` (comma
separated), ``channelCol``, ``dedupCol``, ``writeId``, ``maxBatchBytes``, ``token``. Without a
dedup column the dedup ids come from the partition and row position, as in ``write_queue``
(same guarantee: a retried task re-sends the same ids within the queue's dedup window).

Streaming options (``leaseq.spark_ext.streaming``): source ``target``, ``queue``,
``numPartitions`` (the driver's cores), ``maxMessagesPerTrigger`` (50000; 0: no limit),
``visibilityTimeout`` (300), ``idlePollInterval`` (0.1), ``token``, and a schema of message
columns to yield only those (``.schema("message_id string, body binary")``); sink as the batch write, plus ``writeId`` (default:
the streaming query's id).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..client.arrow import DEFAULT_BATCH_BYTES
from ._executor import SPARK_MESSAGE_DDL, ClientSettings
from .core import receive_partition, send_partition

__all__ = ["LeaseqDataSource", "register"]


class _Options(dict[str, Any]):
    """Options by case-insensitive name (Spark's option names are case-insensitive)."""

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


def _lower(options: Any) -> _Options:
    return _Options((str(k).lower(), v) for k, v in dict(options).items())


def _required(options: dict[str, str], name: str) -> str:
    value = options.get(name)
    if not value:
        raise ValueError(f'the leaseq data source needs the option "{name}"')
    return value


def _float(options: dict[str, str], name: str) -> float | None:
    value = options.get(name)
    return None if value in (None, "") else float(value)


class LeaseqDataSource(DataSource):
    """``spark.read.format("leaseq")`` / ``df.write.format("leaseq")``."""

    @classmethod
    def name(cls) -> str:
        return "leaseq"

    def schema(self) -> str:
        return SPARK_MESSAGE_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(_lower(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise ValueError("the leaseq data source only appends (mode 'append')")
        return _Writer(_lower(self.options))

    def streamReader(self, schema: StructType) -> Any:
        from .streaming import StreamReader

        return StreamReader(_lower(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        if overwrite:
            raise ValueError("the leaseq stream sink only appends (output mode 'append')")
        from .streaming import StreamWriter

        return StreamWriter(_lower(self.options))


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.settings = ClientSettings(_required(options, "target"), options.get("token"))
        self.queue = _required(options, "queue")
        self.partitions_count = int(options.get("numPartitions", 1))
        self.max_messages = int(options.get("maxMessagesPerPartition", 10_000))
        self.visibility_timeout = _float(options, "visibilityTimeout")
        wait = _float(options, "waitTime")
        self.wait_time = 0.0 if wait is None else wait
        self.read_id = uuid.uuid4().hex  # made on the driver: one per query plan

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.partitions_count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from receive_partition(
            self.settings,
            self.queue,
            max_messages=self.max_messages,
            visibility_timeout=self.visibility_timeout,
            wait_time=self.wait_time,
            attempt_prefix=f"{self.read_id}:{partition.value}",
        )


@dataclass
class _Commit(WriterCommitMessage):
    partition: int
    rows: int
    enqueued: int
    duplicates: int


class _Writer(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.settings = ClientSettings(_required(options, "target"), options.get("token"))
        self.queue = _required(options, "queue")
        self.body_col = options.get("bodyCol", "body")
        cols = options.get("attributesCols", "")
        self.attributes_cols = [c.strip() for c in cols.split(",") if c.strip()] or None
        self.channel_col = options.get("channelCol") or None
        self.dedup_col = options.get("dedupCol") or None
        self.write_id = options.get("writeId") or uuid.uuid4().hex  # driver-side: one per write
        self.max_batch_bytes = int(options.get("maxBatchBytes", DEFAULT_BATCH_BYTES))
        self.commits: list[_Commit] = []

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Commit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        rows, enqueued, dups = send_partition(
            iterator,
            settings=self.settings,
            queue=self.queue,
            partition=partition,
            write_id=self.write_id,
            body_col=self.body_col,
            attributes_cols=self.attributes_cols,
            channel_col=self.channel_col,
            dedup_col=self.dedup_col,
            max_batch_bytes=self.max_batch_bytes,
        )
        return _Commit(partition, rows, enqueued, dups)

    def commit(self, messages: list[Any]) -> None:
        self.commits = [m for m in messages if m is not None]

    def abort(self, messages: list[Any]) -> None:
        # Sent messages cannot be taken back; a re-run with the same writeId re-sends the same
        # dedup ids within the dedup window.
        pass


def register(spark: Any) -> None:
    """Register the ``"leaseq"`` format with this session."""
    spark.dataSource.register(LeaseqDataSource)
