"""The client processes. Each runs one `Job` in its own process (multiprocessing "spawn"), with
its own gRPC channel, and reports one dict of counts and latency samples.

The loops are kept lean: requests are built once, the raw generated stub is called (no retrying
client, no per-entry result checks; the run's accounting check, from the queue's stats, catches
what went wrong), and per operation only a clock read, an array append and a shared counter
store are added.

Timing: the driver writes `timing` = [start, begin, end, sent_at] (time.monotonic(), which is one
system-wide clock on Linux, so comparable across processes) and sets `start`. Work runs from start
to end; an operation counts when it completes within [begin, end] (begin - start is the
warm-up). `progress[index]` holds this worker's messages so far, for the progress bar.
"""

from __future__ import annotations

import asyncio
import struct
import time
import traceback
from array import array
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
]

RECEIVE_WAIT = Duration(seconds=1)
"""Wait of a cycle's receive: messages are there (this worker just sent them) unless another
consumer took them; then it waits for the next send."""

STARVED_AFTER = 30.0
"""A coupled cycle that finds nothing to receive this long has lost messages: fail loudly."""

WAKE_GAP = 0.02
"""wake: how long the sender waits after the long poll started before it sends, so that the
poll is parked on the server (an idle server parks it within a millisecond)."""

WAKE_LEASE = 0.1
"""wake: the lease whose expiry is timed (seconds)."""

LONG_POLL_WAIT = Duration(seconds=20)

STREAMS_PER_CHANNEL = 200
"""idle: follow streams per connection (the server allows 256 concurrent calls on one)."""


@dataclass(frozen=True)
class Job:
    kind: str  # send | cycle | produce | consume | wake_sender | wake_waiter | idle
    index: int
    target: str
    queue: str
    batch: int = 1
    body_bytes: int = 100
    streams: int = 0  # idle
    consume_only: bool = False  # consume: stop when the queue is empty (a prefilled backlog)
    conn: Any = None  # wake: the pipe between sender and waiter


def worker_main(job: Job, results, start, timing, progress) -> None:
    """Process entry point: connect, report ready, wait for the start, run, report."""
    try:
        runner = _RUNNERS[job.kind]
        result = runner(job, results, start, timing, progress)
        results.put((job.index, "ok", result))
    except BaseException:  # noqa: BLE001  (the driver shows it and fails the run)
        results.put((job.index, "error", traceback.format_exc()))


def _connect(target: str) -> tuple[grpc.Channel, pb_grpc.QueueServiceStub]:
    channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    grpc.channel_ready_future(channel).result(timeout=30)
    return channel, pb_grpc.QueueServiceStub(channel)


def _ready_then_wait(job: Job, results, start) -> None:
    results.put((job.index, "ready", None))
    start.wait()


def _body(size: int) -> bytes:
    return b"x" * size


def _result(lat: dict[str, array[float]], cpu: float, **counts: Any) -> dict[str, Any]:
    return {"latency": {k: v.tolist() for k, v in lat.items()}, "cpu_s": cpu, **counts}


# --- send, cycle, produce, consume ------------------------------------------------------------


def _run_send(job: Job, results, start, timing, progress) -> dict[str, Any]:
    """Batches of `batch` sent back to back; one latency sample per SendMessages."""
    channel, stub = _connect(job.target)
    request = pb.SendMessagesRequest(
        queue=job.queue, entries=[pb.SendEntry(body=_body(job.body_bytes))] * job.batch
    )
    send = stub.SendMessages
    mono, batch, index = time.monotonic, job.batch, job.index
    lat = array("d")
    _ready_then_wait(job, results, start)
    begin, end = timing[1], timing[2]
    sent = counted = 0
    cpu0: float | None = None
    while True:
        t0 = mono()
        if t0 >= end:
            break
        if cpu0 is None and t0 >= begin:
            cpu0 = time.process_time()
        send(request)
        t1 = mono()
        sent += batch
        progress[index] = sent
        if begin <= t1 <= end:
            counted += batch
            lat.append(t1 - t0)
    cpu = time.process_time() - cpu0 if cpu0 is not None else 0.0
    channel.close()
    return _result({job.kind: lat}, cpu, sent=sent, counted=counted)


