"""`leaseq serve --workers 2`: two worker processes under one parent, sharing the listen port
(SO_REUSEPORT) over one PostgreSQL schema.

Which worker a connection lands on is the kernel's choice; each worker's log records carry its
index (`worker`) and the access log names the caller's request id, so the test learns where each
of its channels landed by a tagged probe call. Then: consumers on both workers receive and delete
every message exactly once under long leases (no duplicate delivery, no loss); a long poll on one
worker wakes on a send through the other; SIGTERM to the parent drains both and exits 0; a
second, separate server on the same port is refused; the SQLite store is refused with one line.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.postgres.test_processes import _cross_process_wake_up
from tests.support.postgres import store_url
from tests.support.process import ServerProcess, free_port

pytestmark = pytest.mark.slow

D = duration_pb2.Duration
MESSAGES = 4_000
CONSUMERS = 8
LEASE = D(seconds=600)  # longer than the test: a second delivery would be under a live lease
CHANNELS = 16  # enough that both workers get some (each lands on one with odds 1/2)
# A connection of its own per channel (gRPC shares one between equal channels by default).
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def _worker_of(log_path: Path, request_id: str, timeout: float = 10.0) -> int:
    """The worker whose access log has request_id (the record is written as the call ends)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log_path.read_text().splitlines():
            if request_id in line:
                record = json.loads(line)
                if record.get("request_id") == request_id and "worker" in record:
                    return int(record["worker"])
        time.sleep(0.05)
    raise AssertionError(f"no access log line for {request_id}")


@pytest.mark.timeout(300)
async def test_two_workers_share_one_port(schema: str, tmp_path: Path) -> None:
    server = ServerProcess(
        store_url(schema, pool_max=4),
        free_port(),
        tmp_path / "server.log",
        ("--workers", "2", "--log-level", "debug", "--log-format", "json"),
    )
    await asyncio.to_thread(server.start)
    try:
        channels = [
            grpc.aio.insecure_channel(server.target, options=OWN_CONNECTION)
            for _ in range(CHANNELS)
        ]
        stubs = [pb_grpc.QueueServiceStub(c) for c in channels]
        try:
            await stubs[0].CreateQueue(pb.CreateQueueRequest(name="work"))
            on: dict[int, list[pb_grpc.QueueServiceStub]] = {0: [], 1: []}
            for i, stub in enumerate(stubs):
                await stub.GetQueue(
                    pb.GetQueueRequest(name="work"), metadata=(("x-request-id", f"probe-{i}"),)
                )
                worker = await asyncio.to_thread(_worker_of, server.log_path, f"probe-{i}")
                on[worker].append(stub)
            assert on[0] and on[1], "every channel landed on one worker"
            await _exactly_once(on)
            # A long poll on one worker wakes on a send through the other, both ways round.
            await _cross_process_wake_up([on[0][0], on[1][0]])
            await _cross_process_wake_up([on[1][0], on[0][0]])
        finally:
            for channel in channels:
                await channel.close()
        # A separate server on the busy port fails, as it did before workers existed.
        other = subprocess.run(
            [
                sys.executable,
                "-m",
                "leaseq.cli",
                "serve",
                "--store",
                "memory://",
                "--listen",
                server.target,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert other.returncode != 0
        assert f"address {server.target} is already in use" in other.stderr
    finally:
        code = server.terminate(timeout=60)
    assert code == 0
    text = server.log_path.read_text()
    assert "Traceback" not in text
    drained = [json.loads(line) for line in text.splitlines() if '"draining (grace' in line]
    assert sorted(r["worker"] for r in drained) == [0, 1]


async def _exactly_once(on: dict[int, list[pb_grpc.QueueServiceStub]]) -> None:
    senders = [on[0][0], on[1][0]]
    sent: set[str] = set()
    for n in range(MESSAGES // 100):
        entries = [pb.SendEntry(id=str(i), body=f"{n}-{i}".encode()) for i in range(100)]
        reply = await senders[n % 2].SendMessages(
            pb.SendMessagesRequest(queue="work", entries=entries)
        )
        sent.update(r.message_id for r in reply.results)
    deliveries: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    consumers = [on[i % 2][(i // 2) % len(on[i % 2])] for i in range(CONSUMERS)]

    async def consume(stub: pb_grpc.QueueServiceStub) -> None:
        while True:
            request = pb.GetMessagesRequest(
                queue="work",
                max_messages=50,
                visibility_timeout=LEASE,
                wait_time=D(seconds=0),
            )
            messages = [m async for r in stub.GetMessages(request) for m in r.messages]
            if not messages:
                return
            deliveries.update(m.message_id for m in messages)
            reply = await stub.DeleteMessages(
                pb.DeleteMessagesRequest(queue="work", receipts=[m.receipt for m in messages])
            )
            statuses.update(r.status for r in reply.results)

    await asyncio.gather(*(consume(stub) for stub in consumers))
    assert len(sent) == MESSAGES
    assert set(deliveries) == sent, "a message was lost"
    assert max(deliveries.values()) == 1, "a message was delivered twice under a live lease"
    assert statuses == {pb.LEASE_STATUS_OK: MESSAGES}


def test_workers_refuse_the_sqlite_store(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaseq.cli",
            "serve",
            "--workers",
            "2",
            "--store",
            f"sqlite:///{tmp_path}/q.db",
            "--listen",
            f"127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--workers 2 needs the PostgreSQL store" in lines[0], lines
