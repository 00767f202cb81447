"""The store a run uses, and the `leaseq serve` child process that serves it.

`store_for(settings)` turns --store into a URL and cleans up afterwards: a kind (sqlite: a file in
a fresh temp directory; memory; postgres: a fresh schema in --dsn's database, dropped on exit) or a
full store URL, used as given and left as it is.

`ServerProcess` starts `leaseq serve` on a free loopback port, waits until health says SERVING,
and stops it with SIGTERM (the server drains and closes the store).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def with_query_param(url: str, name: str, value: str) -> str:
    """The URL with its query parameter `name` set to value (any earlier one replaced)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != name]
    query.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _with_schema(dsn: str, schema: str) -> str:
    return with_query_param(dsn, "schema", schema)


def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    from leaseq.server.store.postgres.settings import parse_url

    # The DSN may carry leaseq's own parameters (schema, pool sizes): libpq knows none of them.
    plain = parse_url(_with_schema(dsn, schema)).conninfo
    with psycopg.connect(plain, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def store_for(store: str, dsn: str, prefix: str = "bench") -> Iterator[str]:
    """A store URL for one server (or one in-process run); temporary ones are removed after."""
    if store == "memory":
        yield "memory://"
    elif store == "sqlite":
        with tempfile.TemporaryDirectory(prefix=f"leaseq-{prefix}-") as tmp:
            yield f"sqlite:///{Path(tmp).resolve() / 'bench.db'}"
    elif store == "postgres":
        schema = f"{prefix}_{secrets.token_hex(6)}"
        try:
            yield _with_schema(dsn, schema)
        finally:
            _drop_schema(dsn, schema)
    else:
        yield store  # a full URL: the user's own store, left as it is


class ServerProcess:
    """`leaseq serve` as a child process on a free loopback port."""

    def __init__(self, store_url: str, log_path: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.store_url = store_url
        self.extra_args = extra_args  # more `leaseq serve` flags (leaseq.bench.sqs)
        self.log_path = log_path
        self.target = ""
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> None:
        for _ in range(3):  # a free port may be taken by someone else before the server binds
            port = free_port()
            self.target = f"127.0.0.1:{port}"
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "leaseq.cli",
                        "serve",
                        "--store",
                        self.store_url,
                        "--listen",
                        self.target,
                        "--log-level",
                        "warning",
                        "--log-format",
                        "text",
                        *self.extra_args,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=dict(os.environ, PYTHONUNBUFFERED="1"),
                )
            if self._wait_serving():
                return
            if "address already in use" not in self._log_tail().lower():
                break
        raise RuntimeError(f"leaseq serve did not start:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def _wait_serving(self) -> bool:
        # Readiness is health saying SERVING; polling is the only way to see another process up.
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        with grpc.insecure_channel(self.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return False
                try:
                    # The health stubs declare no methods on HealthStub.
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)  # type: ignore[attr-defined]
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return True
                except grpc.RpcError:
                    pass
                time.sleep(0.05)
        self.stop()
        return False

    def stop(self) -> None:
        """SIGTERM and wait (the server drains); SIGKILL if it does not end in time."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@contextmanager
def running_server(store_url: str, extra_args: tuple[str, ...] = ()) -> Iterator[ServerProcess]:
    with tempfile.TemporaryDirectory(prefix="leaseq-bench-log-") as tmp:
        server = ServerProcess(store_url, Path(tmp) / "server.log", extra_args)
        try:
            server.start()
            yield server
        finally:
            server.stop()
