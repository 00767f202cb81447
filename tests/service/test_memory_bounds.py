"""What one call, one follow stream and the whole server hold in memory.

Over a real `leaseq serve` process (SQLite store): its RSS comes from /proc/<pid>/status. The
messages are sent, the server is restarted over the same file (so its RSS is not inflated by the
sends) and its peak (VmHWM) reset through /proc/<pid>/clear_refs: the growth measured is the
receive's or the peek's alone. The bounds (README, Security, "Limits before
work"): a store read takes at most 8 MiB of messages plus one message and is sent before the next
one is read; the server holds at most --max-response-mib of read-but-unsent messages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.server.budget import CALL_BYTES
from leaseq.server.limits import Limits
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.process import ServerProcess, server_process
from tests.support.server import running_server

MIB = 1024 * 1024
BODY = 8 * MIB  # the largest message a queue accepts (max_message_bytes 8 MiB)
COUNT = 60  # 480 MiB of messages
PER_SEND = 7  # 56 MiB per SendMessages: under the 64 MiB request limit

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * MIB),
    ("grpc.max_receive_message_length", 64 * MIB),
]
# A client that never reads: no receive window beyond one byte, so nothing the server sends on its
# streams completes (the server's `yield` waits), and everything such a stream leased is unsent.
NOT_READING = CHANNEL_OPTIONS + [("grpc.http2.lookahead_bytes", 1), ("grpc.http2.bdp_probe", 0)]

RECEIVE_GROWTH_BOUND = 256 * MIB  # for one receive of 480 MiB (before the bounds: about 1.2 GiB)
PEEK_GROWTH_BOUND = 128 * MIB  # for one peek over 480 MiB (before: it read all 60 messages)
# One redrive of 480 MiB: SQLite's 64 MiB page cache and a little (before: about 1.5 GB, read
# bodies and an in-memory savepoint journal of every page it rewrote).
REDRIVE_GROWTH_BOUND = 128 * MIB
MESSAGES_PER_CHUNK = -(-CALL_BYTES // BODY)  # a store read stops at the message reaching it
SETTLE_SECONDS = 60.0  # a safety net for the server's releases over a loaded machine


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) * 1024
    return values


def _reset_peak(pid: int) -> int:
    """Reset VmHWM to the current RSS (Linux: clear_refs 5); returns that RSS."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status(pid)["VmRSS"]


def _peak_growth(pid: int, before: int) -> int:
    return _status(pid)["VmHWM"] - before


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServerProcess]:
    with server_process(f"sqlite:///{tmp_path / 'q.db'}", tmp_path) as server:
        yield server


def _fill_and_restart(server: ServerProcess, queue: str) -> None:
    """COUNT messages of 8 MiB in the store, then a fresh server process over it: its RSS is not
    inflated by the sends' freed memory, so the growth measured is the call's."""
    with grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS) as channel:
        _fill(pb_grpc.QueueServiceStub(channel), queue)
    _restart(server)


def _restart(server: ServerProcess) -> None:
    assert server.terminate() == 0
    server.start()


def _fill(stub: pb_grpc.QueueServiceStub, queue: str, count: int = COUNT) -> None:
    stub.CreateQueue(
        pb.CreateQueueRequest(name=queue, config=pb.QueueConfig(max_message_bytes=8 * MIB))
    )
    for start in range(0, count, PER_SEND):
        entries = [
            pb.SendEntry(id=str(i), body=bytes([65 + i % 26]) * BODY)
            for i in range(start, min(start + PER_SEND, count))
        ]
        reply = stub.SendMessages(pb.SendMessagesRequest(queue=queue, entries=entries))
        assert all(r.message_id for r in reply.results)


def _stats(stub: pb_grpc.QueueServiceStub, queue: str) -> pb.QueueStats:
    return stub.GetQueueStats(pb.GetQueueStatsRequest(name=queue)).stats


