"""python -m leaseq.bench.floor_server: the floor server answers leaseq's client as leaseq does in what the
benchmarks use (send, a receive that leases and waits, delete, stats), on SQLite and on
PostgreSQL, and leaves nothing behind when stopped (the figures are the benchmarks' business)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from leaseq.bench.launcher import free_port
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.postgres import connect, require_postgres

MODULE = "leaseq.bench.floor_server"


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    address = f"127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [sys.executable, "-m", MODULE, "--listen", address, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    first = server.stdout.readline()
    if not first.startswith(f"floor server on {address}"):
        server.kill()
        pytest.fail(f"the floor server did not start: {first}{server.communicate()[1]}")
    return server, first


def _stop(server: subprocess.Popen[str]) -> None:
    server.send_signal(signal.SIGTERM)
    _, errors = server.communicate(timeout=30)
    assert server.returncode == 0, errors


@pytest.fixture(
    params=["loop", "thread", "overlapped", "postgres", "postgres-workers", "postgres-leaseq-row"]
)
def floor(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if request.param.startswith("postgres"):
        args = ["--store", "postgres", "--dsn", require_postgres()]
        if request.param.endswith("workers"):
            args += ["--workers", "2"]
        if request.param.endswith("leaseq-row"):
            args += ["--postgres-row", "leaseq"]
    else:
        args = ["--dir", str(tmp_path), "--sqlite-work", request.param]
    server, first = _start(*args)
    address = first.split()[3].rstrip(",")
    try:
        yield address, first
    finally:
        if server.poll() is None:
            _stop(server)


def test_the_floor_server_sends_leases_deletes_and_counts(floor: tuple[str, str]) -> None:
    address, _ = floor
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        stub.CreateQueue(pb.CreateQueueRequest(name="q"))
        for n in range(3):
            bodies = [bytes([n, i]) * 50 for i in range(5)]
            sent = stub.SendMessages(
                pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b) for b in bodies])
            )
            assert len(sent.results) == 5
        receive = pb.GetMessagesRequest(queue="q", max_messages=10, wait_time=Duration(seconds=5))
        got = [m for reply in stub.GetMessages(receive) for m in reply.messages]
        assert sorted(m.body for m in got) == sorted(
            bytes([n, i]) * 50 for n in range(2) for i in range(5)
        )
        deleted = stub.DeleteMessages(
            pb.DeleteMessagesRequest(queue="q", receipts=[m.receipt for m in got])
        )
        assert [r.status for r in deleted.results] == [pb.LEASE_STATUS_OK] * 10
        rest = [m for reply in stub.GetMessages(receive) for m in reply.messages]
        assert len(rest) == 5  # the leased ten are neither visible again nor deleted twice
        stats = stub.GetQueueStats(pb.GetQueueStatsRequest(name="q")).stats
        assert (stats.total, stats.deleted_total) == (5, 10)
        # A receive on an empty queue waits, and a send wakes it.
        waiting = stub.GetMessages(receive)
        stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"w")]))
        assert [m.body for reply in waiting for m in reply.messages] == [b"w"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_postgres_floor_drops_its_schema_when_stopped(workers: str) -> None:
    server, first = _start("--store", "postgres", "--dsn", require_postgres(), "--workers", workers)
    schema = first.split("schema ")[1].split(",")[0].strip()
    with connect() as conn:
        assert conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone() != (None,)
    _stop(server)
    with connect() as conn:
        assert conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone() == (None,)


@pytest.mark.parametrize(
    "args, said",
    [
        (["--workers", "2"], "more than 1 only with --store postgres"),
        (["--postgres-row", "leaseq"], "--postgres-row goes with --store postgres"),
    ],
)
def test_workers_and_rows_are_for_postgres_only(args: list[str], said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", MODULE, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert said in done.stderr


def test_an_unreachable_database_or_a_taken_port_is_one_line_and_exit_1(tmp_path: Path) -> None:
    unreachable = subprocess.run(
        [
            sys.executable,
            "-m",
            MODULE,
            "--store",
            "postgres",
            "--dsn",
            f"postgresql://nobody@127.0.0.1:{free_port()}/x",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("floor_server.py: connection failed")
    assert "Traceback" not in unreachable.stderr
    server, first = _start("--dir", str(tmp_path))
    try:
        address = first.split()[3].rstrip(",")
        taken = subprocess.run(
            [sys.executable, "-m", MODULE, "--listen", address, "--dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert taken.returncode == 1
        assert f"floor_server.py: cannot listen on {address}" in taken.stderr
        assert "Traceback" not in taken.stderr
    finally:
        _stop(server)
