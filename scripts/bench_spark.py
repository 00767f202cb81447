#!/usr/bin/env python3
"""Spark helpers' throughput: write_queue and consume_process_ack over N messages on local[2],
against a real `leaseq serve` child process, and a naive per-message loop measured in the same
run for comparison (one receive and one delete per message inside a mapInPandas).

    python scripts/bench_spark.py                      # 1,000,000 messages, SQLite store
    python scripts/bench_spark.py --store memory --messages 200000 --naive-sample 5000

The naive loop is slow (two round trips per message), so it runs over a sample
(--naive-sample messages, default 5,000) and its rate is extrapolated as rows/s: the ratio
compares rates, not times over the same count. Bodies are 100 bytes; consume_process_ack's fn
writes each batch to a parquet file (a realistic sink), the naive loop writes nothing.

Each phase also prints where the CPU went (scripts/_cpu.py): the server, Spark's JVM, its
Python workers and this driver, in cores busy on average, and the load average at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cpu import cpu_by_role, delta  # noqa: E402
from _local_spark import local_spark  # noqa: E402  (scripts/ is on sys.path: the script's folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--naive-sample", type=int, default=5_000)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--partitions", type=int, default=2, help="consumer tasks")
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument(
        "--receive-ahead",
        type=int,
        default=None,
        help="consume_process_ack's receive_ahead (default: its own)",
    )
    parser.add_argument(
        "--acks-in-flight",
        type=int,
        default=None,
        help="consume_process_ack's acks_in_flight (default: its own)",
    )
    parser.add_argument(
        "--sequential-too",
        action="store_true",
        help="also consume a second write with receive_ahead=0, "
        "acks_in_flight=0 (the unpipelined loop), side by side in this run",
    )
    args = parser.parse_args()

    # Spark first, then any gRPC channel in this process (leaseq.spark_ext's start-up order).
    spark = local_spark("leaseq-bench")
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from leaseq.client import QueueClient
    from leaseq.spark_ext import consume_process_ack, write_queue
    from tests.support.process import ServerProcess, free_port

    work = Path(tempfile.mkdtemp(prefix="leaseq-bench-spark-"))
    store = f"sqlite:///{work}/bench.db" if args.store == "sqlite" else "memory://"
    server = ServerProcess(store, free_port(), work / "server.log")
    server.start()
    target = server.target
    n = args.messages
    assert server.process is not None
    cpu: dict[str, dict[str, float]] = {}

    def measured(name: str, before: dict[str, float], wall: float) -> None:
        cpu[name] = {k: v / wall for k, v in delta(before, cpu_by_role(server.process.pid)).items()}

    try:
        with QueueClient(target) as client:
            client.create_queue("bench", visibility_timeout=120)
            client.create_queue("naive", visibility_timeout=120)

            # write_queue ---------------------------------------------------------------
            df = (
                spark.range(0, n, numPartitions=2)
                .select(F.rpad(F.col("id").cast("string"), 100, "x").alias("body"))
                .cache()
            )
            df.count()  # materialise the input outside the timing
            t0, c0 = time.perf_counter(), cpu_by_role(server.process.pid)
            written = write_queue(df, "bench", target=target)
            write_s = time.perf_counter() - t0
            measured("write_queue", c0, write_s)
            assert written.enqueued == n, written

            # consume_process_ack into parquet -------------------------------------------
            sink = work / "sink"
            sink.mkdir()
            sink_dir = str(sink)

            def fn(table: pa.Table) -> None:
                pq.write_table(
                    table.select(["message_id", "body"]), f"{sink_dir}/{uuid.uuid4().hex}.parquet"
                )

            pipeline = {
                k: v
                for k, v in (
                    ("receive_ahead", args.receive_ahead),
                    ("acks_in_flight", args.acks_in_flight),
                )
                if v is not None
            }

            def consume(**pipeline_settings: int) -> Any:
                return consume_process_ack(
                    spark,
                    "bench",
                    fn,
                    target=target,
                    num_partitions=args.partitions,
                    batch_size=args.batch_size,
                    visibility_timeout=120,
                    wait_time=0.5,
                    arrow=True,
                    **pipeline_settings,
                )

            t0, c0 = time.perf_counter(), cpu_by_role(server.process.pid)
            consumed = consume(**pipeline)
            consume_s = time.perf_counter() - t0
            measured("consume_process_ack", c0, consume_s)
            assert consumed.acked == n, consumed
            if args.sequential_too:
                write_queue(df, "bench", target=target)
                t0, c0 = time.perf_counter(), cpu_by_role(server.process.pid)
                sequential = consume(receive_ahead=0, acks_in_flight=0)
                sequential_s = time.perf_counter() - t0
                measured("consume sequential", c0, sequential_s)
                assert sequential.acked == n, sequential

            # naive: one receive and one delete per message, in a mapInPandas -----------------
            sample = min(args.naive_sample, n)
            client.send_arrow("naive", df.limit(sample).toArrow())

            def naive(frames):
                import pandas as pd

                with QueueClient(target) as c:
                    done = 0
                    for frame in frames:
                        for _ in range(len(frame)):
                            msgs = c.receive("naive", 1, wait_time=1)
                            if msgs:
                                c.delete("naive", msgs[0].receipt)
                                done += 1
                    yield pd.DataFrame({"done": [done]})

            seeds = spark.range(0, sample, numPartitions=2)
            t0, c0 = time.perf_counter(), cpu_by_role(server.process.pid)
            naive_done = seeds.mapInPandas(naive, "done long").groupBy().sum("done").first()[0]
            naive_s = time.perf_counter() - t0
            measured("naive", c0, naive_s)
            assert naive_done == sample, naive_done
    finally:
        server.terminate()
        spark.stop()

    write_rate, consume_rate, naive_rate = n / write_s, n / consume_s, sample / naive_s
    print(f"store={args.store} messages={n:,} body=100 B local[2] consumer tasks={args.partitions}")
    print(f"write_queue          {write_rate:>10,.0f} rows/s  ({write_s:.1f} s)")
    print(f"consume_process_ack  {consume_rate:>10,.0f} rows/s  ({consume_s:.1f} s, parquet sink)")
    if args.sequential_too:
        print(
            f"  sequential (receive_ahead=0, acks_in_flight=0) {n / sequential_s:>10,.0f} rows/s"
            f"  ({sequential_s:.1f} s): pipelined / sequential = {sequential_s / consume_s:.2f}x"
        )
    print(
        f"naive per-message    {naive_rate:>10,.0f} rows/s  ({sample:,} messages in {naive_s:.1f} s,"
        " extrapolated as a rate)"
    )
    print(f"consume_process_ack / naive = {consume_rate / naive_rate:.1f}x")
    phases = {
        k: sum(p[k] for p in consumed.per_partition)
        for k in ("receive_seconds", "fn_seconds", "settle_seconds")
    }
    print(
        "  consume_process_ack's tasks spent (summed over tasks): "
        + ", ".join(f"{k.removesuffix('_seconds')} {v:.1f} s" for k, v in phases.items())
    )
    seconds = {
        "write_queue": (write_s, n),
        "consume_process_ack": (consume_s, n),
        "naive": (naive_s, sample),
    }
    if args.sequential_too:
        seconds["consume sequential"] = (sequential_s, n)
    for name, roles in cpu.items():
        wall, rows = seconds[name]
        print(
            f"  CPU during {name}: "
            + ", ".join(f"{k} {v:.2f}" for k, v in roles.items())
            + " (cores busy, average); per row: "
            + ", ".join(f"{k} {v * wall / rows * 1e6:.1f} us" for k, v in roles.items())
        )
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
