"""A real `leaseq serve` with one HTTP front end (--sqs-listen, --azure-listen, ...) as a child
process, on SQLite or PostgreSQL: what the tests of each HTTP dialect start and stop."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import postgres
from tests.support.process import ServerProcess, free_port


@dataclass
class FrontendServer:
    process: ServerProcess
    port: int  # the HTTP front end's
    store: str  # "sqlite", "postgres", "memory"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def grpc_target(self) -> str:
        return self.process.target


def wait_listening(port: int, process: ServerProcess, timeout: float = 30.0) -> None:
    """The endpoint accepts connections (it starts before gRPC health says SERVING, so this
    is immediate; kept as a guard with a clear failure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            if process.process is not None and process.process.poll() is not None:
                raise RuntimeError(process.log_path.read_text()[-2000:]) from None
            time.sleep(0.05)
    raise TimeoutError(f"HTTP endpoint not listening: {process.log_path.read_text()[-2000:]}")


def start(
    flag: str, store_url: str, directory: Path, *extra: str, store: str = "sqlite"
) -> FrontendServer:
    """`leaseq serve --<flag> 127.0.0.1:<free port>` with extra flags, debug logs in directory."""
    port = free_port()
    process = ServerProcess(
        store_url,
        free_port(),
        directory / "server.log",
        (flag, f"127.0.0.1:{port}", "--log-level", "debug", *extra),
    )
    process.start()
    wait_listening(port, process)
    return FrontendServer(process, port, store)


def stop(server: FrontendServer, fault_marker: str) -> None:
    """SIGTERM (exit 0), then: no request of any test was a server fault (fault_marker: what
    the front end logs for a 500)."""
    process = server.process
    if process.process is not None and process.process.poll() is None:
        assert process.terminate() == 0, process.log_path.read_text()[-2000:]
    log = process.log_path.read_text()
    assert fault_marker not in log, log[-3000:]


def per_store(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    flag: str,
    fault_marker: str,
    *extra: str,
) -> Iterator[FrontendServer]:
    """The body of a module fixture parametrized over ["sqlite", "postgres"]; extra: more
    `leaseq serve` flags."""
    directory = tmp_path_factory.mktemp(flag.strip("-"))
    if request.param == "sqlite":
        server = start(flag, f"sqlite:///{directory / 'leaseq.db'}", directory, *extra)
        try:
            yield server
        finally:
            stop(server, fault_marker)
        return
    postgres.require_postgres()
    schema = postgres.new_schema()
    server = start(flag, postgres.store_url(schema), directory, *extra, store="postgres")
    try:
        yield server
    finally:
        try:
            stop(server, fault_marker)
        finally:
            postgres.drop_schema(schema)


def serve(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`leaseq serve` on a memory store and a free port with more flags, to its end (for start-up
    failures)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "leaseq.cli",
            "serve",
            "--store",
            "memory://",
            "--listen",
            f"127.0.0.1:{free_port()}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def assert_a_busy_port_fails_with_one_line(flag: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = serve(flag, f"127.0.0.1:{port}")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "Error" in last and str(port) in last


def assert_non_loopback_needs_auth_or_allow_unauthenticated(flag: str) -> None:
    result = serve(flag, f"0.0.0.0:{free_port()}")
    assert result.returncode == 2
    assert "--allow-unauthenticated" in result.stderr and flag in result.stderr
    result = serve(flag, "no-port-here")
    assert result.returncode == 2 and "HOST:PORT" in result.stderr
