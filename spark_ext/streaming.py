"""Structured Streaming for the ``"leaseq"`` data source: a micro-batch source that replays
exactly and acks on commit, and an Arrow sink that is idempotent per (batch, partition).

::

    spark.dataSource.register(LeaseqDataSource)          # or leaseq.spark_ext.register(spark)
    stream = (spark.readStream.format("leaseq")
              .option("target", "host:50051").option("queue", "jobs")
              .option("numPartitions", 2).option("maxMessagesPerTrigger", 20000).load())
    (stream.select("message_id", "body").writeStream.format("parquet")
        .option("path", "/lake/jobs").option("checkpointLocation", "/chk/jobs").start())

The source (``DataSourceStreamReader`` with admission control and ``SupportsTriggerAvailableNow``)
---------------------------------------------------------------------------------------------

A queue has no offsets, so the source makes its own: an offset is a *micro-batch plan*,
``{"query", "batch", "messages", "partitions"}``. ``query`` is a random id minted by the first
reader of a new checkpoint (``initialOffset``) and carried from offset to offset, so Spark's
offset log keeps it: it is the checkpoint's identity, the same after every restart, and a new
checkpoint gets a new one. ``batch`` counts the source's micro-batches; ``messages`` is how many
messages the batch may take (decided by ``latestOffset`` from the visible count and the read
limit), split over ``partitions``: a multiple of ``numPartitions`` (default: the driver's
cores, ``os.cpu_count()``; on a cluster set it to the executors' cores), so that the tasks run
in even waves, with at most 100,000 messages each (``MAX_PER_PARTITION``).

- ``partitions(start, end)``: partition ``p`` of batch ``b`` receives in requests of at most
  10,000, request ``k`` with the receive attempt id ``leaseq-stream:<query>:<b>:<p>`` for ``k =
  0`` and ``leaseq-stream:<query>:<b>:<p>.<k>`` after it (``BatchPlan.attempt_id``), and stops at
  the first request that comes back short. Nothing but the logged offset goes into the ids, so a
  re-run of the batch (a retried task, the batch re-executed after a restart) names the same
  ids, and while the leases live the server answers each with exactly the same messages and
  receipts, delivering nothing new (``read`` sorts each request's messages by message id, so the
  order is the same too; a request short the first time is short again, so the same requests
  are made). Few large partitions rather than one per 10,000: each Spark task costs its
  executor and Python worker a fixed amount, and ``local[2]`` runs 2 at a time.
- ``commit(end)``: ``DeleteMessages`` by the attempt ids of every batch up to ``end`` that this
  reader has seen and not yet deleted (``end`` itself, and after a restart the batches before
  the re-executed one whose delete may have been lost in the crash; deleting twice is
  harmless). Spark calls ``commit(N)`` once batch N+1 is in the offset log, which is after batch
  N is in the commit log: a message is deleted only after the batch that read it completed.
  The delete runs in the background while batch N+1 reads (its messages are leased: the two do
  not meet), one at a time: ``commit(N+1)`` first waits for N's. An offset planned while a
  delete is in flight names its batches (``"unconfirmed"``), so a driver restarted after a
  crash deletes them with the re-executed batch's predecessor. When the next batch is a flush
  batch (below: the end of an AvailableNow run, or an idle stream) or the delete before failed,
  the delete runs in ``commit`` itself, and its failure fails the query, whose restart deletes
  again (the logged offsets name every batch not surely deleted).
- The commit lag: Spark commits batch N only when it constructs batch N+1. So that an idle
  queue does not keep the last batch leased for ever, ``latestOffset`` answers a *flush batch*
  (``messages = 0``, no partitions, nothing read) when batches wait for their commit and no
  message is visible; constructing it commits them. The lag is therefore one trigger.
- Leases: reads lease for ``visibilityTimeout`` (default 300 s), which must outlive one micro-
  batch (with its task retries) plus one trigger interval. On top of that the driver extends
  the leases of every batch that is planned and not yet committed, every third of the lease,
  with a *probe* receive per attempt id, which replays the request on a channel filter no message uses (``PROBE_CHANNEL``), which returns the attempt's live leases
  with their receipts (a replay ignores the new request's filter and limit: contract test
  ``test_a_replay_ignores_the_new_requests_limits``) and, when there is nothing to replay
  (the request was not made yet, read nothing, or its leases ended), receives nothing at all
  because of the filter, so a probe can never deliver a message under a batch's attempt id;
  then ``ChangeVisibility`` of those receipts, 10,000 per call. Changing visibility keeps the attempt
  replayable (``test_an_extended_lease_keeps_the_attempt_replayable``): replay rule a looks at
  the messages' live leases, not at the attempt record's expiry.
- Admission control: ``getDefaultReadLimit`` is ``ReadMaxRows(maxMessagesPerTrigger)`` (default
  50,000; 0 means no limit); ``latestOffset(start, limit)`` plans ``min(visible, limit)``
  messages (``ReadAllAvailable``: all visible; ``ReadMinRows(n)``: nothing until n are visible),
  and never more than the queue's ``max_in_flight`` leaves room for (``max_in_flight`` less the
  messages leased at the planning, at most half of it: the batch before is still leased while
  this one reads), so that no read fails with ``OverLimit``.
- ``Trigger.AvailableNow``: ``prepareForTriggerAvailableNow`` records the visible count as the
  run's budget; batches take from it until it is spent or the queue is empty, then one flush
  batch commits the last data batch and the query ends. Delivery is oldest first, so the budget
  covers the messages that were visible at the start unless older ones are released meanwhile.

- Columns: Spark's Python sources have no column pruning, and the JVM converts every column a
  partition yields into its rows; a schema given to the reader (``.schema("message_id string,
  body binary")``: message columns with their types, any order) makes the partitions yield
  those columns only (``_columns.py``).

The sink (``DataSourceStreamArrowWriter``)
------------------------------------------

Each task sends its partition through ``send_arrow`` with dedup ids
``<query id>:<batch id>:<partition>:<row position>`` (``dedupCol``'s values instead when given).
The query id (``sql.streaming.queryId``) is kept in the checkpoint and the batch id is the
micro-batch's, so a retried task or a batch re-executed after a restart re-sends the same ids and
the server enqueues none twice, within the target queue's ``dedup_window`` (5 min by default, at
most 1 h). ``writeId`` replaces the query id (e.g. to keep ids across a new checkpoint).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from ..client.arrow import DEFAULT_BATCH_BYTES, MAX_ROWS
from ..client.errors import LeaseqError
from ._columns import OutputColumns
from ._executor import ClientSettings, client_for, progress_logger
from .core import send_partition

__all__ = [
    "DEFAULT_MAX_MESSAGES_PER_TRIGGER",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "MAX_PER_PARTITION",
    "PROBE_CHANNEL",
    "BatchPlan",
    "StreamPartition",
    "StreamReader",
    "StreamWriter",
]

_log = logging.getLogger("leaseq.spark_ext.streaming")

DEFAULT_VISIBILITY_TIMEOUT = 300.0
DEFAULT_MAX_MESSAGES_PER_TRIGGER = 50_000
DEFAULT_IDLE_POLL_INTERVAL = 0.1
MAX_PER_PARTITION = 100_000
"""Messages one partition (one Spark task, one Python worker's Arrow table) may take."""

PROBE_CHANNEL = "leaseq.spark.lease-probe.no-message-has-this-channel"
"""The channel filter of the driver's lease probes. A probe is a receive with a batch's attempt
id: a replay answers it whatever the filter; when there is nothing to replay, this filter makes
it an empty receive (no delivery, no attempt record). Do not send messages on this channel."""

_BATCH_ID_KEY = "streaming.sql.batchId"  # MicroBatchExecution.BATCH_ID_KEY
_QUERY_ID_KEY = "sql.streaming.queryId"  # StreamExecution.QUERY_ID_KEY


def _float(options: Any, name: str, default: float) -> float:
    value = options.get(name)
    return default if value in (None, "") else float(value)


def _int(options: Any, name: str, default: int) -> int:
    value = options.get(name)
    return default if value in (None, "") else int(value)


# --- offsets ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchPlan:
    """One micro-batch of the source, as its offset says: everything a re-run needs."""

    query: str
    batch: int
    messages: int
    partitions: int

    @classmethod
    def from_offset(cls, offset: dict[str, Any]) -> BatchPlan:
        return cls(
            str(offset["query"]),
            int(offset["batch"]),
            int(offset.get("messages", 0)),
            int(offset.get("partitions", 0)),
        )

    def offset(self, unconfirmed: list[BatchPlan] | None = None) -> dict[str, Any]:
        offset: dict[str, Any] = {
            "query": self.query,
            "batch": self.batch,
            "messages": self.messages,
            "partitions": self.partitions,
        }
        if unconfirmed:
            offset["unconfirmed"] = [[p.batch, p.messages, p.partitions] for p in unconfirmed]
        return offset

    @classmethod
    def unconfirmed(cls, offset: dict[str, Any]) -> list[BatchPlan]:
        """The earlier batches an offset names as not surely deleted when it was planned."""
        query = str(offset["query"])
        return [cls(query, int(b), int(m), int(p)) for b, m, p in offset.get("unconfirmed", [])]

    @classmethod
    def plan(cls, query: str, batch: int, messages: int, min_partitions: int) -> BatchPlan:
        """``messages`` over a multiple of ``min_partitions`` partitions (whole waves of tasks)
        of at most ``MAX_PER_PARTITION``, and never an empty one."""
        if messages <= 0:
            return cls(query, batch, 0, 0)
        waves = math.ceil(messages / (min_partitions * MAX_PER_PARTITION))
        parts = min(messages, min_partitions * waves)
        return cls(query, batch, messages, parts)

    def sizes(self) -> list[int]:
        base, extra = divmod(self.messages, self.partitions) if self.partitions else (0, 0)
        return [base + (1 if p < extra else 0) for p in range(self.partitions)]

    def receives(self, partition: int) -> list[tuple[str, int]]:
        """Partition ``partition``'s receive requests: (attempt id, messages) each."""
        size = self.sizes()[partition]
        return [
            (self.attempt_id(partition, k), min(MAX_ROWS, size - start))
            for k, start in enumerate(range(0, size, MAX_ROWS))
        ]

    def attempt_id(self, partition: int, request: int = 0) -> str:
        # Request 0 keeps the id of offsets logged when a partition was one request.
        suffix = f".{request}" if request else ""
        return f"leaseq-stream:{self.query}:{self.batch}:{partition}{suffix}"

    def attempt_ids(self) -> list[str]:
        return [a for p in range(self.partitions) for a, _ in self.receives(p)]


class StreamPartition(InputPartition):
    """One partition of a micro-batch: its receive requests, (attempt id, messages) each."""

    def __init__(self, receives: list[tuple[str, int]]) -> None:
        super().__init__(tuple(receives))
        self.receives = list(receives)
        self.attempt_id = receives[0][0]  # names the partition in progress lines


# --- the driver side: planning, commits, lease keeping ---------------------------------------


class _Driver:
    """State of the reader on the driver (Spark's streaming source runner process): the query id
    of a new checkpoint, the batches planned or run and not yet deleted, the AvailableNow
    budget, the commit in flight, and the thread that keeps their leases."""

    def __init__(self, reader: StreamReader) -> None:
        self.reader = reader
        self.client = client_for(reader.settings)
        self.query = uuid.uuid4().hex  # used only when the checkpoint has no offset yet
        self.lock = threading.Lock()
        self.pending: dict[int, BatchPlan] = {}  # batch -> plan, not yet deleted by a commit
        self.committed_through = -1  # highest batch whose delete this process saw succeed
        self.latest: BatchPlan | None = None  # the last plan latestOffset answered
        self.budget: int | None = None  # Trigger.AvailableNow: messages left to plan
        self.last_empty_check = -math.inf
        self.committed_messages = 0
        self.backlog = 0  # visible and not planned into a batch, at the last planning
        self.max_in_flight: int | None = None  # the queue's, read at the first planning
        # Seconds spent, for the query's progress: the deletes of commits (in the background
        # when overlapped), commit() waiting for the delete before it, GetQueueStats calls.
        self.seconds = {"commitSeconds": 0.0, "commitWaitSeconds": 0.0, "planSeconds": 0.0}
        self.deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leaseq-commit")
        self.in_flight: tuple[Future[None], list[BatchPlan]] | None = None
        self.keeper = _DriverLeaseKeeper(self)
        self.keeper.start()

    def track(self, plan: BatchPlan) -> None:
        if plan.messages > 0 and plan.batch > self.committed_through:
            with self.lock:
                self.pending.setdefault(plan.batch, plan)

    def pending_plans(self) -> list[BatchPlan]:
        with self.lock:
            return list(self.pending.values())

    def unconfirmed_before(self, batch: int) -> list[BatchPlan]:
        """Batches before ``batch`` whose delete is in flight or failed: a new offset names
        them, so that a driver restarted after a crash deletes them too."""
        with self.lock:
            return [p for b, p in sorted(self.pending.items()) if b < batch]

    def visible(self) -> int:
        return self.visible_and_room()[0]

    def visible_and_room(self) -> tuple[int, int]:
        """The visible count, and how many more messages a batch may lease: the queue's
        ``max_in_flight`` less what is leased now (the batch before, awaiting its commit, among
        them), and at most half of it, so that two batches in a row always fit (batch N+1 reads
        while N's delete runs). A batch over it would fail its tasks with ``OverLimit``."""
        started = time.perf_counter()
        try:
            if self.max_in_flight is None:
                self.max_in_flight = self.client.get_queue(self.reader.queue).config.max_in_flight
            stats = self.client.stats(self.reader.queue)
        finally:
            self.seconds["planSeconds"] += time.perf_counter() - started
        room = min(self.max_in_flight - stats.leased, self.max_in_flight // 2)
        return stats.visible, max(room, 0)

    def progress(self) -> dict[str, Any]:
        """The backlog and this run's work, for the query's progress (``reportLatestOffset``)."""
        with self.lock:
            uncommitted = [p for p in self.pending.values() if p.messages > 0]
        return {
            "backlog": self.backlog,
            "uncommittedBatches": len(uncommitted),
            "committedMessages": self.committed_messages,
            "leasesExtended": self.keeper.extended,
            **{k: round(v, 3) for k, v in self.seconds.items()},
        }

    def commit(self, end: BatchPlan) -> None:
        """Delete the batches through ``end``: in the background while the next batch runs,
        unless the next batch is a flush batch (the last of an AvailableNow run, or an idle
        stream: nothing to overlap) or the delete before failed; then here, and a failure
        fails the query (its restart deletes them again: the logged offsets name them)."""
        self.track(end)
        started = time.perf_counter()
        failed = self.settle()
        self.seconds["commitWaitSeconds"] += time.perf_counter() - started
        with self.lock:
            plans = [p for b, p in sorted(self.pending.items()) if b <= end.batch]
        last = self.latest is None or self.latest.batch <= end.batch or not self.latest.messages
        if failed or last:
            self.delete(plans)
        else:
            self.in_flight = (self.deleter.submit(self.delete, plans), plans)

    def settle(self) -> list[BatchPlan]:
        """Wait for the delete in flight; the plans it failed to delete (still pending)."""
        in_flight, self.in_flight = self.in_flight, None
        if in_flight is None:
            return []
        try:
            in_flight[0].result()
            return []
        except Exception:  # noqa: BLE001 - deleted again by the caller, which raises
            _log.warning("leaseq stream: a commit's delete failed; deleting again", exc_info=True)
            return in_flight[1]

    def delete(self, plans: list[BatchPlan]) -> None:
        started = time.perf_counter()
        ids = [a for p in plans for a in p.attempt_ids()]
        deleted = 0
        for start in range(0, len(ids), MAX_ROWS):
            chunk = ids[start : start + MAX_ROWS]
            # Retried by the client on UNAVAILABLE; deleting twice is harmless.
            result = self.client.delete(self.reader.queue, [], attempt_ids=chunk)
            deleted += sum(result.attempt_results.values())
        with self.lock:
            for plan in plans:
                self.pending.pop(plan.batch, None)
            if plans:
                self.committed_through = max(self.committed_through, plans[-1].batch)
            self.committed_messages += deleted
            self.seconds["commitSeconds"] += time.perf_counter() - started
        _log.info(
            "leaseq stream: committed %d batch(es), %s messages deleted (%s by this query run)",
            len(plans),
            f"{deleted:,}",
            f"{self.committed_messages:,}",
        )

    def close(self) -> None:
        failed = self.settle()
        if failed:
            try:
                self.delete(failed)
            except Exception:  # noqa: BLE001 - stop() must not hide the query's own outcome
                _log.error(
                    "leaseq stream: a commit's delete failed at stop; its messages "
                    "come back when their leases end",
                    exc_info=True,
                )
        self.deleter.shutdown(wait=True)
        self.keeper.stop()


class _DriverLeaseKeeper:
    """Extends the leases of every planned, uncommitted batch every third of the lease.

    The driver holds no receipts: for each receive request it replays the attempt id on
    ``PROBE_CHANNEL`` (the live leases come back with their current receipts; nothing else can
    be delivered), then extends them in one ChangeVisibility call per 10,000. A batch committed
    meanwhile answers MESSAGE_NOT_FOUND / nothing: harmless."""

    def __init__(self, driver: _Driver) -> None:
        self.driver = driver
        self.lease = driver.reader.visibility_timeout
        self.period = max(self.lease / 3.0, 0.1)
        self.rounds = 0  # completed rounds that extended something
        self.extended = 0  # leases extended, in total
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="leaseq-stream-lease-keeper", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                extended = self.extend_once()
            except Exception:  # noqa: BLE001 - try again next period; the leases may survive
                _log.debug("lease extension round failed", exc_info=True)
                continue
            if extended:
                with self.changed:
                    self.rounds += 1
                    self.extended += extended
                    self.changed.notify_all()

    def extend_once(self) -> int:
        client, queue = self.driver.client, self.driver.reader.queue
        receipts: list[str] = []
        for plan in self.driver.pending_plans():
            for attempt_id in plan.attempt_ids():
                try:
                    held = client.receive(
                        queue,
                        1,
                        visibility_timeout=self.lease,
                        wait_time=0,
                        channel=PROBE_CHANNEL,
                        attempt_id=attempt_id,
                    )
                except LeaseqError:  # e.g. OverLimit: the next partition may still answer
                    _log.debug("lease probe of %s failed", attempt_id, exc_info=True)
                    continue
                receipts.extend(m.receipt for m in held)
        extended = 0
        for start in range(0, len(receipts), MAX_ROWS):
            chunk = receipts[start : start + MAX_ROWS]
            results = client.change_visibility(queue, [(r, self.lease) for r in chunk])
            extended += sum(1 for r in results if r.ok)
        return extended


# --- the reader ------------------------------------------------------------------------------


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("leaseq")``: see the module docstring.

    Spark builds one instance in its driver-side source runner (every method but ``read`` runs
    there, in one process for the life of the query) and pickles fresh instances to executors
    for ``read``; the driver state is made on the first driver call and never pickled."""

    def __init__(self, options: Any, schema: Any = None) -> None:
        target, queue = options.get("target"), options.get("queue")
        if not target or not queue:
            raise ValueError('the leaseq stream source needs the options "target" and "queue"')
        self.output = OutputColumns(schema)
        self.settings = ClientSettings(target, options.get("token"))
        self.queue = queue
        self.num_partitions = max(1, _int(options, "numPartitions", os.cpu_count() or 1))
        self.max_per_trigger = _int(
            options, "maxMessagesPerTrigger", DEFAULT_MAX_MESSAGES_PER_TRIGGER
        )
        self.visibility_timeout = _float(options, "visibilityTimeout", DEFAULT_VISIBILITY_TIMEOUT)
        if self.visibility_timeout <= 0:
            raise ValueError("visibilityTimeout must be positive: the source reads under leases")
        self.idle_poll_interval = _float(options, "idlePollInterval", DEFAULT_IDLE_POLL_INTERVAL)
        self._driver_state: _Driver | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_driver_state"] = None
        return state

    def _driver(self) -> _Driver:
        if self._driver_state is None:
            self._driver_state = _Driver(self)
        return self._driver_state

    # -- offsets and admission control ---------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return BatchPlan(self._driver().query, 0, 0, 0).offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_per_trigger > 0:
            return ReadMaxRows(self.max_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        driver = self._driver()
        driver.budget = driver.visible()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        driver = self._driver()
        last = BatchPlan.from_offset(start)
        # `start` is the end of the last batch Spark completed (it is in the commit log): its
        # messages wait for commit(), which comes when the next batch is constructed.
        driver.track(last)
        waiting = bool(driver.pending_plans())
        total = 0
        if driver.budget is None or driver.budget > 0:
            now = time.monotonic()
            if waiting or now - driver.last_empty_check >= self.idle_poll_interval:
                visible, room = driver.visible_and_room()
                total = min(self._admit(visible, limit), room)
                if driver.budget is not None:
                    total = min(total, driver.budget)
                driver.backlog = visible - total
                if total == 0:
                    driver.last_empty_check = now
        if total > 0:
            plan = BatchPlan.plan(last.query, last.batch + 1, total, self.num_partitions)
            if driver.budget is not None:
                driver.budget -= total
        elif waiting:
            plan = BatchPlan(last.query, last.batch + 1, 0, 0)  # the flush batch: see above
        else:
            return start
        driver.track(plan)
        driver.latest = plan
        return plan.offset(driver.unconfirmed_before(last.batch))

    def reportLatestOffset(self) -> dict[str, Any]:
        """Shown as the source's ``latestOffset`` in the query's progress (``lastProgress``): a
        queue has no offsets to report, so this is the backlog and the run's work instead:
        ``backlog`` (messages visible and not taken by a batch, at the last planning),
        ``uncommittedBatches`` (planned, leased, waiting for their commit), ``committedMessages``
        (deleted on commit by this run of the query) and ``leasesExtended``. It calls nothing on
        the server."""
        return self._driver().progress()

    @staticmethod
    def _admit(visible: int, limit: ReadLimit) -> int:
        if isinstance(limit, ReadMaxRows):
            return min(visible, max(limit.max_rows, 0))
        if isinstance(limit, ReadMinRows):
            return visible if visible >= limit.min_rows else 0
        return visible  # ReadAllAvailable (and limits in files or bytes, which do not apply)

    # -- planning, reading, committing ---------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        driver = self._driver()
        first, plan = BatchPlan.from_offset(start), BatchPlan.from_offset(end)
        if plan.batch <= first.batch:
            return []
        # After a restart this is the re-executed batch: the one before it completed, but its
        # commit may have been lost with the old driver; commit() deletes it again.
        driver.track(first)
        for unconfirmed in BatchPlan.unconfirmed(end):  # deletes in flight at the planning
            driver.track(unconfirmed)
        driver.track(plan)
        return [StreamPartition(plan.receives(p)) for p in range(plan.partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamPartition)
        clock = time.perf_counter
        started = clock()
        client = client_for(self.settings)
        setup = clock() - started  # the worker's first client: its channel (else nothing)
        rows = 0
        waited = converted = handed = 0.0  # the partition's time split, for its progress line

        def receive(attempt_id: str, asked: int) -> pa.Table:
            return client.receive_arrow(
                self.queue,
                asked,
                visibility_timeout=self.visibility_timeout,
                wait_time=0,
                attempt_id=attempt_id,
            )

        # Request k+1 is made while request k's rows go to Spark, but only once k came back
        # full: the same requests, with the same attempt ids, as one after the other (a
        # request made before k's answer could take what k would have, or lease under an id
        # that a short k means to be never used: its messages would then be deleted unread).
        receives = partition.receives
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="leaseq-stream") as pool:
            future = pool.submit(receive, *receives[0])
            for k, (_, asked) in enumerate(receives):
                t0 = clock()
                table = future.result()
                t1 = clock()
                full = table.num_rows >= asked
                if full and k + 1 < len(receives):
                    future = pool.submit(receive, *receives[k + 1])
                rows += table.num_rows
                # A first receive returns delivery order, a replay key order: sort, so that
                # every run of the partition yields the same rows in the same order
                # (position-based dedup ids downstream, e.g. the leaseq sink, depend on it).
                batches = self.output.batches(table) if table.num_rows else []
                t2 = clock()
                yield from batches  # returns when Spark's JVM has taken them
                waited, converted, handed = (
                    waited + t1 - t0,
                    converted + t2 - t1,
                    handed + clock() - t2,
                )
                if not full:
                    break  # nothing more visible: a replay stops here too
        seconds = clock() - started
        rate = rows / seconds if seconds > 0 else 0.0
        progress_logger().info(
            "leaseq stream %s of queue %s: %s messages received in %.2f s (%s/s; client %.2f s, "
            "receive %.2f s, arrow %.2f s, hand-over %.2f s)",
            partition.attempt_id,
            self.queue,
            f"{rows:,}",
            seconds,
            f"{rate:,.0f}",
            setup,
            waited,
            converted,
            handed,
        )

    def commit(self, end: dict[str, Any]) -> None:
        self._driver().commit(BatchPlan.from_offset(end))

    def stop(self) -> None:
        if self._driver_state is not None:
            self._driver_state.close()


# --- the sink --------------------------------------------------------------------------------


@dataclass
class StreamCommit(WriterCommitMessage):
    batch: int
    partition: int
    rows: int
    enqueued: int
    duplicates: int


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("leaseq")``: see the module docstring."""

    def __init__(self, options: Any) -> None:
        target, queue = options.get("target"), options.get("queue")
        if not target or not queue:
            raise ValueError('the leaseq stream sink needs the options "target" and "queue"')
        self.settings = ClientSettings(target, options.get("token"))
        self.queue = queue
        self.body_col = options.get("bodyCol", "body")
        cols = options.get("attributesCols", "") or ""
        self.attributes_cols = [c.strip() for c in cols.split(",") if c.strip()] or None
        self.channel_col = options.get("channelCol") or None
        self.dedup_col = options.get("dedupCol") or None
        self.write_id = options.get("writeId") or None
        self.max_batch_bytes = _int(options, "maxBatchBytes", DEFAULT_BATCH_BYTES)
        self.last_commit: tuple[int, list[StreamCommit]] | None = None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StreamCommit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("the leaseq stream sink runs in a Spark task")
        batch = ctx.getLocalProperty(_BATCH_ID_KEY)
        query = self.write_id or ctx.getLocalProperty(_QUERY_ID_KEY)
        if batch is None or not query:
            raise RuntimeError("the leaseq stream sink found no streaming batch or query id")
        partition = ctx.partitionId()
        clock = time.perf_counter
        started = clock()
        waited = 0.0  # blocked on Spark handing over the next Arrow batch

        def timed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            nonlocal waited
            while True:
                t0 = clock()
                item = next(batches, None)
                waited += clock() - t0
                if item is None:
                    return
                yield item

        rows, enqueued, dups = send_partition(
            timed(iter(iterator)),
            settings=self.settings,
            queue=self.queue,
            partition=partition,
            write_id=f"{query}:{batch}",
            body_col=self.body_col,
            attributes_cols=self.attributes_cols,
            channel_col=self.channel_col,
            dedup_col=self.dedup_col,
            max_batch_bytes=self.max_batch_bytes,
        )
        seconds = clock() - started
        progress_logger().info(
            "leaseq sink batch %s partition %d of queue %s: %s rows in %.2f s (%s/s; input %.2f "
            "s, sends %.2f s)",
            batch,
            partition,
            self.queue,
            f"{rows:,}",
            seconds,
            f"{rows / seconds if seconds > 0 else 0.0:,.0f}",
            waited,
            seconds - waited,
        )
        return StreamCommit(int(batch), partition, rows, enqueued, dups)

    def commit(self, messages: list[Any], batchId: int) -> None:
        self.last_commit = (batchId, [m for m in messages if m is not None])

    def abort(self, messages: list[Any], batchId: int) -> None:
        # Sent messages cannot be taken back; the batch's re-run re-sends the same dedup ids.
        pass