def _receive_all(get, queue: str, first: pb.GetMessagesRequest, want: int) -> list[str]:
    """Receipts of exactly `want` messages (receives until that many came)."""
    receipts: list[str] = []
    request = first
    starved_since = None
    while True:
        got = 0
        for reply in get(request):
            receipts.extend([m.receipt for m in reply.messages])
            got += len(reply.messages)
        if len(receipts) >= want:
            return receipts
        if got:
            starved_since = None
        elif starved_since is None:
            starved_since = time.monotonic()
        elif time.monotonic() - starved_since > STARVED_AFTER:
            raise RuntimeError(f"cycle: {want - len(receipts)} sent messages never came back")
        request = pb.GetMessagesRequest(
            queue=queue, max_messages=want - len(receipts), wait_time=RECEIVE_WAIT
        )


def _run_cycle(job: Job, results, start, timing, progress) -> dict[str, Any]:
    """send(batch) -> receive that many -> delete them; one latency sample per full cycle."""
    channel, stub = _connect(job.target)
    send_request = pb.SendMessagesRequest(
        queue=job.queue, entries=[pb.SendEntry(body=_body(job.body_bytes))] * job.batch
    )
    receive_request = pb.GetMessagesRequest(
        queue=job.queue, max_messages=job.batch, wait_time=RECEIVE_WAIT
    )
    send, get, delete = stub.SendMessages, stub.GetMessages, stub.DeleteMessages
    mono, batch, index, queue = time.monotonic, job.batch, job.index, job.queue
    lat = array("d")
    _ready_then_wait(job, results, start)
    begin, end = timing[1], timing[2]
    sent = received = deleted = counted = 0
    cpu0: float | None = None
    while True:
        t0 = mono()
        if t0 >= end:
            break
        if cpu0 is None and t0 >= begin:
            cpu0 = time.process_time()
        send(send_request)
        sent += batch
        receipts = _receive_all(get, queue, receive_request, batch)
        received += len(receipts)
        delete(pb.DeleteMessagesRequest(queue=queue, receipts=receipts))
        deleted += len(receipts)
        t1 = mono()
        progress[index] = deleted
        if begin <= t1 <= end:
            counted += len(receipts)
            lat.append(t1 - t0)
    cpu = time.process_time() - cpu0 if cpu0 is not None else 0.0
    channel.close()
    return _result(
        {"cycle": lat}, cpu, sent=sent, received=received, deleted=deleted, counted=counted
    )


def _run_consume(job: Job, results, start, timing, progress) -> dict[str, Any]:
    """receive(batch) -> delete what came; one latency sample per receive+delete."""
    channel, stub = _connect(job.target)
    receive_request = pb.GetMessagesRequest(
        queue=job.queue,
        max_messages=job.batch,
        wait_time=Duration(seconds=0) if job.consume_only else RECEIVE_WAIT,
    )
    get, delete = stub.GetMessages, stub.DeleteMessages
    mono, index, queue = time.monotonic, job.index, job.queue
    lat = array("d")
    _ready_then_wait(job, results, start)
    begin, end = timing[1], timing[2]
    received = deleted = counted = 0
    exhausted = False
    last_done = 0.0
    cpu0: float | None = None
    while True:
        t0 = mono()
        if t0 >= end:
            break
        if cpu0 is None and t0 >= begin:
            cpu0 = time.process_time()
        receipts = [m.receipt for reply in get(receive_request) for m in reply.messages]
        if not receipts:
            if job.consume_only:
                exhausted = True  # the backlog is used up
                break
            continue
        received += len(receipts)
        delete(pb.DeleteMessagesRequest(queue=queue, receipts=receipts))
        deleted += len(receipts)
        t1 = mono()
        progress[index] = deleted
        if begin <= t1 <= end:
            counted += len(receipts)
            lat.append(t1 - t0)
            last_done = t1
    cpu = time.process_time() - cpu0 if cpu0 is not None else 0.0
    channel.close()
    return _result(
        {"receive_delete": lat},
        cpu,
        received=received,
        deleted=deleted,
        counted=counted,
        exhausted=exhausted,
        last_done=last_done,
    )


