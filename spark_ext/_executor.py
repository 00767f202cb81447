"""Executor-side plumbing: one gRPC client per (target, process), lease keeping, Spark types.

Nothing here is pickled with a Spark function except plain settings (``ClientSettings``): a
gRPC channel cannot cross a process boundary, and one made before a ``fork`` is unusable in the
child. ``client_for`` makes the channel lazily in the Python worker that first needs it and caches
it by ``(settings, os.getpid())``: Spark reuses Python workers (``spark.python.worker.reuse``), so
a worker pays for one connection, and a forked child (the pid differs) never touches its parent's.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..client import QueueClient

__all__ = [
    "ClientSettings",
    "client_for",
    "LeaseKeeper",
    "SPARK_MESSAGE_DDL",
    "PROGRESS_FILE_ENV",
    "progress_logger",
    "spark_arrow_schema",
]


@dataclass(frozen=True)
class ClientSettings:
    """What an executor needs to build its client: plain, hashable, picklable values."""

    target: str
    token: str | None = None
    timeout: float | None = 60.0


_clients: dict[tuple[ClientSettings, int], QueueClient] = {}
_clients_lock = threading.Lock()


def client_for(settings: ClientSettings) -> QueueClient:
    """This process's client for ``settings``, made on first use (never shared across a fork)."""
    key = (settings, os.getpid())
    client = _clients.get(key)
    if client is None:
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                # Entries of other pids were inherited through a fork: leave them alone (closing
                # a parent's channel from a child is what fork support warns against).
                client = QueueClient(
                    settings.target, token=settings.token, timeout=settings.timeout
                )
                _clients[key] = client
                freeze_worker_heap()
    return client


_frozen_pid: int | None = None


def freeze_worker_heap() -> None:
    """Move every object that exists now to the garbage collector's permanent generation, once
    per process (the first client of a worker: its modules are imported by then).

    PySpark's daemon calls ``gc.collect()`` after every task of a reused Python worker, and a full
    collection walks every object of pyspark, pyarrow, grpc and protobuf, which was most of a
    worker's time in the streaming source (scripts/bench_spark_streaming.py; the figures in
    docs/performance.md). Frozen objects are
    still freed by reference counting; only a cycle among them would never be collected, and
    what exists at a worker's first client (modules, classes, the channel) lives as long as the
    worker anyway."""
    global _frozen_pid
    if _frozen_pid != os.getpid():
        _frozen_pid = os.getpid()
        gc.freeze()


def progress_logger() -> logging.Logger:
    """The ``leaseq.spark_ext`` logger of this process, at INFO unless its level was set.

    In a Python worker nobody configures logging: with the root's WARNING the progress lines
    would be dropped before any handler saw them. At INFO they reach the handlers there are:
    Spark's worker log capture when ``spark.sql.pyspark.worker.logging.enabled`` is true (read
    them with ``spark.tvf.python_worker_logs()``), or none (Python's last-resort handler only
    prints WARNING and above, so nothing is printed)."""
    logger = logging.getLogger("leaseq.spark_ext")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    _add_progress_file(logger)
    return logger


PROGRESS_FILE_ENV = "LEASEQ_SPARK_PROGRESS_FILE"
"""When set in the executors' environment, their progress lines are also appended to this file
(one line each). Spark captures no log of a Python data source's ``read`` (its worker logs
cover UDFs and ``mapInArrow`` only): this is how a benchmark reads the stream partitions' lines."""


def _add_progress_file(logger: logging.Logger) -> None:
    path = os.environ.get(PROGRESS_FILE_ENV)
    if not path:
        return
    path = os.path.abspath(path)
    if any(getattr(h, "baseFilename", None) == path for h in logger.handlers):
        return
    handler = logging.FileHandler(path, mode="a", encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)


# The Spark side of MESSAGE_SCHEMA (Spark's columns are nullable; times are TIMESTAMP, UTC).
SPARK_MESSAGE_DDL = (
    "message_id string, receipt string, body binary, attributes map<string,string>, "
    "channel string, enqueued_at timestamp, visible_at timestamp, expires_at timestamp, "
    "delivery_count int"
)


def spark_arrow_schema(message_schema: pa.Schema) -> pa.Schema:
    """MESSAGE_SCHEMA with every field nullable: exactly what Spark declares for the DDL above."""
    return pa.schema([f.with_nullable(True) for f in message_schema])


def to_spark_batch(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> list[pa.RecordBatch]:
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    return table.cast(schema).to_batches()


class LeaseKeeper:
    """Extends a set of leases in one batched ChangeVisibility call per period while work runs.

    The period is 0.5 of the lease (earlier than the consumer's 0.85..0.9: a Spark task may be
    descheduled by a busy executor, and one missed round must not lose the batch). ``stop`` wakes
    the thread at once (an Event, not a poll) and joins it, so no extension can land after the
    caller goes on to release (an extension after a release would undo it)."""

    def __init__(
        self, client: QueueClient, queue: str, receipts: list[str] | pa.ChunkedArray, lease: float
    ) -> None:
        self.client = client
        self.queue = queue
        # An Arrow column becomes Python strings only if an extension is due (most batches
        # are done well within half a lease).
        self.receipts = receipts
        self.lease = lease
        self.lost: set[str] = set()
        self.extensions = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leaseq-lease-keeper", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        if len(self.receipts) and self.lease > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        period = max(self.lease * 0.5, 0.05)
        while not self._stop.wait(period):
            if not isinstance(self.receipts, list):
                self.receipts = self.receipts.to_pylist()
            live = [r for r in self.receipts if r not in self.lost]
            for start in range(0, len(live), 10_000):
                chunk = live[start : start + 10_000]
                try:
                    results = self.client.change_visibility(
                        self.queue, [(r, self.lease) for r in chunk]
                    )
                except Exception:  # noqa: BLE001 - try again next period; the lease may survive
                    continue
                self.extensions += 1
                for receipt, result in zip(chunk, results):
                    if not result.ok:
                        self.lost.add(receipt)
