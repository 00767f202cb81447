"""Raw HTTP/1.1 over loopback sockets, for the tests of the HTTP ports' limits: what a hostile
client sends (a stalled body, unfinished headers, silence) and how the server's answer or its
closing of the connection looks from outside."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.http_frontend import FrontendServer, start

DEADLINE = 30.0  # the most any test waits for the server to answer or drop a connection


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)


def head(method: str, path: str, port: int, headers: dict[str, str] | None = None) -> bytes:
    headers = {"Host": f"127.0.0.1:{port}", **(headers or {})}
    lines = [f"{method} {path} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_until_closed(sock: socket.socket, deadline: float = DEADLINE) -> tuple[bytes, float]:
    """(everything the server sent, seconds until it closed the connection); AssertionError
    when it is still open after deadline seconds."""
    started = time.monotonic()
    received = b""
    while True:
        remaining = deadline - (time.monotonic() - started)
        assert remaining > 0, (
            f"the server kept the connection open {deadline:.0f} s: {received[:200]!r}"
        )
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        except TimeoutError:
            continue
        if not chunk:
            return received, time.monotonic() - started
        received += chunk


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One answer with a Content-Length body (the server's answers have one)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    header, _, rest = data.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    length = int(fields.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed in the middle of an answer"
        rest += chunk
    return status, fields, rest[:length]


def request(
    port: int, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    headers = dict(headers or {})
    if body or method in ("POST", "PUT"):
        headers.setdefault("Content-Length", str(len(body)))
    with connect(port) as sock:
        sock.sendall(head(method, path, port, headers) + body)
        return read_answer(sock)


@contextmanager
def serving(tmp_path, flag: str, *extra: str) -> Iterator[FrontendServer]:
    """`leaseq serve` on SQLite with one HTTP front end (and extra flags), stopped at the end."""
    server = start(flag, f"sqlite:///{tmp_path / 'leaseq.db'}", tmp_path, *extra)
    try:
        yield server
    finally:
        process = server.process.process
        if process is not None and process.poll() is None:
            server.process.terminate()
