"""boto3 against leaseq's SQS endpoint, and leaseq's gRPC client, in the same run on one server.

    python -m leaseq.bench.sqs [--store sqlite|memory|postgres] [--batch 10] [--duration 10]

Starts `leaseq serve --sqs-listen` (bench/launcher.py: a SQLite file in a temp directory by
default), then runs the same loop through each dialect, one client in this process, one after the
other: send a batch, receive that many (long poll, 1 s wait), delete them by receipt in one batch
call. msgs/s counts messages completed (sent, received and deleted) in the measured window after
a warm-up; p50/p99 are of one whole cycle; server CPU is the server process's CPU time per message
(the figure other load on the machine disturbs least).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from leaseq.bench.cpu import CpuMeter
from leaseq.bench.launcher import free_port, running_server, store_for


def _sqs_cycle(
    endpoint: str, batch: int, body: str
) -> tuple[Callable[[], int], Callable[[], None]]:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(retries={"max_attempts": 1}),
    )
    url = client.create_queue(QueueName=f"bench-sqs-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    entries = [{"Id": str(i), "MessageBody": body} for i in range(batch)]

    def cycle() -> int:
        client.send_message_batch(QueueUrl=url, Entries=entries)
        got: list[Any] = []
        while len(got) < batch:
            reply = client.receive_message(
                QueueUrl=url, MaxNumberOfMessages=min(10, batch - len(got)), WaitTimeSeconds=1
            )
            got += reply.get("Messages", [])
        client.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
            ],
        )
        return len(got)

    return cycle, client.close


def _grpc_cycle(target: str, batch: int, body: str) -> tuple[Callable[[], int], Callable[[], None]]:
    from leaseq.client import QueueClient

    client = QueueClient(target)
    queue = f"bench-grpc-{uuid.uuid4().hex[:8]}"
    client.create_queue(queue)
    bodies = [body.encode()] * batch

    def cycle() -> int:
        client.send_batch(queue, bodies)
        got: list[Any] = []
        while len(got) < batch:
            got += client.receive(queue, batch - len(got), wait_time=1)
        client.delete(queue, got)
        return len(got)

    return cycle, client.close


def _measure(cycle: Callable[[], int], pid: int | None, warmup: float, duration: float) -> dict:
    end = time.monotonic() + warmup
    while time.monotonic() < end:
        cycle()
    meter = CpuMeter(pid)
    latencies: list[float] = []
    messages = 0
    meter.start()
    started = time.monotonic()
    while time.monotonic() - started < duration:
        t0 = time.monotonic()
        messages += cycle()
        latencies.append(time.monotonic() - t0)
    elapsed = time.monotonic() - started
    meter.stop()
    latencies.sort()
    return {
        "msgs_per_s": messages / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "server_cpu_us_per_msg": (meter.cpu_seconds or 0) / max(messages, 1) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="sqlite")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument(
        "--batch", type=int, default=10, help="messages per cycle (SQS: at most 10)"
    )
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    args = parser.parse_args()
    if not 1 <= args.batch <= 10:
        parser.error("--batch is 1..10 (an SQS batch holds at most 10 entries)")
    body = "x" * args.body_bytes
    port = free_port()
    with (
        store_for(args.store, args.dsn, "benchsqs") as url,
        running_server(url, ("--sqs-listen", f"127.0.0.1:{port}")) as server,
    ):
        rows = []
        for name, make in (
            ("SQS (boto3)", lambda: _sqs_cycle(f"http://127.0.0.1:{port}", args.batch, body)),
            ("gRPC (leaseq.client)", lambda: _grpc_cycle(server.target, args.batch, body)),
        ):
            cycle, close = make()
            try:
                rows.append((name, _measure(cycle, server.pid, args.warmup, args.duration)))
            finally:
                close()
    print(
        f"store {args.store}, batch {args.batch}, {args.body_bytes} B bodies, "
        f"{args.duration:g} s each, one client"
    )
    print(
        f"{'dialect':<22} {'msgs/s':>9} {'cycle p50':>10} {'cycle p99':>10} {'server CPU/msg':>15}"
    )
    for name, r in rows:
        print(
            f"{name:<22} {r['msgs_per_s']:>9,.0f} {r['p50_ms']:>8.2f}ms {r['p99_ms']:>8.2f}ms "
            f"{r['server_cpu_us_per_msg']:>12,.0f} us"
        )


if __name__ == "__main__":
    main()
