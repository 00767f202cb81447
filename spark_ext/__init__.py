"""Spark helpers for leaseq (PySpark 4.2+; ``pip install 'leaseq[spark]'``).

- ``write_queue(df, queue, target=...)``: send a DataFrame, each partition through the Arrow
  path in byte-bounded RPCs, with dedup ids that make task retries harmless.
- ``read_queue(spark, queue, target=..., ...)``: a DataFrame of leased messages (``mapInArrow``).
  A plain DataFrame runs again on every action: see its docstring for the safe forms.
- ``consume_process_ack(spark, queue, fn, target=..., num_partitions=...)``: the at-least-once
  bulk consumer: lease a batch, call ``fn``, ack what it succeeded with, release the rest with
  a reason, extending leases while ``fn`` runs; all inside one task. Misuse raises in the
  driver (bad arguments or target before the job; ``FnResultError`` for a return value of
  ``fn`` that is not one of the accepted shapes, the messages put back); failures warn
  (``ConsumeFailuresWarning``) or raise (``raise_on_failure=True``: ``ConsumeFailedError``).
- ``ack_dataframe(df, target=..., queue=...)``: ack a DataFrame's receipts (``mapInPandas``),
  per-receipt statuses, idempotent under retry.
- ``LeaseqDataSource`` / ``register(spark)``: the ``"leaseq"`` Python Data Source (batch read,
  Arrow batch write; Structured Streaming read and write: ``spark.readStream.format("leaseq")``,
  micro-batches that replay exactly by receive attempt id and are deleted on commit, and
  ``df.writeStream.format("leaseq")``, idempotent per batch and partition; see ``streaming``).

Executors and gRPC: functions shipped to executors carry only settings (target, token); each
Python worker process makes its own channel on first use, cached by ``(target, pid)``, never
pickled. Start-up order on the driver: create the SparkSession *before* any driver-side
``QueueClient`` (gRPC's fork handlers and a JVM/daemon started after a live channel do not mix),
or set ``GRPC_ENABLE_FORK_SUPPORT=false`` in the environment first. Executors need the same
Python as the driver: set ``PYSPARK_PYTHON`` (the tests set it to ``sys.executable``).
"""

from __future__ import annotations

from typing import Any

from ._fn_result import FnResultError
from .consume import (
    ConsumeFailedError,
    ConsumeFailuresWarning,
    ConsumeResult,
    consume_process_ack,
)
from .core import WriteResult, ack_dataframe, read_queue, write_queue

__all__ = [
    "ConsumeFailedError",
    "ConsumeFailuresWarning",
    "ConsumeResult",
    "FnResultError",
    "LeaseqDataSource",
    "WriteResult",
    "ack_dataframe",
    "consume_process_ack",
    "read_queue",
    "register",
    "write_queue",
]


def __getattr__(name: str) -> Any:
    # The data source module imports pyspark.sql.datasource: only when asked for.
    if name in ("LeaseqDataSource", "register"):
        from . import datasource

        return getattr(datasource, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
