"""Run `leaseq serve` as a real child process, for tests that kill and restart it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """One `leaseq serve` child process on a fixed port."""

    def __init__(
        self, store_url: str, port: int, log_path: Path, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.store_url = store_url
        self.extra_args = extra_args  # more `leaseq serve` flags
        self.port = port
        self.target = f"127.0.0.1:{port}"
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        log = open(self.log_path, "ab")
        self._log_start = log.tell()  # a restart appends: readiness is read past this
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
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        self._wait_serving(timeout)

    def _wait_serving(self, timeout: float) -> None:
        # Readiness is the health check saying SERVING; a short poll is the only way to see a
        # separate process come up.
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    if (
                        reply.status == health_pb2.HealthCheckResponse.SERVING
                        and self._all_workers_up()
                    ):
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.05)
        raise TimeoutError(
            f"server not serving after {timeout}s: {self.log_path.read_text()[-2000:]}"
        )

    def _all_workers_up(self) -> bool:
        # With --workers N the health check is answered by whichever worker is up first; the
        # parent logs "listening on" once every worker is ready (before that, every connection
        # lands on the workers already listening, which tests of the spread must not see).
        if "--workers" not in self.extra_args:
            return True
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            return b"listening on" in log.read()

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self, timeout: float = 30.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)


@contextmanager
def server_process(store_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(store_url, free_port(), tmp_path / "server.log")
    server.start()
    try:
        yield server
    finally:
        if server.process and server.process.poll() is None:
            server.kill()
