#!/usr/bin/env python3
"""The "leaseq" Structured Streaming source and sink beside the raw SQLite cycle and the batch
helpers, in one run, in alternated rounds; and where a micro-batch's time goes.

    python scripts/bench_spark_streaming.py                      # 200,000 messages, 3 rounds
    python scripts/bench_spark_streaming.py --rounds 1 --only source-parquet,sink

Every round runs, one after the other, each measure with the raw SQLite cycle between them
(`python -m leaseq.bench.baseline cycle 1000 8`, a child process): a measure's ratio is its rate
over the mean of the raw cycles right before and after it, so that the machine's drift (its
speed changes by a fifth from one minute to the next, more when other work shares its 2 cores)
moves both sides. The figures are the medians over the rounds, with their range.

Measures (N messages of 100 bytes, SQLite store, `local[2]`, a real `leaseq serve`):

- floor-parquet: the floor of any Python streaming source on this machine: a do-nothing
  Python data source (`leaseq-floor`, below: no server, each partition yields Arrow batches of
  10,000 rows built once per worker, with the three columns the query keeps) planned as the
  leaseq source plans (the same micro-batches, partitions and AvailableNow budget), into
  parquet. Its ratio is what the leaseq source would reach if leasing and deleting were free.
- source-parquet: `spark.readStream.format("leaseq")` with Trigger.AvailableNow into parquet,
  until the queue is empty (preloaded, not timed); rows/s over the query's wall time. The
  reader's schema names the three columns the query keeps (`.schema("message_id string, body
  binary, delivery_count int")`), so its partitions yield only those.
- source-parquet-all-columns: the same without the schema (all nine message columns reach the
  JVM, and the query's select drops six).
- source-noop: as source-parquet, into Spark's no-op sink (the source alone).
- sink: `writeStream.format("leaseq")` from a parquet files source (two files), AvailableNow.
- write_queue: `write_queue` of the same parquet files.
- consume_process_ack: 2 tasks, batches of 10,000, `fn` writing each batch to parquet.

The split of the source's runs (summed over the query's micro-batches, in seconds and us per
row): the query's start and stop (before its first trigger, between triggers, after its last),
Spark's own durations (`durationMs` of each progress: latestOffset, queryPlanning,
getBatch, addBatch: the Spark job that reads the partitions, hands the Arrow batches to the JVM
and runs the sink; walCommit: the offset log and the source's commit; commitOffsets), what the
source reports (`reportLatestOffset`: its commits' DeleteMessages, and how long a commit waited
for the one before it), and inside the tasks (each partition's progress line, appended by the executors to the
file named by LEASEQ_SPARK_PROGRESS_FILE, which this script sets): the worker's first client,
receiving, the Arrow batches' sort and cast, and the time the
generator waited for the JVM to take a batch (the hand-over, and behind it the sink).
An untimed warm-up of each measure runs first (the JVM's JIT compilers otherwise spend several
us of CPU per row of the first timed run). Each run checks its result: the queue empty and
every message in the parquet sink once; the sink's and write_queue's queue holds N messages.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cpu import cpu_by_role, delta  # noqa: E402

# leaseq.spark_ext._executor.PROGRESS_FILE_ENV (not imported here: Spark starts first).
PROGRESS_FILE_ENV = "LEASEQ_SPARK_PROGRESS_FILE"
from _local_spark import local_spark  # noqa: E402  (scripts/ is on sys.path: the script's folder)

MEASURES = (
    "floor-parquet",
    "source-parquet",
    "source-parquet-all-columns",
    "source-noop",
    "sink",
    "write_queue",
    "consume_process_ack",
)
SELECTED = "message_id string, body binary, delivery_count int"
SPARK_PHASES = (
    "latestOffset",
    "queryPlanning",
    "getBatch",
    "addBatch",
    "walCommit",
    "commitOffsets",
)
_TASK_LINE = re.compile(
    r"leaseq stream \S+ of queue \S+: ([\d,]+) messages received in ([\d.]+) s .*client "
    r"([\d.]+) s, receive ([\d.]+) s, arrow ([\d.]+) s, hand-over ([\d.]+) s"
)


def floor_source() -> Any:
    """The `leaseq-floor` streaming data source (defined here, so Spark pickles it by value)."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    from leaseq.spark_ext.streaming import BatchPlan

    rows_per_batch = 10_000
    cache: dict[str, Any] = {}

    def arrow_batch() -> Any:
        if "batch" not in cache:
            ids = [f"01JFLOOR{i:018d}" for i in range(rows_per_batch)]
            bodies = [f"{i:<100}".encode() for i in range(rows_per_batch)]
            cache["batch"] = pa.RecordBatch.from_arrays(
                [
                    pa.array(ids, pa.string()),
                    pa.array(bodies, pa.binary()),
                    pa.array([1] * rows_per_batch, pa.int32()),
                ],
                names=["message_id", "body", "delivery_count"],
            )
        return cache["batch"]

    class FloorPartition(InputPartition):
        def __init__(self, rows: int) -> None:
            super().__init__(rows)
            self.rows = rows

    class FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: Any) -> None:
            self.total = int(options["rows"])
            self.per_trigger = int(options.get("maxMessagesPerTrigger", 50_000))
            self.num_partitions = int(options.get("numPartitions", os.cpu_count() or 1))
            self.budget = self.total

        def initialOffset(self) -> dict[str, Any]:
            return {"query": "floor", "batch": 0, "messages": 0, "partitions": 0, "taken": 0}

        def getDefaultReadLimit(self) -> Any:
            return ReadMaxRows(self.per_trigger) if self.per_trigger > 0 else ReadAllAvailable()

        def prepareForTriggerAvailableNow(self) -> None:
            self.budget = self.total

        def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
            left = self.total - int(start["taken"])
            take = min(left, self.budget, limit.max_rows if hasattr(limit, "max_rows") else left)
            if take <= 0:
                return start
            self.budget -= take
            plan = BatchPlan.plan("floor", int(start["batch"]) + 1, take, self.num_partitions)
            return {**plan.offset(), "taken": int(start["taken"]) + take}

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[Any]:
            plan = BatchPlan.from_offset(end)
            if plan.batch <= int(start["batch"]):
                return []
            return [FloorPartition(size) for size in plan.sizes()]

        def read(self, partition: Any) -> Any:
            batch = arrow_batch()
            for start in range(0, partition.rows, rows_per_batch):
                yield batch.slice(0, min(rows_per_batch, partition.rows - start))

        def commit(self, end: dict[str, Any]) -> None:
            pass

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "leaseq-floor"

        def schema(self) -> str:
            return SELECTED

        def streamReader(self, schema: Any) -> Any:
            return FloorReader(self.options)

    return FloorSource


