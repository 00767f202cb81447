"""Quick benchmark over loopback gRPC against a real `leaseq serve`.

Usage: python scripts/bench_cycle.py [--store sqlite|memory|postgres] [--batch 1 --batch 1000]
                                     [--seconds 10] [--consumers 1 --consumers 4]

Starts `leaseq serve` in a child process on a temp store (SQLite by default, durable; with
--store postgres a fresh schema in --dsn's database, dropped afterwards), then measures:

- without --consumers, the cycle: one client loop sends a batch of 100-byte bodies, receives that
  many and deletes them by receipt. Messages/s, one message counted once per full cycle, for each
  --batch.
- with --consumers, the two halves apart, for each --batch B:
    send:    one client sends batches of B for --seconds (msgs/s);
    consume: for each --consumers N, N clients (threads, a channel each) receive(B) and delete
             the receipts until --seconds pass or the backlog is empty (msgs/s, all together).
  The backlog for the consume phase is filled beforehand (not timed) with --backlog messages.

scripts/bench_postgres.py runs the PostgreSQL figures of the store's note.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leaseq.v1 import queue_service_pb2 as pb  # noqa: E402
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.support.process import free_port, ServerProcess  # noqa: E402

from google.protobuf.duration_pb2 import Duration  # noqa: E402

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
]
BODY = b"x" * 100


def cycle(stub, queue: str, batch: int, seconds: float) -> float:
    entries = [pb.SendEntry(id=str(i), body=BODY) for i in range(batch)]
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        stub.SendMessages(pb.SendMessagesRequest(queue=queue, entries=entries))
        got = []
        while len(got) < batch:
            for reply in stub.GetMessages(
                pb.GetMessagesRequest(
                    queue=queue, max_messages=batch - len(got), wait_time=Duration(seconds=1)
                )
            ):
                got += [m.receipt for m in reply.messages]
        stub.DeleteMessages(pb.DeleteMessagesRequest(queue=queue, receipts=got))
        done += batch
    return done / (time.perf_counter() - started)


def send_rate(stub, queue: str, batch: int, seconds: float) -> tuple[float, int]:
    """Batches of `batch` sent back to back by one client: (msgs/s, messages sent)."""
    entries = [pb.SendEntry(id=str(i), body=BODY) for i in range(batch)]
    sent = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        stub.SendMessages(pb.SendMessagesRequest(queue=queue, entries=entries))
        sent += batch
    return sent / (time.perf_counter() - started), sent


def fill(stub, queue: str, count: int) -> None:
    entries = [pb.SendEntry(id=str(i), body=BODY) for i in range(1000)]
    while count > 0:
        n = min(count, len(entries))
        stub.SendMessages(pb.SendMessagesRequest(queue=queue, entries=entries[:n]))
        count -= n


def consume_rate(target: str, queue: str, batch: int, consumers: int, seconds: float) -> float:
    """`consumers` clients receive(batch) + delete until time is up or the queue is empty."""
    counts = [0] * consumers
    last_done = [0.0] * consumers
    start = threading.Barrier(consumers + 1)
    started = 0.0

    def consume(index: int) -> None:
        with grpc.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            start.wait()
            while time.perf_counter() - started < seconds:
                receipts = [
                    m.receipt
                    for reply in stub.GetMessages(
                        pb.GetMessagesRequest(
                            queue=queue, max_messages=batch, wait_time=Duration(seconds=0)
                        )
                    )
                    for m in reply.messages
                ]
                if not receipts:
                    break  # the backlog is used up
                stub.DeleteMessages(pb.DeleteMessagesRequest(queue=queue, receipts=receipts))
                counts[index] += len(receipts)
                last_done[index] = time.perf_counter()

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(consumers)]
    for thread in threads:
        thread.start()
    started = time.perf_counter()
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = max(last_done) - started
    return sum(counts) / elapsed if elapsed > 0 else 0.0


def store_url(args: argparse.Namespace, tmp: str) -> tuple[str, str | None]:
    """The server's store URL, and the PostgreSQL schema to drop afterwards."""
    if args.store == "sqlite":
        return f"sqlite:///{tmp}/bench.db", None
    if args.store == "memory":
        return "memory://", None
    schema = "bench_" + secrets.token_hex(6)
    separator = "&" if "?" in args.dsn else "?"
    return f"{args.dsn}{separator}schema={schema}&pool_max={args.pool_max}", schema


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["sqlite", "memory", "postgres"], default="sqlite")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("LEASEQ_TEST_POSTGRES_DSN") or DEFAULT_DSN,
        help="PostgreSQL database for --store postgres (default: $LEASEQ_TEST_POSTGRES_DSN or "
        f"{DEFAULT_DSN})",
    )
    parser.add_argument("--pool-max", type=int, default=10, help="--store postgres: pool size")
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--consumers", type=int, action="append", help="measure send and consume apart"
    )
    parser.add_argument("--backlog", type=int, default=200_000)
    args = parser.parse_args(argv)
    batches = args.batch or ([100] if args.consumers else [1, 1000])
    with tempfile.TemporaryDirectory() as tmp:
        url, schema = store_url(args, tmp)
        server = ServerProcess(url, free_port(), Path(tmp) / "server.log")
        server.start()
        try:
            with grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS) as channel:
                stub = pb_grpc.QueueServiceStub(channel)
                if not args.consumers:
                    print(f"store={args.store} seconds={args.seconds} body=100B"
                          " (send+receive+delete cycle)")
                    for batch in batches:
                        queue = f"bench{batch}"
                        stub.CreateQueue(pb.CreateQueueRequest(name=queue))
                        rate = cycle(stub, queue, batch, args.seconds)
                        print(f"batch {batch:>6}: {rate:>10,.0f} msgs/s")
                    return
                print(f"store={args.store} seconds={args.seconds} body=100B backlog={args.backlog}")
                for batch in batches:
                    queue = f"send{batch}"
                    stub.CreateQueue(pb.CreateQueueRequest(name=queue))
                    rate, _ = send_rate(stub, queue, batch, args.seconds)
                    print(f"send batch {batch:>5}, 1 client:           {rate:>9,.0f} msgs/s",
                          flush=True)
                    for consumers in args.consumers:
                        queue = f"consume{batch}x{consumers}"
                        stub.CreateQueue(pb.CreateQueueRequest(name=queue))
                        fill(stub, queue, args.backlog)
                        rate = consume_rate(server.target, queue, batch, consumers, args.seconds)
                        print(f"receive({batch})+delete, {consumers:>2} consumer(s): "
                              f"{rate:>9,.0f} msgs/s", flush=True)
        finally:
            server.terminate()
            if schema is not None:
                drop_schema(args.dsn, schema)


if __name__ == "__main__":
    main()
