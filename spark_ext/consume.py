"""consume_process_ack: the at-least-once bulk consumer (lease, call fn, ack, all in one task).

What the driver does around the Spark job: check the arguments and the target before the job
(``_preflight``), stop and put the batch back when ``fn`` is misused (``_fn_result``), report
failures (a warning, or ``ConsumeFailedError`` with ``raise_on_failure``) and progress (one log
line per partition, rates in the result).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..client import Reject
from ..client._leases import reason_of
from ..client.arrow import MAX_ROWS
from ..client.errors import FailedPrecondition, LeaseqError
from ._executor import ClientSettings, client_for, progress_logger
from ._fn_result import FnResultError, Rejection, rejection, row_errors
from ._pipeline import Acker, Leased, Leaser, kept
from ._preflight import (
    MAX_LEASE_SECONDS,
    MAX_WAIT_SECONDS,
    check_int,
    check_queue,
    check_seconds,
    driver_client,
)
from .core import _DONE, _partition_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ConsumeFailedError",
    "ConsumeFailuresWarning",
    "ConsumeResult",
    "FnResultError",
    "consume_process_ack",
]

_log = logging.getLogger("leaseq.spark_ext")
FAILURE_SAMPLES = 5  # failure reasons kept per partition, and shown in the warning
_COUNTS = ("batches", "received", "acked", "failed", "lost", "rejected")


def _done_statuses() -> pa.Array:
    # Made when a task needs it, not at import: pyarrow imports pandas (about a second on a
    # loaded machine) the first time it converts Python objects, and every Python process Spark
    # starts for the "leaseq" source or sink imports this package.
    return pa.array(sorted(_DONE), pa.string())


# Where a task's time went: receiving (the server's receive and the conversion to Arrow),
# fn, and settling (acks and releases).
_PHASES = ("receive_seconds", "fn_seconds", "settle_seconds")
_CONSUME_DDL = (
    "partition int, batches long, received long, acked long, failed long, lost long, "
    "rejected long, "
    "seconds double, receive_seconds double, fn_seconds double, settle_seconds double, "
    "failures array<string>, misuse string, held array<string>"
)
_CONSUME_SCHEMA = pa.schema(
    [("partition", pa.int32())]
    + [(name, pa.int64()) for name in _COUNTS]
    + [(name, pa.float64()) for name in ("seconds", *_PHASES)]
    + [
        ("failures", pa.list_(pa.string())),
        ("misuse", pa.string()),
        ("held", pa.list_(pa.string())),
    ]
)


@dataclass(frozen=True)
class ConsumeResult:
    """Totals of ``consume_process_ack``: messages ``received``, ``acked`` (deleted after fn
    succeeded), ``failed`` (released with a reason: they stay in the queue), ``lost`` (fn
    succeeded but the lease was gone before the ack: the message will be delivered again,
    at-least-once), ``rejected`` (fn rejected them with ``leaseq.client.Reject``: moved to the
    queue's dead letter queue, not retried). ``seconds`` is the Spark job's wall time;
    ``failures`` the first few reasons, as ``"<message id>: <reason>"``; ``per_partition`` one dict per task with the same
    counts, its own ``seconds``, ``rows_per_second`` and ``failures``, and where its time went:
    ``receive_seconds`` (leasing batches), ``fn_seconds``, ``settle_seconds`` (acks and
    releases)."""

    batches: int
    received: int
    acked: int
    failed: int
    lost: int
    per_partition: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    rejected: int = 0

    @property
    def rows_per_second(self) -> float:
        return self.received / self.seconds if self.seconds > 0 else 0.0


class ConsumeFailuresWarning(UserWarning):
    """``consume_process_ack`` left messages in the queue that ``fn`` failed with."""


class ConsumeFailedError(RuntimeError):
    """``raise_on_failure=True`` and ``fn`` failed with some messages; ``result`` has the
    totals (the failed messages are back in the queue with their reason as ``last_error``)."""

    def __init__(self, message: str, result: ConsumeResult) -> None:
        super().__init__(message)
        self.result = result


# --- in the task -----------------------------------------------------------------------------


def _run_fn(
    fn: Callable[[Any], Any], table: pa.Table, as_pandas: bool, bisect: bool
) -> list[str | None] | None:
    """Per-row errors of ``fn`` over ``table``, or None when every row succeeded (the common
    case, kept free of per-row work). When fn raises and ``bisect`` is on, the batch is split
    in halves until the rows that make it raise are alone: those fail with the exception as
    reason, the others succeed (fn must then tolerate being called again on a subset).
    A return value of the wrong shape (``FnResultError``) is fn's bug, not the rows': it goes
    up at once, never bisected."""
    arg = table.to_pandas() if as_pandas else table
    try:
        result = fn(arg)
    except Reject as error:
        return [rejection(error)] * table.num_rows  # a verdict on these rows: no bisecting
    except Exception as error:  # noqa: BLE001 - fn's failure is the message's failure
        if not bisect or table.num_rows == 1:
            return [reason_of(error)] * table.num_rows
        half = table.num_rows // 2
        first, second = table.slice(0, half), table.slice(half)
        return _per_row(_run_fn(fn, first, as_pandas, bisect), first.num_rows) + _per_row(
            _run_fn(fn, second, as_pandas, bisect), second.num_rows
        )
    if result is None:
        return None
    return row_errors(result, table.num_rows)


_NO_DLQ = "the queue has no dead letter queue"


def _dead_letter(
    client: Any, queue: str, rejects: list[tuple[str, str]]
) -> tuple[int, int, list[tuple[str, str]]]:
    """Move the rejected rows to the dead letter queue now, one call per reason (the call takes
    one reason for its receipts); (moved, leases lost meanwhile, refused: the queue has no dead
    letter queue, so they are released with their reason instead)."""
    by_reason: dict[str, list[str]] = {}
    for receipt, reason in rejects:
        by_reason.setdefault(str(reason), []).append(receipt)
    moved = gone = 0
    for reason, receipts in by_reason.items():
        for start in range(0, len(receipts), MAX_ROWS):
            chunk = receipts[start : start + MAX_ROWS]
            try:
                results = client.dead_letter(queue, chunk, reason)
            except FailedPrecondition:
                return moved, gone, rejects
            done = sum(1 for r in results if r.ok)
            moved, gone = moved + done, gone + len(chunk) - done
    return moved, gone, []


def _without_dead_letter_queue(errors: list[str | None], failures: list[str]) -> list[str | None]:
    """The queue has no dead letter queue: rejected rows are failures (released with their
    reason), and the task's failures say so first, once."""
    if not any(isinstance(e, Rejection) for e in errors):
        return errors
    note = f"rejected messages released: {_NO_DLQ}"
    if note not in failures:
        failures.insert(0, note)
    return [str(e) if isinstance(e, Rejection) else e for e in errors]


def _per_row(errors: list[str | None] | None, rows: int) -> list[str | None]:
    return [None] * rows if errors is None else errors


def _release(client: Any, queue: str, entries: list[tuple[str, str]], delay: float) -> None:
    for start in range(0, len(entries), MAX_ROWS):
        client.change_visibility(
            queue, [(r, delay, e) for r, e in entries[start : start + MAX_ROWS]]
        )


# Receives kept in flight ahead of fn, and acks behind it, per task (``_pipeline``). One
# receive ahead already keeps the next batch arriving while fn runs; acks in flight let the
# next fn start without waiting for the last batch's delete.
RECEIVE_AHEAD = 1
ACKS_IN_FLIGHT = 2


def consume_partition(
    settings: ClientSettings,
    queue: str,
    fn: Callable[[Any], Any],
    *,
    batch_size: int,
    max_messages: int | None,
    visibility_timeout: float,
    wait_time: float,
    as_pandas: bool,
    bisect: bool,
    release_delay: float,
    receive_ahead: int = RECEIVE_AHEAD,
    acks_in_flight: int = ACKS_IN_FLIGHT,
    dead_letter: bool = True,
) -> dict[str, Any]:
    """One task's loop; its counts, ``seconds``, the first ``failures``, and when fn returned
    a wrong shape the ``misuse`` text and the receipts the task still held (``held``: that
    batch, and any batch leased ahead and not yet given to fn), still leased: the driver
    releases them once every task has stopped, so no other task of the job receives them again
    (a release here would hand them to a task still running, a second delivery).

    Pipelined (``_pipeline``): while fn runs on a batch, the next ``receive_ahead`` batches are
    being leased and up to ``acks_in_flight`` earlier batches acked. Leasing ahead starts only
    after fn's first call returned an accepted shape, so a misused fn sees, and holds, one
    batch per task."""
    client = client_for(settings)
    started = time.monotonic()
    stats: dict[str, Any] = dict.fromkeys(_COUNTS, 0)
    phases = dict.fromkeys(_PHASES, 0.0)
    clock = time.monotonic()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.monotonic()
        phases[phase] += now - clock
        clock = now

    failures: list[str] = []
    misuse: str | None = None
    held: list[str] = []
    # Messages fn failed with in this task, and why. A released failure is visible again at
    # once (or after release_delay) and would come back to this loop: it is given back
    # untouched, and a batch holding nothing else ends the task, so a run processes each
    # message at most once per task and always ends.
    failed_here: dict[str, str] = {}

    def give_back(receipts: list[str]) -> None:
        # The task is failing (e.g. the process is being torn down, an ack call failed for
        # good): give the batch back now rather than strand it until its leases end.
        _release(client, queue, [(r, "consume_process_ack: task failed") for r in receipts], 0)

    leaser = Leaser(
        client,
        queue,
        visibility_timeout=visibility_timeout,
        wait_time=wait_time,
        depth=receive_ahead,
    )
    acker = Acker(client, queue, _done_statuses(), acks_in_flight, give_back)
    leased_rows = 0  # rows of every batch taken from the leaser
    drained = False  # a receive came back empty (or with only repeats): ask for no more
    validated = False  # fn has returned an accepted shape once: lease ahead from now on

    def ask_more(ahead: int) -> None:
        """Keep ``ahead`` receives in flight (fewer near ``max_messages``)."""
        while not drained and len(leaser.pending) < ahead:
            room = None if max_messages is None else max_messages - leased_rows - leaser.asked
            if room is not None and room <= 0:
                return
            leaser.ask(batch_size if room is None else min(batch_size, room))

    current: Leased | None = None
    finished = False
    try:
        ask_more(1)
        while leaser.pending:
            current = leaser.take()
            table = current.table
            leased_rows += table.num_rows
            lap("receive_seconds")
            if table.num_rows == 0:
                drained = True  # nothing visible within wait_time: the queue is drained (for now)
                current = None
                continue
            if failed_here:
                again = pc.is_in(
                    table.column("message_id"), pa.array(list(failed_here), pa.string())
                )
                if pc.any(again).as_py():
                    repeats = table.filter(again)
                    lost = current.stop_keeping()
                    _release(
                        client,
                        queue,
                        [
                            (r, failed_here[m])
                            for r, m in zip(
                                repeats.column("receipt").to_pylist(),
                                repeats.column("message_id").to_pylist(),
                            )
                            if r not in lost
                        ],
                        release_delay,
                    )
                    table = table.filter(pc.invert(again))
                    lap("settle_seconds")
                    if table.num_rows == 0:
                        drained = True  # only messages this task already failed with: done
                        current = None
                        continue
                    # The keeper goes on for the rest of the batch (a new one: the old one
                    # is stopped, and must stay so after the release).
                    current = kept(client, queue, table, visibility_timeout)
            n = table.num_rows
            stats["batches"] += 1
            stats["received"] += n
            # The next batches arrive while fn runs on this one; before fn's first accepted
            # result, none (a misused fn holds one batch per task).
            ask_more(receive_ahead if validated else 0)
            # The receipts stay an Arrow column: a batch that fn succeeded with as a whole is
            # acked straight from it, with no Python object per message.
            receipts = table.column("receipt")
            try:
                errors = _run_fn(fn, table, as_pandas, bisect)
            except FnResultError as error:
                current.stop_keeping()
                misuse, held = str(error), receipts.to_pylist()
                current = None
                break
            lost_leases = current.stop_keeping()
            lap("fn_seconds")
            validated = True
            ask_more(max(receive_ahead, 1))  # at least the next one, after fn
            bad: list[tuple[str, str]] = []
            ok: pa.ChunkedArray | list[str] = receipts
            if not dead_letter and errors is not None:
                errors = _without_dead_letter_queue(errors, failures)
            if errors is not None or lost_leases:
                per_row = _per_row(errors, n)
                values = receipts.to_pylist()
                ok = [r for r, e in zip(values, per_row) if e is None and r not in lost_leases]
                bad = [
                    (r, e)
                    for r, e in zip(values, per_row)
                    if e is not None and r not in lost_leases
                ]
            stats["lost"] += len(lost_leases)
            if len(ok):
                acker.ack(ok)
            if errors is not None and any(e is not None for e in errors):
                ids = table.column("message_id").to_pylist()
                for message_id, row_error in zip(ids, errors):
                    if row_error is not None:
                        # A rejected one too: if it comes back (no dead letter queue), it
                        # is released untouched, not given to fn again.
                        failed_here[message_id] = row_error
                        if len(failures) < FAILURE_SAMPLES and not isinstance(row_error, Rejection):
                            failures.append(f"{message_id}: {row_error}")
            rejects: list[tuple[str, str]] = [(r, e) for r, e in bad if isinstance(e, Rejection)]
            if rejects:
                bad = [(r, e) for r, e in bad if not isinstance(e, Rejection)]
                moved, gone, refused = _dead_letter(client, queue, rejects)
                stats["rejected"] += moved
                stats["lost"] += gone
                if refused:  # its dead letter queue went away meanwhile: as above
                    bad += refused
                    _without_dead_letter_queue([Rejection("")], failures)
            _release(client, queue, bad, release_delay)
            stats["failed"] += len(bad)
            current = None
            lap("settle_seconds")
        # Batches leased ahead that fn will not see (misuse stopped the task): held with the
        # misused batch, for the driver to release after the job.
        for leased in leaser.close():
            held.extend(leased.table.column("receipt").to_pylist())
        acker.drain()
        lap("settle_seconds")
        finished = True
    finally:
        if not finished:
            unsettled = [current] if current is not None else []
            if current is not None:
                current.stop_keeping()
            unsettled += leaser.close()
            try:
                give_back([r for b in unsettled for r in b.table.column("receipt").to_pylist()])
            except Exception:  # noqa: BLE001 - the leases end by themselves
                pass
            try:
                acker.drain()  # a failed ack released its own batch
            except Exception:  # noqa: BLE001 - the loop's own error is the one raised
                pass
    stats["acked"] += acker.acked
    stats["lost"] += acker.lost
    seconds = time.monotonic() - started
    return dict(stats, seconds=seconds, **phases, failures=failures, misuse=misuse, held=held)


# --- on the driver ---------------------------------------------------------------------------


def _progress_line(row: dict[str, Any]) -> str:
    rate = row["received"] / row["seconds"] if row["seconds"] > 0 else 0.0
    return (
        f"consume_process_ack partition {row['partition']}: {row['received']:,} messages in "
        f"{row['seconds']:.1f} s ({rate:,.0f}/s), {row['batches']:,} batches, "
        f"{row['acked']:,} acked, {row['failed']:,} failed, {row['rejected']:,} rejected, "
        f"{row['lost']:,} lost; "
        f"receive {row['receive_seconds']:.1f} s, fn {row['fn_seconds']:.1f} s, "
        f"settle {row['settle_seconds']:.1f} s"
    )


def _put_back(settings: ClientSettings, queue: str, receipts: list[str]) -> int:
    """Release the batches the misused fn was given: visible again at once, with no reason
    (the messages are not at fault). Their one delivery stays counted: a lease cannot be
    undone. Returns how many were still leased by this job (0 when the server could not be
    asked: then they come back when their leases end, and the misuse is still what to say)."""
    released = 0
    try:
        with driver_client(settings) as client:
            for start in range(0, len(receipts), MAX_ROWS):
                chunk = receipts[start : start + MAX_ROWS]
                results = client.change_visibility(queue, [(r, 0) for r in chunk])
                released += sum(1 for r in results if r.ok)
    except LeaseqError:
        _log.warning("consume_process_ack: could not put the misused batches back", exc_info=True)
    return released


def _check_arguments(
    fn: Any,
    num_partitions: Any,
    batch_size: Any,
    max_messages_per_partition: Any,
    visibility_timeout: Any,
    wait_time: Any,
    release_delay: Any,
) -> None:
    if not callable(fn):
        raise TypeError(
            f"consume_process_ack: fn must be callable (called with each batch), got "
            f"{type(fn).__name__} {fn!r:.80}"
        )
    check_int("num_partitions", num_partitions, 1)
    check_int("batch_size", batch_size, 1, MAX_ROWS)
    if max_messages_per_partition is not None:
        check_int("max_messages_per_partition", max_messages_per_partition, 1)
    # A lease of 0 would deliver without a lease: nothing left to ack.
    check_seconds("visibility_timeout", visibility_timeout, 0, MAX_LEASE_SECONDS, low_open=True)
    check_seconds("wait_time", wait_time, 0, MAX_WAIT_SECONDS)
    check_seconds("release_delay", release_delay, 0, MAX_LEASE_SECONDS)


def consume_process_ack(
    spark: SparkSession,
    queue: str,
    fn: Callable[[Any], Any],
    *,
    target: str,
    num_partitions: int,
    batch_size: int = 10_000,
    max_messages_per_partition: int | None = None,
    visibility_timeout: float = 60.0,
    wait_time: float = 1.0,
    arrow: bool = False,
    bisect: bool = True,
    release_delay: float = 0.0,
    raise_on_failure: bool = False,
    token: str | None = None,
    receive_ahead: int = RECEIVE_AHEAD,
    acks_in_flight: int = ACKS_IN_FLIGHT,
) -> ConsumeResult:
    """The at-least-once bulk consumer: ``num_partitions`` Spark tasks, each looping until the
    queue stays empty for ``wait_time`` (or it received ``max_messages_per_partition``):

    1. lease up to ``batch_size`` messages (``receive_arrow``);
    2. call ``fn`` with them: a pandas DataFrame of the ``MESSAGE_SCHEMA`` columns (``arrow=True``:
       a ``pyarrow.Table``). fn processes and writes them (its own sink), then returns None (all
       succeeded), or one value per row (a list, tuple, pandas Series, 1-d numpy array or
       pyarrow Array of the batch's length): True/None = success, False or an error text =
       failure, ``leaseq.client.Reject("why")`` = rejected (step 5);
    3. while fn runs, every lease of the batch is extended (one ChangeVisibility per half lease);
    4. ack (delete) exactly the rows fn succeeded with; release the others at once (after
       ``release_delay``) with their error as ``last_error``. When fn raises, the batch is
       bisected (``bisect=True``) to find the rows that make it raise; those are released with
       the exception text, the rest acked. With ``bisect=False`` the whole batch is released.
       A task does not call fn twice for one message: when a message it failed with comes back
       it is released again untouched, and a batch of nothing else ends the task (the failures
       stay in the queue, with ``last_error``, for the next run or the dead letter queue).
    5. rejected rows go to the dead letter queue now: a row whose value is
       ``leaseq.client.Reject("why")``, or every row of a call in which fn raised ``Reject``
       (not bisected), moves there with ``why`` as its ``last_error`` (``DeadLetterMessages``)
       and counts in ``rejected``, instead of being released for a retry. A queue without a
       dead letter queue (``GetQueue`` tells the driver) releases them like failures instead,
       and the failures say so first.

    Misuse fails loudly, and never at the messages' expense:

    - Before the job, on the driver: ``TypeError`` when ``fn`` is not callable, ``TypeError`` /
      ``ValueError`` for an argument of the wrong type or out of range (``batch_size`` 1..10,000,
      ``num_partitions`` >= 1, ``visibility_timeout`` > 0 .. 7 d, ``wait_time`` 0..30 s), and
      the client's error (``Unavailable``, ``QueueNotFound``, ``Unauthenticated``, ...) from a
      ``GetQueue`` when the target or the queue cannot be used. Nothing is leased.
    - ``FnResultError`` (a ``TypeError``) when fn returns anything else than the shapes of
      step 2, e.g. its DataFrame: the task that saw it stops at once, without bisecting and
      without acking or failing the batch; once the job is over, the driver releases those
      batches (visible again at once, ``last_error`` untouched) and raises. Each of them was
      delivered once, to fn; no task of the job receives them again. Other tasks go on until
      their own first misused batch (or the end): the driver cannot stop them sooner.

    Failures are visible: when fn failed with some messages a ``ConsumeFailuresWarning``
    names the first reasons; ``raise_on_failure=True`` raises ``ConsumeFailedError`` instead
    (after the whole job: the failed messages are back in the queue). Progress: each task logs
    one line when it ends, and the driver logs one per partition (logger ``leaseq.spark_ext``,
    INFO): messages, seconds, rate, batches, acked, failed, lost; the same numbers are in the
    result (``per_partition``, ``seconds``, ``rows_per_second``).

    A message is acked only after fn returned for it, so a crash between fn and the ack means a
    redelivery: fn's sink must tolerate a repeat (at-least-once). Returns the totals.

    Round trips overlap fn: while fn runs on a batch, each task leases the next
    ``receive_ahead`` batches (0..8; each under its own lease keeper from its arrival) and up to
    ``acks_in_flight`` earlier batches are being acked (0..8; 0: each ack before the next fn).
    Leasing ahead starts after fn's first accepted result; when a task stops on a misused fn,
    the batches it leased ahead are released with the misused one. 0 and 0 is the sequential
    loop (receive, fn, ack, in turn).
    """
    _check_arguments(
        fn,
        num_partitions,
        batch_size,
        max_messages_per_partition,
        visibility_timeout,
        wait_time,
        release_delay,
    )
    check_int("receive_ahead", receive_ahead, 0, 8)
    check_int("acks_in_flight", acks_in_flight, 0, 8)
    settings = ClientSettings(target, token)
    found = check_queue(settings, queue, "consume_process_ack")
    options: dict[str, Any] = dict(
        dead_letter=bool(getattr(found.config, "dead_letter_queue", None)),
        batch_size=batch_size,
        max_messages=max_messages_per_partition,
        visibility_timeout=visibility_timeout,
        wait_time=wait_time,
        as_pandas=not arrow,
        bisect=bisect,
        release_delay=release_delay,
        receive_ahead=receive_ahead,
        acks_in_flight=acks_in_flight,
    )

    def task(seeds: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in seeds:
            pass
        partition = _partition_id()
        outcome = consume_partition(settings, queue, fn, **options)
        row = dict(partition=partition, **outcome)
        progress_logger().info("%s", _progress_line(row))
        yield pa.RecordBatch.from_pylist([row], schema=_CONSUME_SCHEMA)

    started = time.monotonic()
    seeds = spark.range(0, num_partitions, numPartitions=num_partitions)
    rows = [r.asDict() for r in seeds.mapInArrow(task, _CONSUME_DDL).collect()]
    seconds = time.monotonic() - started
    rows.sort(key=lambda r: r["partition"])

    misused = [r for r in rows if r["misuse"]]
    if misused:
        held = [receipt for r in misused for receipt in r["held"]]
        released = _put_back(settings, queue, held)
        raise FnResultError(
            f"consume_process_ack: {misused[0]['misuse']}. {len(misused)} of {len(rows)} "
            f"tasks stopped at their first such batch without acking or failing it; its "
            f"{len(held):,} messages are back in the queue ({released:,} released now, visible "
            "at once with last_error untouched; any other when its lease ended)"
        )

    per_partition = []
    for row in rows:
        _log.info("%s", _progress_line(row))
        entry = {k: row[k] for k in ("partition", *_COUNTS, "seconds", *_PHASES)}
        entry["rows_per_second"] = row["received"] / row["seconds"] if row["seconds"] > 0 else 0.0
        entry["failures"] = list(row["failures"] or [])
        per_partition.append(entry)
    totals = {k: sum(r[k] for r in rows) for k in _COUNTS}
    samples = [f for entry in per_partition for f in entry["failures"]][:FAILURE_SAMPLES]
    result = ConsumeResult(**totals, per_partition=per_partition, seconds=seconds, failures=samples)
    _log.info(
        "consume_process_ack: %s messages in %.1f s (%s/s), %s acked, %s failed, %s rejected, "
        "%s lost",
        f"{result.received:,}",
        seconds,
        f"{result.rows_per_second:,.0f}",
        f"{result.acked:,}",
        f"{result.failed:,}",
        f"{result.rejected:,}",
        f"{result.lost:,}",
    )
    if result.failed:
        text = (
            f"consume_process_ack: fn failed with {result.failed:,} of {result.received:,} "
            f"messages (released with their reason as last_error); first: " + "; ".join(samples)
        )
        if raise_on_failure:
            raise ConsumeFailedError(text, result)
        warnings.warn(text, ConsumeFailuresWarning, stacklevel=2)
    return result
