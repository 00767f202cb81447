"""Idle and surplus connections (without a cap, tens of thousands of idle TCP connections took
every file descriptor and new clients got no answer). A real `leaseq serve` with a low --max-connections and raw TCP
connections over loopback that speak just the HTTP/2 preface, as an idle gRPC client does."""

from __future__ import annotations

import selectors
import socket
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from leaseq.client import QueueClient
from leaseq.server.metrics import Metrics
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.ops.conftest import Serve

# The client preface and an empty SETTINGS frame: the connection is a finished HTTP/2 client
# that then sends nothing.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
DEADLINE = 60.0
SAFETY = 30.0


def connect_idle(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=SAFETY)
        sock.sendall(PREFACE)
        sockets.append(sock)
    return sockets


def readable(sockets: list[socket.socket], timeout: float) -> list[socket.socket]:
    """The sockets with something to read (or closed): poll, not select (file descriptors above
    1023)."""
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            selector.register(sock, selectors.EVENT_READ)
        return [key.fileobj for key, _ in selector.select(timeout)]  # type: ignore[misc]


def classify(sockets: list[socket.socket]) -> tuple[list[socket.socket], list[socket.socket]]:
    """(accepted, closed): the server greets an accepted connection with its SETTINGS; one over
    the cap is closed without a byte. Waits until each has shown which it is."""
    accepted: list[socket.socket] = []
    closed: list[socket.socket] = []
    pending = list(sockets)
    deadline = time.monotonic() + DEADLINE
    while pending:
        assert time.monotonic() < deadline, f"{len(pending)} connections neither greeted nor closed"
        for sock in readable(pending, 1.0):
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            (accepted if data else closed).append(sock)
            pending.remove(sock)
    return accepted, closed


def wait_all_closed(sockets: list[socket.socket]) -> None:
    """Until the server has closed every one (reads whatever it sends first: SETTINGS, GOAWAY)."""
    pending = list(sockets)
    deadline = time.monotonic() + DEADLINE
    while pending:
        assert time.monotonic() < deadline, f"{len(pending)} idle connections still open"
        for sock in readable(pending, 1.0):
            try:
                if sock.recv(65536):
                    continue
            except ConnectionResetError:
                pass
            pending.remove(sock)


def health_status(target: str, wait: bool = False) -> int:
    """wait: keep trying to connect (gRPC's wait_for_ready) until DEADLINE."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(
            health_pb2.HealthCheckRequest(),
            timeout=DEADLINE if wait else SAFETY,
            wait_for_ready=wait,
        ).status


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


def test_the_connection_cap_holds_and_health_still_answers(
    serve_process: type[Serve], tmp_path: Path
) -> None:
    server = serve_process(tmp_path, "memory://", "--max-connections", "50").start()
    sockets = connect_idle(server.port, 300)
    try:
        accepted, closed = classify(sockets)
        assert (len(accepted), len(closed)) == (50, 250)
        # The health port is a server of its own: probes keep their answer.
        assert health_status(server.health_target) == health_pb2.HealthCheckResponse.SERVING
        # A client of the full port is told at once, not left waiting for an answer.
        with grpc.insecure_channel(server.target) as channel:
            try:
                health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=SAFETY
                )
                raise AssertionError("a connection over the cap was served")
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.UNAVAILABLE, error
        close_all(accepted)
        # Their slots are free again (the server sees the closes in its own time).
        assert health_status(server.target, wait=True) == health_pb2.HealthCheckResponse.SERVING
    finally:
        close_all(sockets)


def test_idle_connections_are_closed_and_busy_ones_are_not(
    serve_process: type[Serve], tmp_path: Path
) -> None:
    server = serve_process(
        tmp_path, "memory://", "--max-connections", "50", "--max-connection-idle", "1s"
    ).start()
    with QueueClient(server.target) as client:
        client.create_queue("jobs")
    with grpc.insecure_channel(server.target) as channel:
        # A follow stream: a connection with a call running is never idle, however quiet.
        follow = pb_grpc.QueueServiceStub(channel).GetMessages(
            pb.GetMessagesRequest(
                queue="jobs",
                follow=True,
                max_messages=1,
                visibility_timeout=duration_pb2.Duration(seconds=60),
            ),
            timeout=DEADLINE * 2,
        )
        idle = connect_idle(server.port, 49)  # with the follow stream's: the cap
        try:
            accepted, closed = classify(idle)
            assert (len(accepted), len(closed)) == (49, 0)
            wait_all_closed(accepted)  # after 1 s without a call
        finally:
            close_all(idle)
        # 49 idle + 1 busy filled the cap: a new client gets in only because the idle ones
        # were closed.
        with QueueClient(server.target) as client:
            client.send("jobs", b"still there")
        response = next(follow)
        assert [m.body for m in response.messages] == [b"still there"]
        follow.cancel()


def test_the_cap_stays_below_the_file_descriptor_limit(
    serve_process: type[Serve], tmp_path: Path
) -> None:
    server = serve_process(tmp_path, "memory://")  # --max-connections 10,000 by default
    # ulimit -n 1500 (soft and hard: it cannot be raised) for the server alone.
    server.args = ["sh", "-c", 'ulimit -n 1500 && exec "$@"', "sh", *server.args]
    server.start()
    assert (
        "max connections lowered from 10000 to 750: the file descriptor limit is 1500"
        in server.stderr()
    )
    sockets = connect_idle(server.port, 800)
    try:
        accepted, closed = classify(sockets)
        assert (len(accepted), len(closed)) == (750, 50)
        assert health_status(server.health_target) == health_pb2.HealthCheckResponse.SERVING
    finally:
        close_all(sockets)


def test_the_metrics_endpoint_caps_connections_and_closes_silent_ones(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Each /metrics connection holds a thread: at most max_connections at once, more closed at
    once, and a silent one closed after idle_timeout."""
    endpoint = Metrics().serve_http("127.0.0.1:0", max_connections=8, idle_timeout=60.0)
    try:
        sockets = [socket.create_connection(("127.0.0.1", endpoint.port)) for _ in range(20)]
        try:
            # The 12 over the cap are closed without a byte; then every one has been accepted.
            closed: list[socket.socket] = []
            deadline = time.monotonic() + DEADLINE
            while len(closed) < 12:
                assert time.monotonic() < deadline, f"only {len(closed)} closed"
                for sock in readable([s for s in sockets if s not in closed], 1.0):
                    try:
                        assert sock.recv(1024) == b""
                    except ConnectionResetError:
                        pass
                    closed.append(sock)
            held = [s for s in sockets if s not in closed]
            for sock in held:  # the 8 held ones are served
                sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                sock.settimeout(SAFETY)
                assert sock.recv(64).startswith(b"HTTP/1.0 200"), "a held connection not served"
        finally:
            close_all(sockets)
    finally:
        endpoint.close()

    endpoint = Metrics().serve_http("127.0.0.1:0", idle_timeout=0.5)
    try:
        with socket.create_connection(("127.0.0.1", endpoint.port)) as silent:
            wait_all_closed([silent])
        assert (
            b"leaseq_rpcs_handled"
            in urllib.request.urlopen(
                f"http://127.0.0.1:{endpoint.port}/metrics", timeout=SAFETY
            ).read()
        )
    finally:
        endpoint.close()
    assert "Traceback" not in capfd.readouterr().err
