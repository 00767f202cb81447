"""Arrow bulk path benchmark: the Arrow path against the protobuf path, and whether Arrow IPC on
the wire would pay.

Usage: python scripts/bench_arrow.py [--store sqlite|memory] [--batch 1000] [--seconds 10]
                                     [--body 1024]

Starts `leaseq serve` in a child process on a temp store (SQLite by default, durable), then:

1. End to end, one client, batch N (a full cycle per batch: send N, receive N, ack N), over the
   same RPCs (repeated protobuf fields on the wire):
     arrow    send_arrow(table) -> receive_arrow(N) -> ack_arrow(receipts)      (pyarrow tables)
     protobuf send_batch(bodies) -> receive(N) -> delete(receipts)             (Message objects)
   Prints messages/s of each (a message counted once per full cycle).

2. The wire format, per batch of N: the encode and decode work that would change if the
   messages travelled as an Arrow IPC stream in a bytes field instead of repeated fields, both
   ends included (the server's conversion from store values and back, the client's to and from
   Arrow). Everything else of a cycle (the store, gRPC, the network) stays the same, so the
   projected cycle time with IPC is the measured Arrow cycle minus the difference. The IPC side
   is counted generously: its server side skips the per-entry validation the protobuf side
   does. The decision rule (issue #3): put Arrow IPC in the proto only if the projection beats
   the measured Arrow path by at least 1.3x.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leaseq.client import QueueClient  # noqa: E402
from leaseq.client import arrow  # noqa: E402
from leaseq.server import convert, validation  # noqa: E402
from leaseq.server.store import base  # noqa: E402
from leaseq.v1 import queue_service_pb2 as pb  # noqa: E402
from tests.support.process import ServerProcess, free_port  # noqa: E402

THRESHOLD = 1.3


# --- 1. end to end ---------------------------------------------------------------------------


def cycle_arrow(client: QueueClient, queue: str, table: pa.Table) -> None:
    client.send_arrow(queue, table)
    batch, got = table.num_rows, []
    while sum(t.num_rows for t in got) < batch:
        got.append(client.receive_arrow(queue, batch - sum(t.num_rows for t in got), wait_time=1))
    client.ack_arrow(queue, pa.concat_tables(got))


def cycle_protobuf(client: QueueClient, queue: str, bodies: list[bytes]) -> None:
    client.send_batch(queue, bodies)
    got: list[str] = []
    while len(got) < len(bodies):
        got += [m.receipt for m in client.receive(queue, len(bodies) - len(got), wait_time=1)]
    client.delete(queue, got)


def rate(step: Callable[[], None], batch: int, seconds: float) -> float:
    step()  # warm up (first calls, caches)
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        step()
        done += batch
    return done / (time.perf_counter() - started)


# --- 2. the wire format ----------------------------------------------------------------------


def per_batch(work: Callable[[], object], seconds: float = 1.0) -> float:
    """Seconds one call of work takes (best of a few rounds, for a noisy machine)."""
    work()
    best = float("inf")
    for _ in range(5):
        n, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds / 5:
            work()
            n += 1
        best = min(best, (time.perf_counter() - started) / n)
    return best


def ipc_bytes(batch: pa.RecordBatch | pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write(batch)
    return sink.getvalue().to_pybytes()


def in_bytes_field(payload: bytes) -> bytes:
    # The IPC stream as it would travel: one bytes field of a protobuf message.
    return pb.SendEntry(body=payload).SerializeToString()


def out_of_bytes_field(raw: bytes) -> pa.Table:
    return pa.ipc.open_stream(pb.SendEntry.FromString(raw).body).read_all()


def delivered_from(messages: list[pb.ReceivedMessage]) -> list[base.DeliveredMessage]:
    return [
        base.DeliveredMessage(
            key=i,
            message_id=m.message_id,
            receipt=m.receipt,
            body=m.body,
            attributes=dict(m.attributes),
            channel=m.channel,
            enqueued_at=convert.timestamp_to_seconds(m.enqueued_at),
            expires_at=convert.timestamp_to_seconds(m.expires_at),
            visible_at=convert.timestamp_to_seconds(m.visible_at),
            delivery_count=m.delivery_count,
            last_error=m.last_error,
        )
        for i, m in enumerate(messages)
    ]


def codec_costs(table: pa.Table, sample: list[pb.ReceivedMessage]) -> dict[str, tuple[float, float]]:
    """Per batch: {step: (protobuf seconds, Arrow IPC seconds)}, both ends of the wire."""
    config = base.QueueConfig()
    delivered = delivered_from(sample)
    receipts = [m.receipt for m in sample]
    time_type = pa.timestamp("us", tz="UTC")

    def send_protobuf() -> None:
        [(request, _)] = arrow._send_requests(
            "q", table, arrow.DEFAULT_BATCH_BYTES, body_column="body", attributes_column=None,
            channel_column=None, delay_column=None, ttl_column=None, dedup_id_column=None,
            id_column=None,
        )
        raw = request.SerializeToString()  # client
        parsed = pb.SendMessagesRequest.FromString(raw)  # server
        [validation.send_entry(e, i, config) for i, e in enumerate(parsed.entries)]

    def send_ipc() -> None:
        raw = in_bytes_field(ipc_bytes(table))  # client
        rows = out_of_bytes_field(raw)  # server: no validation counted (generous)
        [base.NewMessage(body=b) for b in rows.column("body").to_pylist()]

    def receive_protobuf() -> None:
        converted = [convert.received_to_proto(m) for m in delivered]  # server
        [m.ByteSize() for m in converted]  # the server's response cutting
        raw = pb.GetMessagesResponse(messages=converted).SerializeToString()
        arrow.record_batch(pb.GetMessagesResponse.FromString(raw).messages)  # client

    def receive_ipc() -> None:
        ms = delivered  # server: store values -> columns -> IPC
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([m.message_id for m in ms], pa.string()),
                pa.array([m.receipt for m in ms], pa.string()),
                pa.array([m.body for m in ms], pa.binary()),
                pa.array([list(m.attributes.items()) for m in ms], pa.map_(pa.string(), pa.string())),
                pa.array([m.channel for m in ms], pa.string()),
                pa.array([int(m.enqueued_at * 1e6) for m in ms], time_type),
                pa.array([int(m.visible_at * 1e6) for m in ms], time_type),
                pa.array([int(m.expires_at * 1e6) for m in ms], time_type),
                pa.array([m.delivery_count for m in ms], pa.int32()),
            ],
            schema=arrow.MESSAGE_SCHEMA,
        )
        out_of_bytes_field(in_bytes_field(ipc_bytes(batch)))  # client: zero-copy read

    def ack_protobuf() -> None:
        raw = pb.DeleteMessagesRequest(queue="q", receipts=receipts).SerializeToString()
        list(pb.DeleteMessagesRequest.FromString(raw).receipts)

    def ack_ipc() -> None:
        column = pa.table({"receipt": pa.array(receipts, pa.string())})
        out_of_bytes_field(in_bytes_field(ipc_bytes(column))).column("receipt").to_pylist()

    return {
        "send": (per_batch(send_protobuf), per_batch(send_ipc)),
        "receive": (per_batch(receive_protobuf), per_batch(receive_ipc)),
        "ack": (per_batch(ack_protobuf), per_batch(ack_ipc)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--body", type=int, default=1024, help="body bytes")
    args = parser.parse_args()
    batch = args.batch
    bodies = [os.urandom(args.body) for _ in range(batch)]
    table = pa.table({"body": pa.array(bodies, pa.binary())})

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db" if args.store == "sqlite" else "memory://"
        server = ServerProcess(url, free_port(), Path(tmp) / "server.log")
        server.start()
        try:
            with QueueClient(server.target, timeout=60) as client:
                print(
                    f"store={args.store} batch={batch} body={args.body}B seconds={args.seconds} "
                    "(send+receive+ack cycle, one client)"
                )
                client.create_queue("bench-arrow")
                client.create_queue("bench-protobuf")
                arrow_rate = rate(lambda: cycle_arrow(client, "bench-arrow", table), batch,
                                  args.seconds)
                print(f"  arrow path    : {arrow_rate:>10,.0f} msgs/s")
                protobuf_rate = rate(
                    lambda: cycle_protobuf(client, "bench-protobuf", bodies), batch, args.seconds
                )
                print(f"  protobuf path : {protobuf_rate:>10,.0f} msgs/s")
                # Real messages (ids, receipts, times) for the wire-format comparison.
                client.send_batch("bench-arrow", bodies)
                sample: list[pb.ReceivedMessage] = []
                while len(sample) < batch:
                    for reply in client._stub.GetMessages(
                        pb.GetMessagesRequest(queue="bench-arrow", max_messages=batch - len(sample))
                    ):
                        sample.extend(reply.messages)
        finally:
            server.terminate()

    costs = codec_costs(table, sample)
    print(f"wire format, per batch of {batch} (encode + decode, both ends):")
    saved = 0.0
    for step, (as_protobuf, as_ipc) in costs.items():
        saved += as_protobuf - as_ipc
        print(f"  {step:<8}: repeated fields {as_protobuf * 1e3:7.2f} ms   "
              f"Arrow IPC bytes {as_ipc * 1e3:7.2f} ms")
    cycle = batch / arrow_rate
    projected = cycle - saved
    speedup = cycle / projected if projected > 0 else float("inf")
    print(f"  arrow cycle {cycle * 1e3:.1f} ms per batch; with IPC on the wire about "
          f"{projected * 1e3:.1f} ms ({batch / projected:,.0f} msgs/s): {speedup:.2f}x")
    verdict = "add it to the proto" if speedup >= THRESHOLD else "convert at the edge"
    print(f"  decision (>= {THRESHOLD}x needed): {verdict}")


if __name__ == "__main__":
    main()
