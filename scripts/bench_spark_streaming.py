#!/usr/bin/env python3
"""Throughput of the "leaseq" Structured Streaming source on local[2]: N messages preloaded
into a queue of a real `leaseq serve` child process, read by a streaming query with
Trigger.AvailableNow (micro-batches of --max-per-trigger, each partition one receive attempt,
commit = DeleteMessages by attempt ids) into a sink, until the queue is empty.

    python scripts/bench_spark_streaming.py                     # 500,000 messages, SQLite
    python scripts/bench_spark_streaming.py --store memory --messages 200000 --sink noop

Prints rows/s over the query's wall time (start() to termination: query start-up, every
micro-batch, the flush batch that commits the last one) and over the micro-batches alone
(the sum of their triggerExecution times). Bodies are 100 bytes. Sinks: `parquet` (message_id,
body and delivery_count to parquet files, a realistic sink) and `noop` (Spark's no-op sink: the
source alone). The preload is not timed, and an untimed warm-up query into each measured sink
(--warmup messages, 100,000 by default) runs first: the JVM's JIT compilers otherwise spend
several us of CPU per row of the timed run on code the first micro-batches make hot. Checks at
the end: the queue is empty and the sink has every message once. Each run also prints where the
CPU went (scripts/_cpu.py: the server, Spark's JVM, its Python workers, this driver), in cores
busy on average and in us of CPU per row (what holds on a loaded machine), and the load
average.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cpu import cpu_by_role, delta  # noqa: E402
from _local_spark import local_spark  # noqa: E402  (scripts/ is on sys.path: the script's folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--partitions", type=int, default=2, help="numPartitions (minimum)")
    parser.add_argument("--max-per-trigger", type=int, default=50_000)
    parser.add_argument("--sink", choices=["parquet", "noop", "both"], default="both")
    parser.add_argument("--warmup", type=int, default=100_000,
                        help="messages of the untimed warm-up query into each sink")
    args = parser.parse_args()

    # Spark first, then any gRPC channel in this process (leaseq.spark_ext's start-up order).
    spark = local_spark(
        "leaseq-bench-streaming",
        **{"spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2"},
    )

    import pyarrow as pa

    from leaseq.client import QueueClient
    from leaseq.spark_ext import register
    from tests.support.process import ServerProcess, free_port

    register(spark)
    work = Path(tempfile.mkdtemp(prefix="leaseq-bench-streaming-"))
    store = f"sqlite:///{work}/bench.db" if args.store == "sqlite" else "memory://"
    server = ServerProcess(store, free_port(), work / "server.log")
    server.start()
    n = args.messages
    sinks = ["parquet", "noop"] if args.sink == "both" else [args.sink]
    # Untimed warm-up queries first (the JIT, Python workers, the gRPC channels).
    runs = [(f"warmup-{s}", s, min(n, args.warmup)) for s in sinks if args.warmup > 0]
    runs += [(s, s, n) for s in sinks]
    print(f"{n:,} messages of 100 bytes, {args.store} store, local[2], numPartitions "
          f"{args.partitions}, maxMessagesPerTrigger {args.max_per_trigger:,}, "
          f"Trigger.AvailableNow")
    try:
        with QueueClient(server.target) as client:
            for name, sink, n in runs:
                queue = f"bench-{name}"
                client.create_queue(queue)
                for start in range(0, n, 50_000):
                    stop = min(start + 50_000, n)
                    bodies = [f"{i:<100}".encode() for i in range(start, stop)]
                    client.send_arrow(queue, pa.table({"body": bodies}))
                assert client.stats(queue).visible == n

                stream = (spark.readStream.format("leaseq").option("target", server.target)
                          .option("queue", queue).option("numPartitions", args.partitions)
                          .option("maxMessagesPerTrigger", args.max_per_trigger).load()
                          .select("message_id", "body", "delivery_count"))
                out = work / f"sink-{name}"
                writer = (stream.writeStream.format(sink)
                          .option("checkpointLocation", str(work / f"checkpoint-{name}"))
                          .trigger(availableNow=True))
                if sink == "parquet":
                    writer = writer.option("path", str(out))
                assert server.process is not None
                t0, c0 = time.perf_counter(), cpu_by_role(server.process.pid)
                query = writer.start()
                query.awaitTermination()
                wall = time.perf_counter() - t0
                cpu = delta(c0, cpu_by_role(server.process.pid))
                if query.exception() is not None:
                    raise RuntimeError(str(query.exception()))
                progress = query.recentProgress
                rows = sum(p["numInputRows"] for p in progress)
                batch_s = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1e3
                batches = sum(1 for p in progress if p["numInputRows"])
                stats = client.stats(queue)
                assert rows == n, f"read {rows} of {n}"
                assert stats.total == 0, f"{stats.total} messages left in the queue"
                if sink == "parquet":
                    written = spark.read.parquet(str(out))
                    assert written.count() == n
                    assert written.select("message_id").distinct().count() == n
                if name.startswith("warmup"):
                    continue
                print(f"  {sink:>7} sink: {n / wall:>9,.0f} rows/s over the query's wall time "
                      f"({wall:.1f} s); {n / batch_s:>9,.0f} rows/s over its {batches} data "
                      f"micro-batches ({batch_s:.1f} s)")
                print("           CPU: " + ", ".join(f"{k} {v / wall:.2f}" for k, v in cpu.items())
                      + " (cores busy, average); load average "
                      + " ".join(f"{x:.2f}" for x in os.getloadavg()))
                print("           CPU per row: "
                      + ", ".join(f"{k} {v / n * 1e6:.1f} us" for k, v in cpu.items()))
    finally:
        server.terminate()
        spark.stop()


if __name__ == "__main__":
    main()
