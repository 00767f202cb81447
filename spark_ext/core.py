"""write_queue, read_queue and ack_dataframe (see the package docstring; consume_process_ack is
in ``consume``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..client.arrow import DEFAULT_BATCH_BYTES, MAX_ROWS, MESSAGE_SCHEMA
from ._executor import (
    SPARK_MESSAGE_DDL,
    ClientSettings,
    client_for,
    spark_arrow_schema,
    to_spark_batch,
)
from ._pipeline import InFlight
from ._preflight import check_queue

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "WriteResult",
    "ack_dataframe",
    "read_queue",
    "write_queue",
]

_SPARK_MESSAGE_SCHEMA = spark_arrow_schema(MESSAGE_SCHEMA)
_DONE = frozenset({"OK", "ALREADY_DELETED"})  # ack statuses that mean "deleted"


def _partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


# --- write -----------------------------------------------------------------------------------

_WRITE_DDL = "partition int, rows long, enqueued long, duplicates long"


@dataclass(frozen=True)
class WriteResult:
    """What ``write_queue`` did: ``rows`` sent, of which ``enqueued`` were new messages and
    ``duplicates`` were recognised by their dedup id (re-sends by a retried task, or repeats
    of a dedup column's value within the queue's dedup window)."""

    rows: int
    enqueued: int
    duplicates: int
    write_id: str


def _attributes_struct(batch: pa.RecordBatch, columns: list[str]) -> pa.StructArray:
    arrays = [pc.cast(batch.column(name), pa.string()) for name in columns]
    return pa.StructArray.from_arrays(arrays, names=columns)


SENDS_IN_FLIGHT = 2  # send_arrow calls of one write_queue task in flight at once


def send_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    settings: ClientSettings,
    queue: str,
    partition: int,
    write_id: str,
    body_col: str,
    attributes_cols: list[str] | None,
    channel_col: str | None,
    dedup_col: str | None,
    max_batch_bytes: int,
    sends_in_flight: int = SENDS_IN_FLIGHT,
) -> tuple[int, int, int]:
    """Send one partition's batches through ``send_arrow``; (rows, enqueued, duplicates).

    Up to ``sends_in_flight`` sends are in flight (threads: a blocking gRPC call releases the
    GIL) while Spark hands over the next batch and its dedup ids are built, so the server is
    not left idle between one send's answer and the next request.

    Raises when any row was not enqueued, so that Spark retries the task: with dedup ids the
    retry re-sends the same ids and enqueues only what is missing."""
    client = client_for(settings)
    offset = 0  # rows of this partition seen so far: the next row's position
    rows = enqueued = duplicates = 0

    def count(result: pa.Table) -> None:
        nonlocal rows, enqueued, duplicates
        failed = result.filter(pc.is_valid(result.column("error_code")))
        if failed.num_rows:
            first = failed.slice(0, 1).to_pylist()[0]
            raise RuntimeError(
                f"write_queue: {failed.num_rows} of {result.num_rows} rows of partition "
                f"{partition} were not enqueued (first: {first['error_code']}: "
                f"{first['error_message']}); the task fails so Spark retries it"
            )
        dup = pc.sum(pc.cast(result.column("duplicate"), pa.int64())).as_py() or 0
        rows += result.num_rows
        duplicates += dup
        enqueued += result.num_rows - dup

    sends: InFlight[pa.Table] = InFlight(sends_in_flight, count, "leaseq-send")
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            columns: dict[str, pa.Array] = {"body": batch.column(body_col)}
            if attributes_cols:
                columns["attributes"] = _attributes_struct(batch, attributes_cols)
            if channel_col:
                columns["channel"] = batch.column(channel_col)
            if dedup_col:
                columns["dedup_id"] = pc.cast(batch.column(dedup_col), pa.string())
            else:
                # The row's position in its partition, counted over every batch of the
                # partition: identical on every attempt of the task as long as the
                # partition's rows are.
                positions = pa.array(range(offset, offset + batch.num_rows), pa.int64())
                columns["dedup_id"] = pc.binary_join_element_wise(
                    f"{write_id}:{partition}", pc.cast(positions, pa.string()), ":"
                )
            offset += batch.num_rows
            sends.submit(
                client.send_arrow, queue, pa.table(columns), max_batch_bytes=max_batch_bytes
            )
    except BaseException:
        sends.cancel()  # a failing task: sends not started yet are not made
        raise
    sends.drain()
    return rows, enqueued, duplicates


def write_queue(
    df: DataFrame,
    queue: str,
    *,
    target: str,
    body_col: str = "body",
    attributes_cols: list[str] | None = None,
    channel_col: str | None = None,
    dedup_col: str | None = None,
    write_id: str | None = None,
    token: str | None = None,
    max_batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> WriteResult:
    """Send every row of ``df`` to ``queue``; each partition sends through ``send_arrow``
    (requests cut at 10,000 rows or ``max_batch_bytes``). Runs a Spark job and returns totals.

    ``body_col`` is binary or string; ``attributes_cols`` become the message's attributes
    (column name -> value as a string; nulls left out); ``channel_col`` a string column. The
    target and queue are checked from the driver first (``GetQueue``: the client's
    ``Unavailable``, ``QueueNotFound``, ... before any task runs).

    Duplicates under task retry: with ``dedup_col`` its values are the dedup ids. Without it each
    row's dedup id is ``"<write_id>:<partition>:<row position in the partition>"``, where
    ``write_id`` is one random id per call (pass your own to make a re-run of the whole job
    idempotent too). A retried or speculative attempt of a task re-sends the same ids, and the
    server enqueues none of them twice, on two conditions: (1) the retry sends within the
    queue's ``dedup_window`` (default 5 minutes, at most 1 hour) of the first send: after that
    a re-sent row is a new message; (2) the partition holds the same rows in the same order on
    every attempt, which Spark guarantees for deterministic plans (a source read, narrow
    transformations, a sort); after a shuffle whose order is not fixed (``repartition(n)``
    without a sort, a non-deterministic UDF) positions may name other rows and a retry may both
    duplicate and lose rows: give ``dedup_col`` (a business key) then. The attempt number is
    never part of the id, on purpose.
    """
    settings = ClientSettings(target, token)
    # Before the job: an unusable target or queue is one clear error, not every task failing
    # through Spark's retries.
    check_queue(settings, queue, "write_queue")
    write_id = write_id or uuid.uuid4().hex
    attributes = list(attributes_cols) if attributes_cols else None

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition = _partition_id()
        rows, enqueued, dups = send_partition(
            batches,
            settings=settings,
            queue=queue,
            partition=partition,
            write_id=write_id,
            body_col=body_col,
            attributes_cols=attributes,
            channel_col=channel_col,
            dedup_col=dedup_col,
            max_batch_bytes=max_batch_bytes,
        )
        yield pa.RecordBatch.from_pydict(
            {
                "partition": [partition],
                "rows": [rows],
                "enqueued": [enqueued],
                "duplicates": [dups],
            },
            schema=pa.schema(
                [
                    ("partition", pa.int32()),
                    ("rows", pa.int64()),
                    ("enqueued", pa.int64()),
                    ("duplicates", pa.int64()),
                ]
            ),
        )

    used = [
        body_col,
        *(attributes or []),
        *([channel_col] if channel_col else []),
        *([dedup_col] if dedup_col else []),
    ]
    out = df.select(*dict.fromkeys(used)).mapInArrow(task, _WRITE_DDL).collect()
    return WriteResult(
        rows=sum(r["rows"] for r in out),
        enqueued=sum(r["enqueued"] for r in out),
        duplicates=sum(r["duplicates"] for r in out),
        write_id=write_id,
    )


# --- read ------------------------------------------------------------------------------------


def receive_partition(
    settings: ClientSettings,
    queue: str,
    *,
    max_messages: int,
    visibility_timeout: float | None,
    wait_time: float | None,
    attempt_prefix: str | None,
) -> Iterator[pa.RecordBatch]:
    """Lease up to ``max_messages`` in requests of at most 10,000, each with its own receive
    attempt id ``<attempt_prefix>:<k>`` (so a re-run of the same partition while the leases
    live returns the same deliveries); the first request waits ``wait_time``."""
    client = client_for(settings)
    remaining, k = max_messages, 0
    wait = wait_time
    while remaining > 0:
        asked = min(remaining, MAX_ROWS)
        table = client.receive_arrow(
            queue,
            asked,
            visibility_timeout=visibility_timeout,
            wait_time=wait,
            attempt_id=f"{attempt_prefix}:{k}" if attempt_prefix else None,
        )
        yield from to_spark_batch(table, _SPARK_MESSAGE_SCHEMA)
        remaining -= table.num_rows
        k += 1
        if table.num_rows < asked:
            break
        wait = 0


def read_queue(
    spark: SparkSession,
    queue: str,
    *,
    target: str,
    num_partitions: int,
    max_messages_per_partition: int,
    visibility_timeout: float | None = None,
    wait_time: float | None = 0,
    token: str | None = None,
) -> DataFrame:
    """A DataFrame of leased messages (the columns of ``MESSAGE_SCHEMA``): ``num_partitions``
    partitions, each leasing up to ``max_messages_per_partition`` on an executor (``mapInArrow``).

    Careful: this is a plan, not data. Every action (``count``, ``write``, ``collect``) runs it
    again and leases more messages: the leases of an earlier action's messages keep running and
    those messages come back after ``visibility_timeout``. Each partition's receives carry receive
    attempt ids unique to this call, so a retried task, or a second action while the leases
    live, gets the same deliveries (same receipts) rather than new ones; after the leases ended
    it is a new receive. The safe forms: ``consume_process_ack`` (lease, process, ack inside one
    task), or ``df.localCheckpoint()`` / ``cache()`` + one action, then ``ack_dataframe`` on the
    receipts you processed, all within the visibility timeout.
    """
    if num_partitions < 1 or max_messages_per_partition < 1:
        raise ValueError("num_partitions and max_messages_per_partition must be positive")
    settings = ClientSettings(target, token)
    read_id = uuid.uuid4().hex

    def task(_: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _batch in _:
            pass  # one row per partition: its content does not matter
        partition = _partition_id()
        yield from receive_partition(
            settings,
            queue,
            max_messages=max_messages_per_partition,
            visibility_timeout=visibility_timeout,
            wait_time=wait_time,
            attempt_prefix=f"{read_id}:{partition}",
        )

    seeds = spark.range(0, num_partitions, numPartitions=num_partitions)
    return seeds.mapInArrow(task, SPARK_MESSAGE_DDL)


# --- ack a DataFrame -------------------------------------------------------------------------


def ack_dataframe(
    df: DataFrame,
    *,
    target: str,
    queue: str,
    receipt_col: str = "receipt",
    token: str | None = None,
) -> DataFrame:
    """A DataFrame (receipt, status, done) acking the receipts of ``df`` (``mapInPandas``; lazy:
    the deletes happen when an action runs it). ``status`` is a ``LeaseStatus`` name; ``done``
    is True for ``OK`` and ``ALREADY_DELETED``, so a retried task, or running it twice, reports
    the same receipts as done. Others (``RECEIPT_SUPERSEDED``: delivered again since;
    ``INVALID_RECEIPT``) are not done."""
    settings = ClientSettings(target, token)

    def task(frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        client = client_for(settings)
        for frame in frames:
            receipts = [r for r in frame["receipt"].tolist() if r is not None]
            if not receipts:
                continue
            result = client.ack_arrow(queue, receipts).to_pandas()
            result["done"] = result["status"].isin(list(_DONE))
            yield pd.DataFrame(result)

    from pyspark.sql.functions import col

    return df.select(col(receipt_col).alias("receipt")).mapInPandas(
        task, "receipt string, status string, done boolean"
    )
