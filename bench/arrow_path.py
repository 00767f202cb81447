"""Arrow bulk path benchmark: the client's own conversions, the Arrow path against the protobuf
path, and whether Arrow IPC on the wire would pay.

Usage: python -m leaseq.bench.arrow_path [--store sqlite|memory] [--batch 1000] [--seconds 10]
                                     [--body 1024] [--codec]

0. The client's conversions alone (no server), per row, over batches of 10,000 messages of
   --body bytes, with the compiled module (``leaseq.client._wire_arrow_c``) and with its
   pure-Python twins:
     receive  GetMessagesResponse wire bytes -> MESSAGE_SCHEMA record batch
     send     Arrow table -> SendMessagesRequest wire bytes (cutting included)
              + SendMessagesResponse wire bytes -> send result columns
     ack      receipt column -> DeleteMessagesRequest wire bytes
              + DeleteMessagesResponse wire bytes -> ack result columns
   `--codec` prints this part only.

Then it starts `leaseq serve` in a child process on a temp store (SQLite by default, durable):

1. End to end, one client, batch N (a full cycle per batch: send N, receive N, ack N), over the
   same RPCs (repeated protobuf fields on the wire):
     arrow    send_arrow(table) -> receive_arrow(N) -> ack_arrow(receipts)      (pyarrow tables)
     protobuf send_batch(bodies) -> receive(N) -> delete(receipts)             (Message objects)
   Prints messages/s of each (a message counted once per full cycle) and the client process's
   CPU time per message (gRPC's threads included; the server is another process).

2. The wire format, per batch of N: the encode and decode work that would change if the
   messages travelled as an Arrow IPC stream in a bytes field instead of repeated fields, both
   ends included (the server's conversion from store values and back, the client's to and from
   Arrow). Everything else of a cycle (the store, gRPC, the network) stays the same, so the
   projected cycle time with IPC is the measured Arrow cycle minus the difference. The IPC side
   is counted generously: its server side skips the per-entry validation the protobuf side
   does. The decision rule: put Arrow IPC in the proto only if the projection beats
   the measured Arrow path by at least 1.3x.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

import pyarrow as pa

from leaseq.bench.launcher import running_server
from leaseq.client import QueueClient, _wire_arrow, arrow
from leaseq.server import convert, domain, validation
from leaseq.server.domain import rules
from leaseq.v1 import queue_service_pb2 as pb

THRESHOLD = 1.3


# --- 1. end to end ---------------------------------------------------------------------------


def cycle_arrow(client: QueueClient, queue: str, table: pa.Table) -> None:
    client.send_arrow(queue, table)
    batch = table.num_rows
    got: list[pa.Table] = []
    while sum(t.num_rows for t in got) < batch:
        got.append(client.receive_arrow(queue, batch - sum(t.num_rows for t in got), wait_time=1))
    client.ack_arrow(queue, pa.concat_tables(got))


def cycle_protobuf(client: QueueClient, queue: str, bodies: list[bytes]) -> None:
    client.send_batch(queue, bodies)
    got: list[str] = []
    while len(got) < len(bodies):
        got += [m.receipt for m in client.receive(queue, len(bodies) - len(got), wait_time=1)]
    client.delete(queue, got)


def rate(step: Callable[[], None], batch: int, seconds: float) -> tuple[float, float]:
    """(messages/s, client CPU seconds per message)."""
    step()  # warm up (first calls, caches)
    done, started, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds:
        step()
        done += batch
    return done / (time.perf_counter() - started), (time.process_time() - cpu) / done


# --- 0. the client's conversions -------------------------------------------------------------


def sample_response(count: int, body: int) -> bytes:
    """A GetMessagesResponse as the server sends it: ids, receipts, three times, a count."""
    response = pb.GetMessagesResponse()
    response.server_time.seconds = 1_800_000_000
    for i in range(count):
        m = response.messages.add(
            message_id=f"{i:08x}-5e1f-4c2b-9a77-0123456789ab",
            receipt=f"AQAAAAAAAAAB{i:012d}.lease.{i:016x}",
            body=os.urandom(body),
            delivery_count=1,
        )
        for name in ("enqueued_at", "visible_at", "expires_at"):
            getattr(m, name).seconds = 1_800_000_000 + i
            getattr(m, name).nanos = 123_456_789
    return response.SerializeToString()


def client_codecs(body: int, count: int = 10_000) -> dict[str, float]:
    """Seconds per row of each client conversion, as used by send_arrow/receive_arrow/
    ack_arrow (the implementation chosen by _wire_arrow.NATIVE)."""
    raw = sample_response(count, body)
    table = pa.table(
        {
            "body": pa.array([os.urandom(body) for _ in range(count)], pa.binary()),
            "dedup_id": pa.array([f"write-1:0:{i}" for i in range(count)], pa.string()),
        }
    )
    batch = _wire_arrow.decode_messages(raw, arrow.MESSAGE_SCHEMA)
    receipts = batch.column("receipt")
    send_answer = pb.SendMessagesResponse(
        results=[
            pb.SendResult(id=str(i), message_id=m)
            for i, m in enumerate(batch.column("message_id").to_pylist())
        ]
    ).SerializeToString()
    ack_answer = pb.DeleteMessagesResponse(
        results=[
            pb.DeleteResult(receipt=r, status=pb.LEASE_STATUS_OK) for r in receipts.to_pylist()
        ]
    ).SerializeToString()

    def send() -> None:
        plan = arrow.send_arrow(
            "q",
            table,
            body_column="body",
            attributes_column=None,
            channel_column=None,
            delay_column=None,
            ttl_column=None,
            dedup_id_column="dedup_id",
            id_column=None,
            max_batch_bytes=arrow.DEFAULT_BATCH_BYTES,
        )
        drive(plan, send_answer)

    def ack() -> None:
        drive(arrow.ack_arrow("q", receipts, max_batch_bytes=arrow.DEFAULT_BATCH_BYTES), ack_answer)

    return {
        "receive": per_batch(lambda: _wire_arrow.decode_messages(raw, arrow.MESSAGE_SCHEMA))
        / count,
        "send": per_batch(send) / count,
        "ack": per_batch(ack) / count,
    }


def drive(plan: object, answer: bytes) -> object:
    """Run a plan whose every call gets ``answer`` (the wire bytes of a response)."""
    try:
        plan.send(None)  # type: ignore[attr-defined]
        while True:
            plan.send(answer)  # type: ignore[attr-defined]
    except StopIteration as done:
        return done.value


def print_codecs(body: int) -> None:
    print(f"client conversions alone, per row (batches of 10,000 messages, body={body}B):")
    rows = {}
    if _wire_arrow.NATIVE:
        rows["compiled"] = client_codecs(body)
    native = _wire_arrow.NATIVE
    _wire_arrow.NATIVE = False
    try:
        rows["pure Python"] = client_codecs(body)
    finally:
        _wire_arrow.NATIVE = native
    for name, costs in rows.items():
        print(
            f"  {name:<12}: "
            + "   ".join(f"{step} {us * 1e6:5.2f} us" for step, us in costs.items())
        )


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


def delivered_from(messages: list[pb.ReceivedMessage]) -> list[domain.DeliveredMessage]:
    return [
        domain.DeliveredMessage(
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


def codec_costs(
    table: pa.Table, sample: list[pb.ReceivedMessage]
) -> dict[str, tuple[float, float]]:
    """Per batch: {step: (protobuf seconds, Arrow IPC seconds)}, both ends of the wire."""
    config = domain.QueueConfig()
    delivered = delivered_from(sample)
    receipts = [m.receipt for m in sample]
    time_type = pa.timestamp("us", tz="UTC")

    def send_protobuf() -> None:
        [request] = arrow._send_requests(
            "q",
            table,
            arrow.DEFAULT_BATCH_BYTES,
            body_column="body",
            attributes_column=None,
            channel_column=None,
            delay_column=None,
            ttl_column=None,
            dedup_id_column=None,
            id_column=None,
        )  # client: wire bytes
        parsed = pb.SendMessagesRequest.FromString(request.raw)  # server
        for i, e in enumerate(parsed.entries):  # the service's parse, then the core's check
            entry = validation.send_entry(e, i)
            assert isinstance(entry, domain.NewMessage)
            rules.check_message(entry, i, config)

    def send_ipc() -> None:
        raw = in_bytes_field(ipc_bytes(table))  # client
        rows = out_of_bytes_field(raw)  # server: no validation counted (generous)
        [domain.NewMessage(body=b) for b in rows.column("body").to_pylist()]

    def receive_protobuf() -> None:
        # The server's own path (service.QueueService._batches): wire bytes per message, one
        # parse into the response, which gRPC serializes again.
        encode = convert.ReceivedEncoder()
        response = convert.ReceivedEncoder.response([encode(m) for m in delivered])
        raw = response.SerializeToString()
        _wire_arrow.decode_messages(raw, arrow.MESSAGE_SCHEMA)  # client

    def receive_ipc() -> None:
        ms = delivered  # server: store values -> columns -> IPC
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([m.message_id for m in ms], pa.string()),
                pa.array([m.receipt for m in ms], pa.string()),
                pa.array([m.body for m in ms], pa.binary()),
                pa.array(
                    [list(m.attributes.items()) for m in ms], pa.map_(pa.string(), pa.string())
                ),
                pa.array([m.channel for m in ms], pa.string()),
                pa.array([int(m.enqueued_at * 1e6) for m in ms], time_type),
                pa.array([int(m.visible_at * 1e6) for m in ms], time_type),
                pa.array([int(m.expires_at * 1e6) for m in ms], time_type),
                pa.array([m.delivery_count for m in ms], pa.int32()),
            ],
            schema=arrow.MESSAGE_SCHEMA,
        )
        out_of_bytes_field(in_bytes_field(ipc_bytes(batch)))  # client: zero-copy read

    receipt_column = pa.array(receipts, pa.string())

    def ack_protobuf() -> None:
        raw = _wire_arrow.encode_delete("q", receipt_column, 0, len(receipts))  # client
        list(pb.DeleteMessagesRequest.FromString(raw).receipts)  # server

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
    parser.add_argument(
        "--codec", action="store_true", help="only the client's conversions (no server)"
    )
    args = parser.parse_args()
    print_codecs(args.body)
    if args.codec:
        return
    batch = args.batch
    bodies = [os.urandom(args.body) for _ in range(batch)]
    table = pa.table({"body": pa.array(bodies, pa.binary())})

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db" if args.store == "sqlite" else "memory://"
        with running_server(url) as server:
            with QueueClient(server.target, timeout=60) as client:
                print(
                    f"store={args.store} batch={batch} body={args.body}B seconds={args.seconds} "
                    "(send+receive+ack cycle, one client)"
                )
                client.create_queue("bench-arrow")
                client.create_queue("bench-protobuf")
                arrow_rate, arrow_cpu = rate(
                    lambda: cycle_arrow(client, "bench-arrow", table), batch, args.seconds
                )
                print(
                    f"  arrow path    : {arrow_rate:>10,.0f} msgs/s   client CPU "
                    f"{arrow_cpu * 1e6:6.2f} us/msg (send+receive+ack)"
                )
                protobuf_rate, protobuf_cpu = rate(
                    lambda: cycle_protobuf(client, "bench-protobuf", bodies), batch, args.seconds
                )
                print(
                    f"  protobuf path : {protobuf_rate:>10,.0f} msgs/s   client CPU "
                    f"{protobuf_cpu * 1e6:6.2f} us/msg"
                )
                # Real messages (ids, receipts, times) for the wire-format comparison.
                client.send_batch("bench-arrow", bodies)
                sample: list[pb.ReceivedMessage] = []
                while len(sample) < batch:
                    for reply in client._stub.GetMessages(
                        pb.GetMessagesRequest(queue="bench-arrow", max_messages=batch - len(sample))
                    ):
                        sample.extend(reply.messages)

    costs = codec_costs(table, sample)
    print(f"wire format, per batch of {batch} (encode + decode, both ends):")
    saved = 0.0
    for step, (as_protobuf, as_ipc) in costs.items():
        saved += as_protobuf - as_ipc
        print(
            f"  {step:<8}: repeated fields {as_protobuf * 1e3:7.2f} ms   "
            f"Arrow IPC bytes {as_ipc * 1e3:7.2f} ms"
        )
    cycle = batch / arrow_rate
    projected = cycle - saved
    speedup = cycle / projected if projected > 0 else float("inf")
    print(
        f"  arrow cycle {cycle * 1e3:.1f} ms per batch; with IPC on the wire about "
        f"{projected * 1e3:.1f} ms ({batch / projected:,.0f} msgs/s): {speedup:.2f}x"
    )
    verdict = "add it to the proto" if speedup >= THRESHOLD else "convert at the edge"
    print(f"  decision (>= {THRESHOLD}x needed): {verdict}")


if __name__ == "__main__":
    main()