_SINK_LINE = re.compile(
    r"leaseq sink batch \S+ partition \d+ of queue \S+: ([\d,]+) rows in ([\d.]+) s .*input "
    r"([\d.]+) s, sends ([\d.]+) s"
)


def raw_cycle(seconds: float) -> float:
    """msgs/s of `python -m leaseq.bench.baseline cycle 1000 SECONDS` (a child process)."""
    out = subprocess.run(
        [sys.executable, "-m", "leaseq.bench.baseline", "cycle", "1000", f"{seconds:g}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.split()[0])


def run_query(writer: Any) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Start the query, wait for its end: its progress, and the seconds before its first
    trigger (``start()``, then to the first trigger: the source's runner process starting),
    between its triggers, and after its last (stop: the source's and sink's close)."""
    from datetime import datetime

    t0 = time.time()
    query = writer.start()
    started = time.time()
    query.awaitTermination()
    ended = time.time()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    progress = query.recentProgress
    if not progress:
        return progress, {}

    def at(p: dict[str, Any]) -> float:
        return datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()

    first, last = at(progress[0]), at(progress[-1])
    last_end = last + progress[-1]["durationMs"].get("triggerExecution", 0) / 1e3
    busy = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1e3
    return progress, {
        "start() call": started - t0,
        "start() to the first trigger": first - started,
        "between triggers": (last_end - first) - busy,
        "after the last trigger (stop)": ended - last_end,
    }


class Bench:
    def __init__(self, spark: Any, server: Any, client: Any, work: Path, args: Any) -> None:
        self.spark, self.server, self.client, self.work, self.args = (
            spark,
            server,
            client,
            work,
            args,
        )
        self.runs = 0
        self.input_dir: Path | None = None

    def _name(self, kind: str) -> str:
        self.runs += 1
        return f"{kind}-{self.runs}"

    def preload(self, queue: str, n: int) -> None:
        import pyarrow as pa

        options = {"max_in_flight": self.args.max_in_flight} if self.args.max_in_flight else {}
        self.client.create_queue(queue, visibility_timeout=300, **options)
        for start in range(0, n, 50_000):
            bodies = [f"{i:<100}".encode() for i in range(start, min(start + 50_000, n))]
            self.client.send_arrow(queue, pa.table({"body": bodies}))
        assert self.client.stats(queue).visible == n

    def bodies_on_disk(self, n: int) -> Path:
        """N bodies of 100 bytes in two parquet files: the input of the sink and write_queue."""
        from pyspark.sql import functions as F

        if self.input_dir is None:
            self.input_dir = self.work / f"input-{n}"
            (
                self.spark.range(0, n, numPartitions=2)
                .select(F.rpad(F.col("id").cast("string"), 100, "x").cast("binary").alias("body"))
                .write.parquet(str(self.input_dir))
            )
        return self.input_dir

    def timed(self, run: Any) -> tuple[float, dict[str, float], Any]:
        pid = self.server.process.pid
        t0, c0 = time.perf_counter(), cpu_by_role(pid)
        result = run()
        wall = time.perf_counter() - t0
        return wall, delta(c0, cpu_by_role(pid)), result

    # -- the measures ------------------------------------------------------------------------

    def source(self, sink: str, n: int, selected: bool = True) -> dict[str, Any]:
        name = self._name(f"source-{sink}")
        self.preload(name, n)
        out = self.work / f"out-{name}"
        reader = (
            self.spark.readStream.format("leaseq")
            .option("target", self.server.target)
            .option("queue", name)
        )
        if selected:
            reader = reader.schema(SELECTED)
        for key, value in self.args.source_options.items():
            reader = reader.option(key, value)
        stream = reader.load().select("message_id", "body", "delivery_count")
        writer = (
            stream.writeStream.format(sink)
            .trigger(availableNow=True)
            .option("checkpointLocation", str(self.work / f"chk-{name}"))
        )
        if sink == "parquet":
            writer = writer.option("path", str(out))

        wall, cpu, (progress, edges) = self.timed(lambda: run_query(writer))
        rows = sum(p["numInputRows"] for p in progress)
        assert rows == n, f"read {rows} of {n}"
        stats = self.client.stats(name)
        assert stats.total == 0, f"{stats.total} messages left in the queue"
        if sink == "parquet":
            written = self.spark.read.parquet(str(out))
            assert written.select("message_id").distinct().count() == n == written.count()
        spark_s = {k: sum(p["durationMs"].get(k, 0) for p in progress) / 1e3 for k in SPARK_PHASES}
        batches_s = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1e3
        reported = json.loads(progress[-1]["sources"][0].get("latestOffset") or "{}")
        return dict(
            wall=wall,
            cpu=cpu,
            rows=n,
            spark=spark_s,
            batches_s=batches_s,
            data_batches=sum(1 for p in progress if p["numInputRows"]),
            batches=len(progress),
            edges=edges,
            source=reported,
            tasks=self.task_split(name),
        )

    def floor(self, n: int) -> dict[str, Any]:
        name = self._name("floor")
        out = self.work / f"out-{name}"
        reader = self.spark.readStream.format("leaseq-floor").option("rows", n)
        for key, value in self.args.source_options.items():
            reader = reader.option(key, value)
        writer = (
            reader.load()
            .writeStream.format("parquet")
            .trigger(availableNow=True)
            .option("checkpointLocation", str(self.work / f"chk-{name}"))
            .option("path", str(out))
        )

        wall, cpu, (progress, edges) = self.timed(lambda: run_query(writer))
        rows = sum(p["numInputRows"] for p in progress)
        assert rows == n == self.spark.read.parquet(str(out)).count(), f"read {rows} of {n}"
        spark_s = {k: sum(p["durationMs"].get(k, 0) for p in progress) / 1e3 for k in SPARK_PHASES}
        batches_s = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1e3
        return dict(
            wall=wall,
            cpu=cpu,
            rows=n,
            spark=spark_s,
            batches_s=batches_s,
            data_batches=sum(1 for p in progress if p["numInputRows"]),
            batches=len(progress),
            edges=edges,
            source={},
            tasks={"tasks": 0.0},
        )

    @staticmethod
    def progress_lines(containing: str) -> list[str]:
        path = Path(os.environ[PROGRESS_FILE_ENV])
        lines = path.read_text().splitlines() if path.exists() else []
        return [line for line in lines if containing in line]

    def task_split(self, queue: str) -> dict[str, float]:
        """The partitions' progress lines of this query, from the executors' progress file."""
        totals = dict.fromkeys(("tasks", "rows", "task", "client", "receive", "arrow"), 0.0)
        totals["hand-over"] = 0.0
        for line in self.progress_lines(f" of queue {queue}:"):
            found = _TASK_LINE.search(line)
            if found:
                rows, total, client, receive, arrow, handover = found.groups()
                totals["tasks"] += 1
                totals["rows"] += float(rows.replace(",", ""))
                for key, value in zip(
                    ("task", "client", "receive", "arrow", "hand-over"),
                    (total, client, receive, arrow, handover),
                ):
                    totals[key] += float(value)
        return totals

    def sink(self, n: int) -> dict[str, Any]:
        name = self._name("sink")
        self.client.create_queue(name)
        files = self.bodies_on_disk(n)
        writer = (
            self.spark.readStream.schema("body binary")
            .parquet(str(files))
            .writeStream.format("leaseq")
            .option("target", self.server.target)
            .option("queue", name)
            .trigger(availableNow=True)
            .option("checkpointLocation", str(self.work / f"chk-{name}"))
        )

        wall, cpu, (progress, edges) = self.timed(lambda: run_query(writer))
        assert self.client.stats(name).visible == n
        spark_s = {k: sum(p["durationMs"].get(k, 0) for p in progress) / 1e3 for k in SPARK_PHASES}
        batches_s = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1e3
        tasks = dict.fromkeys(("tasks", "rows", "task", "input", "sends"), 0.0)
        for line in self.progress_lines(f" of queue {name}:"):
            found = _SINK_LINE.search(line)
            if found:
                rows, total, waited, sends = found.groups()
                tasks["tasks"] += 1
                tasks["rows"] += float(rows.replace(",", ""))
                tasks["task"] += float(total)
                tasks["input"] += float(waited)
                tasks["sends"] += float(sends)
        return dict(
            wall=wall,
            cpu=cpu,
            rows=n,
            spark=spark_s,
            batches_s=batches_s,
            data_batches=sum(1 for p in progress if p["numInputRows"]),
            batches=len(progress),
            edges=edges,
            source={},
            tasks=tasks,
        )

    def write_queue(self, n: int) -> dict[str, Any]:
        from leaseq.spark_ext import write_queue

        name = self._name("write")
        self.client.create_queue(name)
        df = self.spark.read.parquet(str(self.bodies_on_disk(n)))
        wall, cpu, written = self.timed(lambda: write_queue(df, name, target=self.server.target))
        assert written.enqueued == n == self.client.stats(name).visible, written
        return dict(wall=wall, cpu=cpu, rows=n)

    def consume(self, n: int) -> dict[str, Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from leaseq.spark_ext import consume_process_ack

        name = self._name("consume")
        self.preload(name, n)
        sink = self.work / f"out-{name}"
        sink.mkdir()
        sink_dir = str(sink)

        def fn(table: pa.Table) -> None:
            pq.write_table(
                table.select(["message_id", "body"]), f"{sink_dir}/{uuid.uuid4().hex}.parquet"
            )

        wall, cpu, consumed = self.timed(
            lambda: consume_process_ack(
                self.spark,
                name,
                fn,
                target=self.server.target,
                num_partitions=2,
                batch_size=10_000,
                visibility_timeout=120,
                wait_time=0.5,
                arrow=True,
            )
        )
        assert consumed.acked == n, consumed
        return dict(wall=wall, cpu=cpu, rows=n)

    def measure(self, kind: str, n: int) -> dict[str, Any]:
        # Spark gives a new Python process 10 s to connect back (not configurable); on a
        # machine loaded well past its cores that fails now and then: that run is not a figure.
        for attempt in range(3):
            try:
                return self._measure(kind, n)
            except Exception as error:  # noqa: BLE001 - re-raised unless it is that one
                if "connect back" not in str(error) or attempt == 2:
                    raise
                print(f"  ({kind}: a Python worker did not connect back in time; again)")
        raise AssertionError("unreachable")

    def _measure(self, kind: str, n: int) -> dict[str, Any]:
        if kind == "floor-parquet":
            return self.floor(n)
        if kind == "source-parquet":
            return self.source("parquet", n)
        if kind == "source-parquet-all-columns":
            return self.source("parquet", n, selected=False)
        if kind == "source-noop":
            return self.source("noop", n)
        if kind == "sink":
            return self.sink(n)
        if kind == "write_queue":
            return self.write_queue(n)
        return self.consume(n)


def _median_range(values: list[float], fmt: str) -> str:
    if len(values) == 1:
        return format(values[0], fmt)
    return (
        f"{format(statistics.median(values), fmt)} "
        f"({format(min(values), fmt)}-{format(max(values), fmt)})"
    )


def print_split(runs: list[dict[str, Any]]) -> None:
    """The source's split, medians over its runs, in seconds and us per row."""

    def line(label: str, values: list[float], rows: int) -> None:
        med = statistics.median(values)
        print(f"    {label:<44} {med:>7.2f} s  {med / rows * 1e6:>7.2f} us/row")

    rows = runs[0]["rows"]
    print(f"  where the time went ({len(runs)} run(s), medians; wall time of the query):")
    line("query wall time", [r["wall"] for r in runs], rows)
    line(
        "  start-up and stop (wall - micro-batches)",
        [r["wall"] - r["batches_s"] for r in runs],
        rows,
    )
    for edge in runs[0]["edges"]:
        line(f"    {edge}", [r["edges"].get(edge, 0.0) for r in runs], rows)
    line("  micro-batches (triggerExecution)", [r["batches_s"] for r in runs], rows)
    for phase in SPARK_PHASES:
        line(f"  {phase}", [r["spark"][phase] for r in runs], rows)
    if any(r["source"] for r in runs):
        line(
            "    of walCommit: the source's commits (delete)",
            [r["source"].get("commitSeconds", 0.0) for r in runs],
            rows,
        )
        line(
            "    of walCommit: waiting for the commit before",
            [r["source"].get("commitWaitSeconds", 0.0) for r in runs],
            rows,
        )
        line(
            "    of latestOffset: the source's GetQueueStats",
            [r["source"].get("planSeconds", 0.0) for r in runs],
            rows,
        )
    tasks = [r["tasks"] for r in runs if r["tasks"]["tasks"]]
    if tasks:
        print(
            f"  inside the tasks (summed over {statistics.median([t['tasks'] for t in tasks]):.0f}"
            " partitions a run; they run 2 at a time):"
        )
        for key in [k for k in tasks[0] if k not in ("tasks", "rows")]:
            line(f"  {key}", [t[key] for t in tasks], rows)
    else:
        print("  inside the tasks: no partition lines (the floor source logs none)")
    print(
        "  data micro-batches "
        + ", ".join(str(r["data_batches"]) for r in runs)
        + "; all micro-batches "
        + ", ".join(str(r["batches"]) for r in runs)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--raw-seconds", type=float, default=8.0)
    parser.add_argument(
        "--warmup",
        type=int,
        default=50_000,
        help="messages of each measure's untimed warm-up run (0: none)",
    )
    parser.add_argument(
        "--only",
        default=",".join(MEASURES),
        help="comma-separated measures, of: " + ", ".join(MEASURES),
    )
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the source (e.g. numPartitions=4), repeatable",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=0,
        help="the preloaded queues' max_in_flight (0: the server's default, 120,000): a source "
        "batch takes at most half of it",
    )
    args = parser.parse_args()
    measures = [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = set(measures) - set(MEASURES)
    if unknown:
        parser.error(f"unknown measures: {', '.join(sorted(unknown))}")
    args.source_options = dict(o.split("=", 1) for o in args.source_option)

    progress_file = Path(tempfile.mkdtemp(prefix="leaseq-bench-progress-")) / "tasks.log"
    os.environ[PROGRESS_FILE_ENV] = str(progress_file)  # inherited by the JVM and its workers
    # Spark first, then any gRPC channel in this process (leaseq.spark_ext's start-up order).
    spark = local_spark(
        "leaseq-bench-streaming",
        **{
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            # A loaded machine starts a Python process in more than the default 15 s.
            "spark.python.authenticate.socketTimeout": "120s",
        },
    )

    from leaseq.client import QueueClient
    from leaseq.spark_ext import register
    from tests.support.process import ServerProcess, free_port

    register(spark)
    spark.dataSource.register(floor_source())
    work = Path(tempfile.mkdtemp(prefix="leaseq-bench-streaming-"))
    server = ServerProcess(f"sqlite:///{work}/bench.db", free_port(), work / "server.log")
    server.start()
    n = args.messages
    print(
        f"{n:,} messages of 100 bytes, SQLite store, local[2], {args.rounds} round(s); source "
        f"options {args.source_options or 'the defaults'}; max_in_flight "
        f"{args.max_in_flight or 'default'}; load average at the start "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in measures}
    raws: list[float] = []
    try:
        with QueueClient(server.target) as client:
            bench = Bench(spark, server, client, work, args)
            if args.warmup > 0:
                for kind in measures:
                    bench.measure(kind, min(n, args.warmup))
                bench.input_dir = None  # the timed runs' own N rows
            for round_no in range(args.rounds):
                raws.append(raw_cycle(args.raw_seconds))
                for kind in measures:
                    run = bench.measure(kind, n)
                    raws.append(raw_cycle(args.raw_seconds))
                    run["raw"] = (raws[-2] + raws[-1]) / 2
                    run["rate"] = n / run["wall"]
                    results[kind].append(run)
                    print(
                        f"  round {round_no + 1} {kind:<27} {run['rate']:>9,.0f} rows/s "
                        f"({run['wall']:.1f} s), raw cycle {raws[-2]:,.0f} / {raws[-1]:,.0f}: "
                        f"{run['rate'] / run['raw']:.2f}x; load "
                        + " ".join(f"{x:.2f}" for x in os.getloadavg()),
                        flush=True,
                    )
    finally:
        server.terminate()
        spark.stop()

    print(
        f"\nraw SQLite cycle (batch 1000): {_median_range(raws, ',.0f')} msgs/s over "
        f"{len(raws)} runs"
    )
    print(
        f"{'measure':<27} {'rows/s':>26}  {'x raw cycle':>18}  CPU us/row (server, JVM, "
        "Python workers)"
    )
    for kind, runs in results.items():
        if not runs:
            continue
        cpu = {
            k: statistics.median(r["cpu"][k] / r["rows"] * 1e6 for r in runs)
            for k in ("server", "jvm", "python workers")
        }
        print(
            f"{kind:<27} {_median_range([r['rate'] for r in runs], ',.0f'):>26}  "
            f"{_median_range([r['rate'] / r['raw'] for r in runs], '.2f'):>18}  "
            + ", ".join(f"{v:.1f}" for v in cpu.values())
        )
    split_of = (
        "floor-parquet",
        "source-parquet",
        "source-parquet-all-columns",
        "source-noop",
        "sink",
    )
    for kind in split_of:
        if results.get(kind):
            print(f"\n{kind}:")
            print_split(results[kind])
    print("\nload average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
