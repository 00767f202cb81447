"""Send latency with many waiting receivers (when every send woke every waiter, it grew with them).

Usage: python -m leaseq.bench.wakeups [--store sqlite|memory|postgres] [--waiters 0 1000 5000]
                                       [--kind follow|poll] [--sends 200] [--batch 100]

Starts `leaseq serve` in a child process on a temp store, then for each number of waiters:
a child process opens that many receivers on one queue (follow streams, or long polls that
re-poll after each answer), each taking up to 10 messages and acking what it gets; once they
are parked, this process sends `--sends` batches of `--batch` messages, one at a time with a
short pause (so the receivers are parked again before the next send), and times each send.
Prints one line per run: waiters, median and p90 of the send's round trip, and the server's
CPU seconds per send.

A send should cost about the same whatever the number of parked waiters: it wakes about as
many as it has messages (see server/longpoll.py), not all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import time
from pathlib import Path

import grpc
from google.protobuf.duration_pb2 import Duration

from leaseq.bench.launcher import running_server, store_for
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc

QUEUE = "wakeups"
STREAMS_PER_CHANNEL = 200  # the server allows 256 concurrent calls on one connection
PAUSE = 0.05  # between sends: the receivers that got messages ack them and park again
SETTLE = 3.0  # after the receivers opened: time to park (the server shows no gauge outside)


async def _receivers(target: str, count: int, kind: str, ready) -> None:
    channels = [
        grpc.aio.insecure_channel(target) for _ in range(max(1, -(-count // STREAMS_PER_CHANNEL)))
    ]
    stubs = [pb_grpc.QueueServiceStub(c) for c in channels]

    async def ack(stub, messages) -> None:
        await stub.DeleteMessages(
            pb.DeleteMessagesRequest(queue=QUEUE, receipts=[m.receipt for m in messages])
        )

    async def follow(stub) -> None:
        request = pb.GetMessagesRequest(
            queue=QUEUE, max_messages=10, follow=True, visibility_timeout=Duration(seconds=60)
        )
        async for response in stub.GetMessages(request):
            await ack(stub, response.messages)

    async def poll(stub) -> None:
        request = pb.GetMessagesRequest(
            queue=QUEUE,
            max_messages=10,
            wait_time=Duration(seconds=20),
            visibility_timeout=Duration(seconds=60),
        )
        while True:
            async for response in stub.GetMessages(request):
                if response.messages:
                    await ack(stub, response.messages)

    run = follow if kind == "follow" else poll
    tasks = [asyncio.create_task(run(stubs[i % len(stubs)])) for i in range(count)]
    ready.set()
    try:
        await asyncio.gather(*tasks)
    except grpc.aio.AioRpcError:
        pass  # the server stopped


def _receiver_process(target: str, count: int, kind: str, ready) -> None:
    asyncio.run(_receivers(target, count, kind, ready))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(target: str, pid: int, waiters: int, kind: str, sends: int, batch: int) -> str:
    channel = grpc.insecure_channel(target)
    stub = pb_grpc.QueueServiceStub(channel)
    stub.CreateQueue(pb.CreateQueueRequest(name=QUEUE))
    receivers = None
    try:
        if waiters:
            ready = multiprocessing.get_context("spawn").Event()
            receivers = multiprocessing.get_context("spawn").Process(
                target=_receiver_process, args=(target, waiters, kind, ready), daemon=True
            )
            receivers.start()
            ready.wait(60)
            time.sleep(SETTLE)
        request = pb.SendMessagesRequest(
            queue=QUEUE, entries=[pb.SendEntry(body=b"x" * 100)] * batch
        )
        for _ in range(5):  # warm-up
            stub.SendMessages(request)
            time.sleep(PAUSE)
        cpu = _cpu_seconds(pid)
        times = []
        for _ in range(sends):
            start = time.perf_counter()
            stub.SendMessages(request)
            times.append(time.perf_counter() - start)
            time.sleep(PAUSE)
        cpu = (_cpu_seconds(pid) - cpu) / sends
        times.sort()
        median = statistics.median(times) * 1000
        p90 = times[int(len(times) * 0.9)] * 1000
        return (
            f"{waiters:>6} {kind} waiters: send of {batch}: median {median:7.2f} ms,"
            f" p90 {p90:7.2f} ms, server CPU {cpu * 1000:6.2f} ms per send"
        )
    finally:
        if receivers is not None:
            receivers.kill()
            receivers.join()
        stub.DeleteQueue(pb.DeleteQueueRequest(name=QUEUE))
        channel.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="sqlite", help="sqlite, memory, postgres or a URL")
    parser.add_argument(
        "--dsn",
        default=os.environ.get(
            "LEASEQ_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument("--waiters", type=int, nargs="+", default=[0, 1000, 5000])
    parser.add_argument("--kind", choices=["follow", "poll"], default="follow")
    parser.add_argument("--sends", type=int, default=200)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    for waiters in args.waiters:
        # A fresh server per run: nothing left over from the previous one's receivers.
        with (
            store_for(args.store, args.dsn, prefix="wakeups") as url,
            running_server(url) as server,
        ):
            assert server.pid is not None
            print(
                _run(server.target, server.pid, waiters, args.kind, args.sends, args.batch),
                flush=True,
            )


if __name__ == "__main__":
    main()
