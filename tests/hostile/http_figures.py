"""Figures of the HTTP ports under hostile clients (not a test: a command that prints them).

    python -m tests.hostile.http_figures memory      # RSS growth: stalled bodies, sign-ins, header floods
    python -m tests.hostile.http_figures lifetimes   # how long stalled, idle, trickling connections live
    python -m tests.hostile.http_figures idle [--nofile 2048] [--connections 3000]
                                                     # gRPC health and calls under idle HTTP connections

Each starts its own `leaseq serve` (SQLite in a temporary directory; SQS, Azure and console ports
on loopback) with the flags of this checkout; run it with PYTHONPATH pointing at another checkout
to measure that one (only default flags are used).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from leaseq.server.auth import hash_token
from tests.support.process import free_port

TOKEN = "figures-token-0123456789abcdef0123"
MIB = 1024 * 1024


class Server:
    def __init__(self, directory: Path, nofile: int | None = None) -> None:
        self.grpc, self.sqs, self.azure, self.console = (free_port() for _ in range(4))
        policy = directory / "policy.toml"
        policy.write_text(
            f'[[principals]]\nname = "admin"\ntokens = ["{hash_token(TOKEN)}"]\n'
            'access_keys = [{ id = "AKIAFIGURES", secret = "figures-secret" }]\n'
            '[[principals.grants]]\nqueues = ["*"]\nactions = ["*"]\n'
        )
        args = [
            sys.executable,
            "-m",
            "leaseq.cli",
            "serve",
            "--store",
            f"sqlite:///{directory / 'q.db'}",
            "--listen",
            f"127.0.0.1:{self.grpc}",
            "--sqs-listen",
            f"127.0.0.1:{self.sqs}",
            "--azure-listen",
            f"127.0.0.1:{self.azure}",
            "--console-listen",
            f"127.0.0.1:{self.console}",
            "--auth-policy",
            str(policy),
            "--log-level",
            "warning",
        ]
        if nofile:
            args = ["sh", "-c", f'ulimit -n {nofile} && exec "$@"', "sh", *args]
        self.log = directory / "serve.log"
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=open(self.log, "wb")
        )
        deadline = time.monotonic() + 60
        while health(self.grpc) != "SERVING":
            assert time.monotonic() < deadline and self.process.poll() is None, self.log.read_text()
            time.sleep(0.1)

    def rss_mib(self) -> float:
        pid = self.process.pid
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def health(port: int, timeout: float = 2.0) -> str:
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout
            )
            return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    except grpc.RpcError as error:
        return error.code().name


def _send_all(sockets: list[socket.socket], payloads: list[bytes], seconds: float) -> None:
    """Each socket sends its payload in a thread of its own for at most `seconds` (a server that
    stops reading makes it wait); returns at once."""

    def one(sock: socket.socket, payload: bytes) -> None:
        sock.settimeout(seconds)
        try:
            sock.sendall(payload)
        except OSError:
            pass

    for pair in zip(sockets, payloads):
        threading.Thread(target=one, args=pair, daemon=True).start()


def _states(sockets: list[socket.socket]) -> tuple[Counter[str], int, int]:
    """How the server left the connections: (statuses of those answered, closed without an
    answer, still open and silent)."""
    statuses: Counter[str] = Counter()
    closed = silent = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            data = sock.recv(65536, socket.MSG_PEEK)
        except BlockingIOError:
            silent += 1
            continue
        except OSError:
            data = b""
        if data.startswith(b"HTTP/"):
            statuses[data.split(b" ", 2)[1].decode()] += 1
        else:
            closed += 1
    return statuses, closed, silent


def _scenario(
    server: Server, name: str, sockets: list[socket.socket], payloads: list[bytes]
) -> None:
    """RSS before, its peak over 35 s, and what became of the connections at 12 s and 35 s."""
    before = server.rss_mib()
    started = time.monotonic()
    _send_all(sockets, payloads, 30)
    peak, seen = 0.0, []
    for at in (12.0, 35.0):
        while time.monotonic() - started < at:
            peak = max(peak, server.rss_mib())
            time.sleep(0.25)
        statuses, closed, silent = _states(sockets)
        answered = ", ".join(f"{n} answered {status}" for status, n in sorted(statuses.items()))
        seen.append(
            f"at {at:.0f} s: {answered or 'none answered'}, {closed} closed, {silent} open and silent"
        )
    end = server.rss_mib()
    for sock in sockets:
        sock.close()
    print(
        f"{name}: RSS {before:.0f} MiB -> peak {peak:.0f} MiB (+{peak - before:.0f} MiB), "
        f"{end:.0f} MiB at 35 s; " + "; ".join(seen)
    )


def _stalled_sqs(server: Server, size: int) -> None:
    sockets = [socket.create_connection(("127.0.0.1", server.sqs)) for _ in range(30)]
    head = (
        f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {size}\r\n\r\n"
    ).encode()
    payload = head + b"Action=ListQueues&P=" + b"x" * (size - 21)
    name = f"30 stalled SQS bodies of {size // MIB} MiB (all but the last byte)"
    _scenario(server, name, sockets, [payload] * 30)


def _console_sign_ins(server: Server) -> None:
    session = _console_session(server.console)
    sockets = [socket.create_connection(("127.0.0.1", server.console)) for _ in range(10)]
    size = 32 * MIB
    head = (
        f"POST /api/session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Cookie: {session[0]}\r\nX-CSRF-Token: {session[1]}\r\nContent-Length: {size}\r\n\r\n"
    ).encode()
    name = "10 console sign-ins of 32 MiB (all but the last byte)"
    _scenario(server, name, sockets, [head + b'{"token": "' + b"x" * (size - 12)] * 10)


def _header_flood(server: Server) -> None:
    sockets = [socket.create_connection(("127.0.0.1", server.sqs)) for _ in range(100)]
    flood = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(
        f"X-H{i}: {'a' * 8000}\r\n".encode() for i in range(128)
    )
    _scenario(server, "100 connections x 128 unfinished 8 KB header lines", sockets, [flood] * 100)


def memory() -> None:
    """Each scenario on a server of its own (RSS seldom shrinks back after one)."""
    for scenario in (
        lambda server: _stalled_sqs(server, 10 * MIB),
        lambda server: _stalled_sqs(server, 4 * MIB),
        _console_sign_ins,
        _header_flood,
    ):
        with tempfile.TemporaryDirectory() as directory:
            server = Server(Path(directory))
            try:
                scenario(server)
            finally:
                server.stop()


def _console_session(port: int) -> tuple[str, str]:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /api/session HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    cookie = re.search(rb"Set-Cookie: ([^;]+)", head, re.I).group(1).decode()
    return cookie, json.loads(body)["csrf"]


def _lifetime(sock: socket.socket, cap: float, trickle: bytes = b"") -> str:
    started = time.monotonic()
    sent = 0
    sock.settimeout(1.0)
    while time.monotonic() - started < cap:
        if trickle:
            try:
                sock.sendall(trickle[sent % len(trickle) :][:1])
                sent += 1
            except OSError:
                return f"{time.monotonic() - started:.1f} s"
        try:
            if sock.recv(65536) == b"":
                return f"{time.monotonic() - started:.1f} s"
        except TimeoutError:
            continue
        except OSError:
            return f"{time.monotonic() - started:.1f} s"
    return f"over {cap:.0f} s (still open)"


def lifetimes(cap: float) -> None:
    with tempfile.TemporaryDirectory() as directory:
        server = Server(Path(directory))
        try:
            results: dict[str, str] = {}

            def measure(name: str, make) -> None:
                results[name] = make()

            def silent() -> str:
                return _lifetime(socket.create_connection(("127.0.0.1", server.sqs)), cap)

            def idle() -> str:
                sock = socket.create_connection(("127.0.0.1", server.sqs))
                sock.sendall(b"GET /?Action=ListQueues HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                sock.recv(65536)
                return _lifetime(sock, cap)

            def trickling() -> str:
                sock = socket.create_connection(("127.0.0.1", server.sqs))
                return _lifetime(
                    sock, cap, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100_000
                )

            def stalled_body() -> str:
                sock = socket.create_connection(("127.0.0.1", server.sqs))
                sock.sendall(
                    b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nAction=List"
                )
                return _lifetime(sock, cap)

            threads = [
                threading.Thread(target=measure, args=(name, fn))
                for name, fn in (
                    ("silent (connected, never a byte)", silent),
                    ("idle (kept alive after an answer)", idle),
                    ("trickling headers (a byte a second)", trickling),
                    ("stalled body", stalled_body),
                )
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for name, lived in results.items():
                print(f"{name}: closed by the server after {lived}")
        finally:
            server.stop()


def idle_connections(count: int, nofile: int | None) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 1024)), hard))
    from leaseq.client import QueueClient

    with tempfile.TemporaryDirectory() as directory:
        server = Server(Path(directory), nofile)
        try:
            log_before = server.log.stat().st_size
            sockets, refused = [], 0
            started = time.monotonic()
            for _ in range(count):
                try:
                    sockets.append(socket.create_connection(("127.0.0.1", server.sqs), timeout=5))
                except OSError:
                    refused += 1
            time.sleep(2)  # the server accepts (or refuses) them
            open_now = _states(sockets)[2]
            timings = []
            for _ in range(5):
                t = time.monotonic()
                status = health(server.grpc, 5)
                timings.append((status, time.monotonic() - t))
            calls = []
            try:
                with QueueClient(f"127.0.0.1:{server.grpc}", token=TOKEN) as client:
                    t = time.monotonic()
                    client.create_queue(f"figures-{os.getpid()}")
                    client.send(f"figures-{os.getpid()}", b"x")
                    calls.append(f"create+send {time.monotonic() - t:.3f} s")
            except Exception as error:  # the figure is what happened
                calls.append(f"create+send failed: {type(error).__name__}: {str(error)[:120]}")
            for sock in sockets:
                sock.close()
            grown = server.log.stat().st_size - log_before
            print(
                f"{count} idle HTTP connections (ulimit -n {nofile or 'default'}), opened in "
                f"{time.monotonic() - started:.1f} s: {open_now} open after 2 s, {refused} not connected"
            )
            print("  gRPC health: " + ", ".join(f"{s} {d * 1000:.0f} ms" for s, d in timings))
            print("  gRPC calls: " + "; ".join(calls))
            print(
                f"  log grew by {grown} bytes; lines about refusals/accept: "
                f"{sum(1 for line in server.log.read_text().splitlines() if 'refused' in line or 'accept' in line)}"
            )
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenario", choices=["memory", "lifetimes", "idle"])
    parser.add_argument("--nofile", type=int, default=None)
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument(
        "--cap", type=float, default=90.0, help="seconds a lifetime is watched at most"
    )
    args = parser.parse_args()
    if args.scenario == "memory":
        memory()
    elif args.scenario == "lifetimes":
        lifetimes(args.cap)
    else:
        idle_connections(args.connections, args.nofile)


if __name__ == "__main__":
    main()