# --- wake -------------------------------------------------------------------------------------


def _run_wake_sender(job: Job, results, start, timing, progress) -> dict[str, Any]:
    """Drives the rounds; the waiter (another process) holds the long poll.

    First half of the measured time (after the warm-up), send-to-delivery: the waiter starts a
    long poll and says so, this process waits WAKE_GAP, reads the clock, sends one message
    carrying that instant, and the waiter reads the clock when the message arrives.
    Second half, lease expiry to redelivery: send one message, receive it here with a lease of
    WAKE_LEASE and keep it; the waiter's long poll gets it when the lease ends; the latency is
    its arrival (wall clock) minus the lease's end (visible_at, the server's wall clock: the same
    clock on loopback).
    """
    channel, stub = _connect(job.target)
    conn = job.conn
    pad = _body(max(0, job.body_bytes - 8))
    lease_request = pb.GetMessagesRequest(
        queue=job.queue,
        max_messages=1,
        visibility_timeout=Duration(nanos=int(WAKE_LEASE * 1e9)),
        wait_time=Duration(seconds=5),
    )
    _ready_then_wait(job, results, start)
    begin, end = timing[1], timing[2]
    middle = begin + (end - begin) / 2
    wake, expiry, send = array("d"), array("d"), array("d")
    rounds = 0
    while True:
        t_round = time.monotonic()
        # One expiry round at least, even when a loaded machine stretched the wake rounds
        # past the end: a run without it would have no figure for its second half.
        if t_round >= end and expiry:
            break
        if t_round < middle:
            conn.send("wait")
            conn.recv()  # the long poll has started
            time.sleep(WAKE_GAP)
            t0 = time.monotonic()
            body = struct.pack(">d", t0) + pad
            stub.SendMessages(
                pb.SendMessagesRequest(queue=job.queue, entries=[pb.SendEntry(body=body)])
            )
            t1 = time.monotonic()
            arrived_mono, _arrived_wall = conn.recv()
            if t0 >= begin:
                wake.append(arrived_mono - t0)
                send.append(t1 - t0)  # how much of that the send's own round trip took
        else:
            stub.SendMessages(
                pb.SendMessagesRequest(queue=job.queue, entries=[pb.SendEntry(body=pad)])
            )
            leased = [m for reply in stub.GetMessages(lease_request) for m in reply.messages]
            if len(leased) != 1:
                raise RuntimeError(f"wake: expected 1 leased message, got {len(leased)}")
            lease_end = leased[0].visible_at.seconds + leased[0].visible_at.nanos / 1e9
            conn.send("wait")
            conn.recv()
            _arrived_mono, arrived_wall = conn.recv()
            expiry.append(arrived_wall - lease_end)
        rounds += 1
        progress[job.index] = rounds
    conn.send("stop")
    channel.close()
    return _result(
        {"wake": wake, "expiry": expiry, "send": send},
        0.0,
        sent=rounds,
        deleted=rounds,
        counted=len(wake) + len(expiry),
    )


