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


def _accepted(sock: socket.socket) -> bool:
    """Sends a request: an accepted connection gets an answer (and is kept alive), a refused one
    was closed without a byte."""
    try:
        sock.sendall(head("GET", "/", sock.getpeername()[1], {"Connection": "keep-alive"}))
        return bool(sock.recv(65536))
    except (ConnectionResetError, BrokenPipeError):
        return False


def _accepted_and_refused(sockets: list[socket.socket]) -> tuple[int, int]:
    accepted = sum(_accepted(sock) for sock in sockets)
    return accepted, len(sockets) - accepted


def _held(port: int) -> socket.socket:
    """A connection the server accepted; retried while a connection the server has not yet
    seen closed (the start-up probe's) still counts against the cap."""
    deadline = time.monotonic() + 30
    while True:
        sock = connect(port)
        if _accepted(sock):
            return sock
        sock.close()
        assert time.monotonic() < deadline, "no connection accepted"
        readable([], 0.05)  # the server has not seen the close yet: a moment


def test_one_cap_for_every_http_port_and_health_still_answers(tmp_path):
    console = free_port()
    with serving(
        tmp_path,
        "--sqs-listen",
        "--console-listen",
        f"127.0.0.1:{console}",
        "--http-max-connections",
        "20",
        # The held connections wait for their turn to send a request: on a busy machine longer
        # than the default header deadline.
        "--http-header-timeout",
        "120s",
    ) as server:
        ports = [server.port, console]
        held = [_held(ports[i % 2]) for i in range(20)]
        try:
            # 20 are in (an answer each, kept alive); 20 more, on both ports, are not.
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
        # 20 refusals (and maybe one while the held ones were made): one record per 10 s.
        assert 1 <= log.count("HTTP connection refused") <= 2, log[-3000:]
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
