"""Quick cycle benchmark: send + receive + delete over loopback gRPC against a real `leaseq serve`.

Usage: python scripts/bench_cycle.py [--store sqlite] [--batch 1 --batch 1000] [--seconds 10]

Starts `leaseq serve` in a child process on a temp store (SQLite by default, durable), then one
client process loop: send a batch of 100-byte bodies, receive that many, delete them by receipt.
Prints messages/s (one message counted once per full cycle) for each batch size. The full
`leaseq bench` tool comes with the performance issue; this is the quick figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leaseq.v1 import queue_service_pb2 as pb  # noqa: E402
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.support.process import free_port, ServerProcess  # noqa: E402

from google.protobuf.duration_pb2 import Duration  # noqa: E402


def cycle(stub, queue: str, batch: int, seconds: float) -> float:
    body = b"x" * 100
    entries = [pb.SendEntry(id=str(i), body=body) for i in range(batch)]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    batches = args.batch or [1, 1000]
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db" if args.store == "sqlite" else "memory://"
        server = ServerProcess(url, free_port(), Path(tmp) / "server.log")
        server.start()
        try:
            options = [("grpc.max_receive_message_length", 64 << 20)]
            with grpc.insecure_channel(server.target, options=options) as channel:
                stub = pb_grpc.QueueServiceStub(channel)
                print(f"store={args.store} seconds={args.seconds} body=100B (send+receive+delete cycle)")
                for batch in batches:
                    queue = f"bench{batch}"
                    stub.CreateQueue(pb.CreateQueueRequest(name=queue))
                    rate = cycle(stub, queue, batch, args.seconds)
                    print(f"batch {batch:>6}: {rate:>10,.0f} msgs/s")
        finally:
            server.terminate()


if __name__ == "__main__":
    main()