def _run_wake_waiter(job: Job, results, start, timing, progress) -> dict[str, Any]:
    """One long poll per round: start it, tell the sender, time the arrival, delete."""
    channel, stub = _connect(job.target)
    conn = job.conn
    request = pb.GetMessagesRequest(queue=job.queue, max_messages=1, wait_time=LONG_POLL_WAIT)
    _ready_then_wait(job, results, start)
    deleted = 0
    while conn.recv() == "wait":
        call = stub.GetMessages(request)  # the call starts now; reading it waits for the reply
        conn.send("started")
        messages: list[pb.ReceivedMessage] = []
        arrived = (0.0, 0.0)
        for reply in call:
            if reply.messages and not messages:
                arrived = (time.monotonic(), time.time())
            messages.extend(reply.messages)
        if len(messages) != 1:
            raise RuntimeError(f"wake: the long poll ended with {len(messages)} messages")
        stub.DeleteMessages(
            pb.DeleteMessagesRequest(queue=job.queue, receipts=[messages[0].receipt])
        )
        deleted += 1
        conn.send(arrived)
    channel.close()
    return _result({}, 0.0, received=deleted, counted=0)


# --- idle -------------------------------------------------------------------------------------


def _run_idle(job: Job, results, start, timing, progress) -> dict[str, Any]:
    return asyncio.run(_idle(job, results, start, timing, progress))


async def _idle(job: Job, results, start, timing, progress) -> dict[str, Any]:
    """`streams` follow streams (max 1 outstanding each) held open and idle. After the measured
    window the driver sends one message per stream: each stream must get exactly one, which shows
    every stream was live through the window."""
    request = pb.GetMessagesRequest(
        queue=job.queue,
        follow=True,
        max_messages=1,
        max_outstanding=1,
        visibility_timeout=Duration(seconds=600),
    )
    channels = []
    calls = []
    for first in range(0, job.streams, STREAMS_PER_CHANNEL):
        # A channel argument of its own and a local subchannel pool: one connection each
        # (channels with equal arguments would share one, and its 256-call limit).
        channel = grpc.aio.insecure_channel(
            job.target,
            options=CHANNEL_OPTIONS
            + [("grpc.use_local_subchannel_pool", 1), ("leaseq.bench.channel", first)],
        )
        channels.append(channel)
        stub = pb_grpc.QueueServiceStub(channel)
        for _ in range(min(STREAMS_PER_CHANNEL, job.streams - first)):
            calls.append(stub.GetMessages(request))
    arrivals: list[float] = []
    counts = [0] * len(calls)
    failures: list[str] = []
    done = asyncio.Event()

    async def read(i: int, call) -> None:
        try:
            async for reply in call:
                if reply.messages:
                    counts[i] += len(reply.messages)
                    arrivals.append(time.monotonic())
                    progress[job.index] = len(arrivals)
                    if len(arrivals) >= len(calls):
                        done.set()
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.CANCELLED:
                failures.append(f"{error.code().name}: {error.details()}")
        except Exception as error:  # noqa: BLE001
            failures.append(repr(error))

    readers = [asyncio.create_task(read(i, call)) for i, call in enumerate(calls)]
    for channel in channels:
        await channel.channel_ready()
    await asyncio.sleep(0.2)  # the calls are on their way before the warm-up starts
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, _ready_then_wait, job, results, start)
    begin, end = timing[1], timing[2]
    await asyncio.sleep(max(0.0, begin - time.monotonic()))
    cpu0 = time.process_time()
    await asyncio.sleep(max(0.0, end - time.monotonic()))
    cpu = time.process_time() - cpu0
    alive_at_end = sum(1 for r in readers if not r.done())
    # The driver now sends one message per stream.
    try:
        await asyncio.wait_for(done.wait(), timeout=30)
    except TimeoutError:
        pass
    for call in calls:
        call.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    for channel in channels:
        await channel.close()
    return {
        "latency": {},
        "cpu_s": cpu,
        "streams": len(calls),
        "alive_at_end": alive_at_end,
        "received": sum(counts),
        "streams_with_one": sum(1 for c in counts if c == 1),
        "last_arrival": max(arrivals) if arrivals else None,
        "failures": failures[:5],
        "counted": 0,
    }


_RUNNERS = {
    "send": _run_send,
    "produce": _run_send,
    "cycle": _run_cycle,
    "consume": _run_consume,
    "wake_sender": _run_wake_sender,
    "wake_waiter": _run_wake_waiter,
    "idle": _run_idle,
}
