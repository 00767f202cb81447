"""Connections of the HTTP ports: one cap for all of them (gRPC health still answers), an idle
timeout, a header deadline, and a refusal logged once per interval, not once per connection."""

from __future__ import annotations

import socket
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.hostile.http_raw import connect, head, read_answer, read_until_closed, serving
from tests.ops.test_connections import readable
from tests.support.process import free_port


def _accepted_and_refused(sockets: list[socket.socket]) -> tuple[int, int]:
    """Each socket sends a request: an accepted one gets an answer, a refused one was closed
    without a byte."""
    accepted = refused = 0
    for sock in sockets:
        try:
            sock.sendall(head("GET", "/", sock.getpeername()[1], {"Connection": "keep-alive"}))
            data = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if data:
            accepted += 1
        else:
            refused += 1
    return accepted, refused


def test_one_cap_for_every_http_port_and_health_still_answers(tmp_path):
    console = free_port()
    with serving(
        tmp_path,
        "--sqs-listen",
        "--console-listen",
        f"127.0.0.1:{console}",
        "--http-max-connections",
        "20",
    ) as server:
        ports = [server.port, console]
        held = [connect(ports[i % 2]) for i in range(20)]
        try:
            # The first 20 are in (an answer each, kept alive); 20 more, on both ports, are not.
            assert _accepted_and_refused(held) == (20, 0)
            surplus = [connect(ports[i % 2]) for i in range(20)]
            assert _accepted_and_refused(surplus) == (0, 20)
            with grpc.insecure_channel(server.grpc_target) as channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=10
                )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            for sock in held:
                sock.close()
        log = server.process.log_path.read_text()
        # 20 refusals, one record (they all fall in one REFUSAL_LOG_INTERVAL).
        assert log.count("HTTP connection refused") == 1, log[-3000:]
        # Room again once the held ones are closed.
        deadline = time.monotonic() + 30
        while True:
            with connect(server.port) as sock:
                sock.sendall(head("GET", "/", server.port))
                try:
                    if sock.recv(65536):
                        break
                except ConnectionResetError:
                    pass
            assert time.monotonic() < deadline, "no room after the held connections closed"
            readable([], 0.05)  # the server has not seen the closes yet: a moment


def test_idle_stalled_and_trickling_connections_are_closed(tmp_path):
    with serving(
        tmp_path, "--sqs-listen", "--http-idle-timeout", "1s", "--http-header-timeout", "2s"
    ) as server:
        # Kept alive after an answer, then idle.
        idle = connect(server.port)
        idle.sendall(head("GET", "/?Action=ListQueues", server.port))
        status, _, _ = read_answer(idle)
        assert status == 200
        # Connected, never a byte.
        silent = connect(server.port)
        # Headers trickling, a byte at a time, never finished.
        trickling = connect(server.port)
        started = time.monotonic()
        trickled = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 10_000
        for byte in trickled:
            try:
                trickling.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            if readable([trickling], 0.05):  # closed by the server (or an answer)
                break
        else:
            raise AssertionError("a trickling connection stayed open for its whole header")
        assert time.monotonic() - started < 20
        for sock in (idle, silent):
            _, lived = read_until_closed(sock)
            assert lived < 20
            sock.close()
        trickling.close()
