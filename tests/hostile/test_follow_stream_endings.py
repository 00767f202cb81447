"""Follow streams that end by their deadline or by the client's cancel, while messages flow to
them, must never take the server down.

The server once died of SIGSEGV here: when a call ended while grpc was writing its response (a
stream waiting on flow control when the deadline struck, or the client cancelled), the access
log read the call's peer() after grpc had released the call. Only the logging of the ending
differs between log levels (CANCELLED is logged at debug, DEADLINE_EXCEEDED at info), so every
level is tried, against a real `leaseq serve` process on every store.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from leaseq.server.wakeups import Waker
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.hostile.conftest import url_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROUNDS = 4
STREAMS = 12  # per round and per ending: 12 by deadline and 12 by cancel
BATCH = 100
BODY = b"m" * 512  # a few batches fill a stream's flow-control window


async def _send_until(stub: pb_grpc.QueueServiceStub, stop: asyncio.Event) -> int:
    """A sender of 100-message batches, as fast as the server takes them."""
    batches = 0
    entries = [pb.SendEntry(body=BODY) for _ in range(BATCH)]
    while not stop.is_set():
        await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries), timeout=30)
        batches += 1
    return batches


def _follow(stub: pb_grpc.QueueServiceStub, **kwargs: object) -> grpc.aio.UnaryStreamCall:
    return stub.GetMessages(
        pb.GetMessagesRequest(queue="q", max_messages=BATCH, follow=True, max_outstanding=100_000),
        **kwargs,
    )


async def _ended_by_deadline(
    stub: pb_grpc.QueueServiceStub, index: int, reads: int
) -> grpc.StatusCode:
    """Reads a few responses, then stops reading: the server's writes wait on flow control when
    the deadline strikes (the ending that crashed)."""
    call = _follow(stub, timeout=0.5 + 0.05 * index)
    try:
        for _ in range(reads):
            await call.read()
        return await call.code()
    except grpc.aio.AioRpcError as error:
        return error.code()


async def _ended_by_cancel(stub: pb_grpc.QueueServiceStub, reads: int) -> grpc.StatusCode:
    call = _follow(stub, timeout=60)
    for _ in range(reads):
        await call.read()
    call.cancel()
    return await call.code()


async def _churn(target: str) -> tuple[list[grpc.StatusCode], int]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        await stub.CreateQueue(pb.CreateQueueRequest(name="q"))
        stop = asyncio.Event()
        sender = asyncio.create_task(_send_until(stub, stop))
        codes: list[grpc.StatusCode] = []
        try:
            for _ in range(ROUNDS):
                codes += await asyncio.gather(
                    *(_ended_by_deadline(stub, i, reads=i % 3) for i in range(STREAMS)),
                    *(_ended_by_cancel(stub, reads=i % 3) for i in range(STREAMS)),
                )
        finally:
            stop.set()
            batches = await sender
    return codes, batches


def _fail_if_dead(process: subprocess.Popen[bytes], error: grpc.aio.AioRpcError) -> None:
    """A call that failed because the server is gone: say so, with its exit status."""
    try:
        returncode = process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return
    pytest.fail(f"the server died (exit {returncode}); a call saw {error.code().name}")


def _health(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        return (
            health_pb2_grpc.HealthStub(channel)
            .Check(health_pb2.HealthCheckRequest(), timeout=10)
            .status
        )


@pytest.mark.parametrize(
    "store,level",
    [
        *(("memory", level) for level in ("debug", "info", "warning", "error")),
        ("sqlite", "debug"),
        ("sqlite", "info"),
        ("postgres", "debug"),
        ("postgres", "info"),
    ],
)
def test_follow_streams_ending_under_traffic_leave_the_server_up(
    serve_process, serve_quiet, tmp_path: Path, store: str, level: str
) -> None:
    launcher = serve_process if level in ("debug", "info") else serve_quiet
    for url in url_for(store, tmp_path):
        server = launcher(tmp_path, url, "--log-level", level).start()
        try:
            codes, batches = asyncio.run(_churn(server.target))
        except grpc.aio.AioRpcError as error:
            _fail_if_dead(server.process, error)
            raise
        assert server.process.poll() is None, f"the server died: exit {server.process.returncode}"
        assert _health(server.health_target) == health_pb2.HealthCheckResponse.SERVING
        assert batches > 0
        assert set(codes) <= {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
        assert codes.count(grpc.StatusCode.DEADLINE_EXCEEDED) == ROUNDS * STREAMS
        server.terminate()
        assert server.wait(30) == 0
        # The access log still has what it needs of each ending (the peer, read at the start).
        # A stream that ended before the server took it up (a loaded machine) is never logged.
        ended = [
            json.loads(line)
            for line in server.stderr().splitlines()
            if line.startswith("{") and '"leaseq.access"' in line and "GetMessages" in line
        ]
        logged = {"debug": {"DEADLINE_EXCEEDED", "CANCELLED"}, "info": {"DEADLINE_EXCEEDED"}}
        assert {e["rpc_code"] for e in ended} == logged.get(level, set()), [
            e for e in ended if e["rpc_code"] == "OK"
        ]
        assert all(e["peer"].startswith("ipv4:127.0.0.1:") for e in ended)


async def test_a_waiting_stream_is_cancelled_even_when_rung_at_that_instant() -> None:
    """The lost cancel under the test above: a client's cancel that reached a stream parked in
    Waker.wait while a send rang it was swallowed (asyncio.wait_for before Python 3.12), and the
    stream of an ended call kept leasing messages until the server drained."""
    for timeout in (None, 30.0):
        waker = Waker()
        parked = asyncio.create_task(waker.wait(timeout))
        while not waker.sleeping:
            await asyncio.sleep(0)
        waker.ring()
        parked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parked
        assert not waker.sleeping
