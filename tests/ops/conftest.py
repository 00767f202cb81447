"""`leaseq serve` as a child process with its health and metrics ports, for the operations tests
(SIGTERM, logs), and a small Prometheus text reader."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

START_TIMEOUT = 30.0
_PORT_LINE = re.compile(r"^(?P<what>listening|health|metrics) on (?:\S+:)?(?:port )?(?P<port>\d+)$")


class Samples(dict):
    """{(sample name, frozenset of labels): value} of one scrape."""

    def get_value(self, name: str, **labels: str) -> float | None:
        return self.get((name, frozenset(labels.items())))

    def series(self, name: str) -> dict[frozenset, float]:
        return {labels: v for (n, labels), v in self.items() if n == name}


def parse_metrics(text: str) -> Samples:
    samples = Samples()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def scrape(port: int, *names: str) -> Samples:
    """GET /metrics (only the named families when names are given: prometheus_client's name[]
    filter, which leaves the store alone)."""
    query = "&".join(f"name[]={n}" for n in names)
    url = f"http://127.0.0.1:{port}/metrics" + (f"?{query}" if query else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        return parse_metrics(response.read().decode())


class Serve:
    """One `leaseq serve` with --health-listen and --metrics-listen on free loopback ports."""

    def __init__(self, tmp_path: Path, store_url: str, *extra: str) -> None:
        self.port = self.health_port = self.metrics_port = 0
        self.target = self.health_target = ""
        self.stderr_path = tmp_path / "serve.stderr"
        # Port 0 everywhere: the server picks free ports and logs them (no race with other
        # processes for a port chosen in advance).
        self.args = [
            sys.executable,
            "-m",
            "leaseq.cli",
            "serve",
            "--store",
            store_url,
            "--listen",
            "127.0.0.1:0",
            "--health-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            *extra,
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def _logged_ports(self) -> dict[str, int]:
        ports = {}
        for line in self.stderr().splitlines():
            if line.startswith("{"):
                match = _PORT_LINE.match(json.loads(line).get("message", ""))
                if match:
                    ports[match["what"]] = int(match["port"])
        return ports

    def start(self) -> Serve:
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                self.args,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        # A separate process offers nothing to wait on: read its log until it names its ports,
        # then poll its health port until SERVING.
        deadline = time.monotonic() + START_TIMEOUT
        while set(ports := self._logged_ports()) != {"listening", "health", "metrics"}:
            if self.process.poll() is not None:
                raise RuntimeError(f"leaseq serve exited: {self.stderr()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"leaseq serve did not start: {self.stderr()[-2000:]}")
            time.sleep(0.02)
        self.port, self.health_port, self.metrics_port = (
            ports["listening"],
            ports["health"],
            ports["metrics"],
        )
        self.target = f"127.0.0.1:{self.port}"
        self.health_target = f"127.0.0.1:{self.health_port}"
        with grpc.insecure_channel(self.health_target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                try:
                    reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return self
                except grpc.RpcError:
                    pass
                time.sleep(0.02)
        raise TimeoutError(f"leaseq serve not serving: {self.stderr()[-2000:]}")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def scrape(self, *names: str) -> Samples:
        return scrape(self.metrics_port, *names)

    def terminate(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def killed_at_the_end(kind: type[Serve]) -> Iterator[type[Serve]]:
    """A fixture body: yields a subclass of kind whose started servers are killed at the end
    (if still running)."""
    started: list[Serve] = []

    class _Tracked(kind):  # type: ignore[valid-type, misc]
        def start(self) -> Serve:
            started.append(self)
            return super().start()

    yield _Tracked
    for server in started:
        server.kill()


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[type[Serve]]:
    """Serve(tmp_path, store_url, *flags).start(); killed at the end if still running."""
    yield from killed_at_the_end(Serve)
