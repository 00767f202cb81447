"""Fixtures for the hostile-client tests: `leaseq serve` processes on every store.

`url_for(store, tmp_path)` yields a store URL of memory, a SQLite file or a PostgreSQL schema of
its own; `serve_process` (from tests/ops) starts `leaseq serve` on it and finds its ports in its
log. `serve_quiet` does the same at log levels that hide those lines (warning, error).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.ops.conftest import (
    START_TIMEOUT,
    Serve,
    killed_at_the_end,
    serve_process,  # noqa: F401 - a fixture, re-exported
)
from tests.support.postgres import fresh_schema
from tests.support.postgres import store_url as postgres_url
from tests.support.process import free_port

STORES = ("memory", "sqlite", "postgres")


def url_for(store: str, tmp_path: Path) -> Iterator[str]:
    if store == "memory":
        yield "memory://"
    elif store == "sqlite":
        yield f"sqlite:///{tmp_path / 'q.db'}"
    else:
        with fresh_schema() as schema:
            yield postgres_url(schema)


class QuietServe(Serve):
    """`leaseq serve` at a log level that does not log its ports: they are chosen before it
    starts (free loopback ports), and health is asked on the gRPC port."""

    def start(self) -> QuietServe:
        self.port = free_port()
        self.health_port = self.port
        self.target = self.health_target = f"127.0.0.1:{self.port}"
        listen = self.args.index("--listen") + 1
        self.args[listen] = self.target
        for flag in ("--health-listen", "--metrics-listen"):
            at = self.args.index(flag)
            del self.args[at : at + 2]
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                self.args,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        deadline = time.monotonic() + START_TIMEOUT
        with grpc.insecure_channel(self.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"leaseq serve exited: {self.stderr()[-2000:]}")
                try:
                    reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return self
                except grpc.RpcError:
                    pass
                # Another process offers nothing to wait on: poll its health.
                time.sleep(0.02)
        raise TimeoutError(f"leaseq serve not serving: {self.stderr()[-2000:]}")


@pytest.fixture
def serve_quiet() -> Iterator[type[Serve]]:
    """QuietServe(tmp_path, store_url, *flags).start(); killed at the end if still running."""
    yield from killed_at_the_end(QuietServe)