def _lease(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


def test_a_peek_and_a_receive_over_480_mib_stay_under_their_bounds(serve: ServerProcess) -> None:
    """One fill (480 MiB take a while to write), two fresh servers over it: first a peek of 60,
    then a receive of 60."""
    _fill_and_restart(serve, "big")
    with grpc.insecure_channel(serve.target, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        before = _reset_peak(serve.process.pid)
        page = stub.PeekMessages(pb.PeekMessagesRequest(queue="big", max_messages=COUNT))
        growth = _peak_growth(serve.process.pid, before)
        print(
            f"peek of {COUNT} x 8 MiB: RSS {before // MIB} MiB, peak +{growth // MIB} MiB,"
            f" {len(page.messages)} messages on the page"
        )
        assert growth < PEEK_GROWTH_BOUND
        assert len(page.messages) == MESSAGES_PER_CHUNK
        assert page.next_page_token  # the rest is on the next pages

        # A redrive moves messages by key: it reads no bodies, whatever their sizes.
        stub.CreateQueue(
            pb.CreateQueueRequest(name="moved", config=pb.QueueConfig(max_message_bytes=8 * MIB))
        )
        before = _reset_peak(serve.process.pid)
        moved = stub.RedriveMessages(pb.RedriveMessagesRequest(queue="big", destination="moved"))
        growth = _peak_growth(serve.process.pid, before)
        print(f"redrive of {COUNT} x 8 MiB: RSS {before // MIB} MiB, peak +{growth // MIB} MiB")
        assert moved.moved_count == COUNT
        assert growth < REDRIVE_GROWTH_BOUND
        back = stub.RedriveMessages(pb.RedriveMessagesRequest(queue="moved", destination="big"))
        assert back.moved_count == COUNT

    _restart(serve)
    with grpc.insecure_channel(serve.target, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        before = _reset_peak(serve.process.pid)
        responses = list(
            stub.GetMessages(
                pb.GetMessagesRequest(
                    queue="big",
                    max_messages=COUNT,
                    wait_time=_lease(0),
                    visibility_timeout=_lease(600),
                )
            )
        )
        growth = _peak_growth(serve.process.pid, before)
        received = [m for r in responses for m in r.messages]
        print(
            f"receive of {COUNT} x 8 MiB: RSS {before // MIB} MiB, peak +{growth // MIB} MiB,"
            f" {len(responses)} responses"
        )
        assert growth < RECEIVE_GROWTH_BOUND
        # Every message came, in chunks sent one after the other.
        assert len(received) == COUNT
        assert len({m.message_id for m in received}) == COUNT
        assert len(responses) >= COUNT // MESSAGES_PER_CHUNK


def _wait_for_no_leases(stub: pb_grpc.QueueServiceStub, queue: str) -> pb.QueueStats:
    """The stats once no message is leased (at most SETTLE_SECONDS: then as they are)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        stats = _stats(stub, queue)
        if stats.leased == 0 or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def _open_unread_follow_streams(target: str, count: int) -> tuple[list[grpc.Channel], list]:
    channels, calls = [], []
    for _ in range(count):
        channel = grpc.insecure_channel(target, options=NOT_READING)
        stub = pb_grpc.QueueServiceStub(channel)
        calls.append(
            stub.GetMessages(
                pb.GetMessagesRequest(
                    queue="big", max_messages=COUNT, follow=True, visibility_timeout=_lease(600)
                )
            )
        )
        channels.append(channel)
    return channels, calls


def _wait_for_leases(stub: pb_grpc.QueueServiceStub, queue: str, at_least: int) -> int:
    leased = 0

    def enough() -> bool:
        nonlocal leased
        leased = _stats(stub, queue).leased
        return leased >= at_least

    _wait_until(enough)
    return leased


def _wait_until(condition: Callable[[], bool]) -> None:
    """Look until condition() holds: the server's streams run on their own, seen only through its
    answers. The deadline is a safety net for a loaded machine, not a timing assertion."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while not condition():
        assert time.monotonic() < deadline, "the server did not get there"
        time.sleep(0.05)


def test_unread_follow_streams_lease_one_chunk_and_release_it_when_they_end(
    serve: ServerProcess,
) -> None:
    streams = 3
    with grpc.insecure_channel(serve.target, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        _fill(stub, "big", 20)
        before = _reset_peak(serve.process.pid)
        channels, calls = _open_unread_follow_streams(serve.target, streams)
        try:
            # Each stream leased one chunk and waits, in its `yield`, for its client to read: it
            # leases nothing more (before: the first stream leased all 20 at once).
            leased = _wait_for_leases(stub, "big", streams * MESSAGES_PER_CHUNK)
            growth = _peak_growth(serve.process.pid, before)
            print(
                f"{streams} unread follow streams: {leased} messages leased,"
                f" peak RSS +{growth // MIB} MiB"
            )
            assert leased == streams * MESSAGES_PER_CHUNK
        finally:
            for call in calls:
                call.cancel()
            for chan in channels:
                chan.close()
        # Gone: what they leased and never sent is visible again now, not in 600 s.
        stats = _wait_for_no_leases(stub, "big")
        assert (stats.leased, stats.visible) == (0, 20)


def test_the_server_budget_bounds_what_all_unread_streams_hold() -> None:
    """Chunks of 8 MiB, a server budget of 24 MiB: a read reserves 8 MiB plus one message of the
    queue's largest (8 MiB) first, then holds what it read. The first stream holds one 8 MiB
    message, which leaves less than 16 MiB: the other three wait for room, leasing nothing, and
    read once the first one is gone. In-process, to see the streams wait."""
    limits = Limits(call_bytes=8 * MIB, response_bytes=24 * MIB)
    with running_server("memory://", limits=limits) as server:
        budget = server.app.service.budget

        async def waiting() -> int:
            return budget.waits

        with grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            _fill(stub, "big", 20)
            channels, calls = _open_unread_follow_streams(server.target, 4)
            try:
                _wait_until(lambda: server.call(waiting) >= 3)  # three streams wait for room
                assert _stats(stub, "big").leased == 1
            finally:
                for call in calls:
                    call.cancel()
                for chan in channels:
                    chan.close()
            server.call(server.app.service.settle)
            stats = _stats(stub, "big")
            assert (stats.leased, stats.visible) == (0, 20)

            async def in_use() -> int:
                return budget.in_use

            _wait_until(lambda: server.call(in_use) == 0)
