"""SIGTERM to a real `leaseq serve` with a follow stream, a long poll and a big unary call in
flight: health turns NOT_SERVING at once (both ports), a new call is refused with UNAVAILABLE,
the follow stream and the long poll end cleanly (OK), the unary call finishes, the process exits
0 within the grace period, and every acknowledged message is still in the store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from leaseq.server.service import SERVICE_NAME
from leaseq.server.store import open_store
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc

from .conftest import Serve

GRACE = 15.0
SAFETY = 20.0  # bounds a broken wake-up so the test fails instead of hanging
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]
# Big enough that the server works on it for a good fraction of a second (10 MB into SQLite).
BIG_BATCH, BIG_BODY = 10_000, 1000


async def until_in_flight(server: Serve, **expected: float) -> None:
    """Wait until the server's own gauges show the calls running: the only way to know, from
    outside, that the server has really started handling them. The name[] filter keeps each
    scrape away from the store."""
    names = ("leaseq_rpcs_in_flight", "leaseq_receive_streams_in_flight")

    def seen() -> dict[str, float | None]:
        samples = server.scrape(*names)
        return {
            "send": samples.get_value(
                "leaseq_rpcs_in_flight", service=SERVICE_NAME, method="SendMessages"
            ),
            "follow": samples.get_value("leaseq_receive_streams_in_flight", mode="follow"),
            "long_poll": samples.get_value("leaseq_receive_streams_in_flight", mode="long_poll"),
        }

    async def poll() -> None:
        while True:
            current = await asyncio.to_thread(seen)
            if all(current[k] == v for k, v in expected.items()):
                return
            await asyncio.sleep(0.002)

    await asyncio.wait_for(poll(), SAFETY)


async def all_message_ids(db: Path) -> tuple[set[str], int]:
    """Every message id in queue q of the stopped server's SQLite file (any state), and how many
    are leased."""
    store = open_store(f"sqlite:///{db}")
    await store.open()
    try:
        ids: set[str] = set()
        after = None
        while True:
            page = await store.peek("q", 10_000, "", True, True, after)
            ids |= {m.message_id for m in page.messages}
            if page.next_cursor is None:
                break
            after = page.next_cursor
        stats = await store.stats("q")
        assert stats.total == len(ids)
        return ids, stats.leased
    finally:
        await store.close()


@pytest.mark.slow
async def test_sigterm_drains_calls_in_flight_and_loses_nothing(serve_process, tmp_path) -> None:
    db = tmp_path / "leaseq.db"
    server = await asyncio.to_thread(
        serve_process(tmp_path, f"sqlite:///{db}", "--grace", str(GRACE)).start
    )
    async with (
        grpc.aio.insecure_channel(server.target, options=CHANNEL_OPTIONS) as channel,
        grpc.aio.insecure_channel(server.health_target) as health_channel,
    ):
        stub = pb_grpc.QueueServiceStub(channel)
        await stub.CreateQueue(pb.CreateQueueRequest(name="q"))
        await stub.CreateQueue(pb.CreateQueueRequest(name="idle"))
        acknowledged: set[str] = set()
        for _batch in range(2):
            reply = await stub.SendMessages(
                pb.SendMessagesRequest(
                    queue="q",
                    entries=[pb.SendEntry(id=str(i), body=b"small %d" % i) for i in range(100)],
                )
            )
            assert not any(r.HasField("error") for r in reply.results)
            acknowledged |= {r.message_id for r in reply.results}

        # A follow stream holding 10 leases (then paused by flow control), a long poll waiting
        # on an empty queue, health watched on both ports.
        follow = stub.GetMessages(
            pb.GetMessagesRequest(queue="q", max_messages=10, follow=True, max_outstanding=10)
        )
        first = await asyncio.wait_for(follow.read(), SAFETY)
        assert len(first.messages) == 10
        long_poll = stub.GetMessages(
            pb.GetMessagesRequest(
                queue="idle", max_messages=1, wait_time=duration_pb2.Duration(seconds=30)
            )
        )
        watches = [
            health_pb2_grpc.HealthStub(ch).Watch(
                health_pb2.HealthCheckRequest(service=SERVICE_NAME)
            )
            for ch in (health_channel, channel)
        ]
        for watch in watches:
            assert (await asyncio.wait_for(watch.read(), SAFETY)).status == SERVING
        await until_in_flight(server, follow=1, long_poll=1, send=0)

        # A unary call the server is working on when SIGTERM comes.
        big = stub.SendMessages(
            pb.SendMessagesRequest(
                queue="q",
                entries=[pb.SendEntry(id=str(i), body=bytes(BIG_BODY)) for i in range(BIG_BATCH)],
            )
        )
        await until_in_flight(server, send=1)
        signalled = time.monotonic()
        server.terminate()

        # Health flips at once, on the probe port and the main one; both watches then end.
        for watch in watches:
            assert (await asyncio.wait_for(watch.read(), SAFETY)).status == NOT_SERVING
            assert await asyncio.wait_for(watch.read(), SAFETY) is grpc.aio.EOF
        # New calls are refused.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetQueue(pb.GetQueueRequest(name="q"), timeout=SAFETY)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

        # The call in flight finishes: every entry enqueued.
        big_reply = await asyncio.wait_for(big, SAFETY)
        assert len(big_reply.results) == BIG_BATCH
        assert not any(r.HasField("error") for r in big_reply.results)
        acknowledged |= {r.message_id for r in big_reply.results}
        # The follow stream and the long poll end cleanly, not cut off.
        assert await asyncio.wait_for(follow.read(), SAFETY) is grpc.aio.EOF
        assert await follow.code() == grpc.StatusCode.OK
        answers = [r async for r in long_poll]
        assert [len(a.messages) for a in answers] == [0]
        assert await long_poll.code() == grpc.StatusCode.OK

    exit_code = await asyncio.to_thread(server.wait, SAFETY + GRACE)
    elapsed = time.monotonic() - signalled
    assert exit_code == 0, server.stderr()[-3000:]
    assert elapsed < GRACE, f"exit took {elapsed:.1f}s, grace {GRACE}s"
    assert "Traceback" not in server.stderr()

    # Nothing acknowledged is lost; the follow stream's 10 leases simply run out later.
    stored, leased = await all_message_ids(db)
    assert stored == acknowledged
    assert len(stored) == 200 + BIG_BATCH
    assert leased == 10
