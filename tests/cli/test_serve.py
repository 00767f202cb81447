"""`leaseq serve` as a real child process, and its option checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc

from leaseq.cli.main import cli
from leaseq.cli.serve_cmd import is_loopback
from leaseq.client import QueueClient
from tests.support.process import free_port

READY_TIMEOUT = 30.0


def wait_serving(process: subprocess.Popen[bytes], target: str) -> None:
    """Poll the health check until SERVING: a separate process offers nothing to wait on."""
    deadline = time.monotonic() + READY_TIMEOUT
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            assert process.poll() is None, "leaseq serve exited early"
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
    raise TimeoutError(f"leaseq serve not serving on {target} after {READY_TIMEOUT}s")


@pytest.mark.slow
def test_serve_subprocess_with_sqlite_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    target = f"127.0.0.1:{port}"
    # The flags' environment variables, as a container would set them.
    env = dict(
        os.environ,
        LEASEQ_STORE=f"sqlite:///{tmp_path}/data/leaseq.db",
        LEASEQ_LISTEN=target,
        PYTHONUNBUFFERED="1",
    )
    stderr_path = tmp_path / "stderr.log"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "leaseq.cli", "serve", "--grace", "2"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            cwd=tmp_path,
        )
    try:
        wait_serving(process, target)
        with QueueClient(target) as client:
            client.create_queue("jobs")
            message_id = client.send("jobs", "durable")
        assert (tmp_path / "data" / "leaseq.db").exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = stderr_path.read_text()
    assert f"listening on {target}" in log
    assert "Traceback" not in log
    assert message_id


def test_tls_flags_read_the_environment_too() -> None:
    result = CliRunner().invoke(cli, ["serve"], env={"LEASEQ_TLS_CERT": "cert.pem"})
    assert result.exit_code == 2 and "--tls-cert and --tls-key go together" in result.output


def test_a_public_address_needs_allow_unauthenticated() -> None:
    result = CliRunner().invoke(cli, ["serve", "--listen", "0.0.0.0:0", "--store", "memory://"])
    assert result.exit_code == 2 and "--allow-unauthenticated" in result.output


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("localhost:1", True),
        ("[::1]:1", True),
        ("0.0.0.0:1", False),
        ("[::]:1", False),
        ("10.1.2.3:1", False),
        ("example.com:1", False),
    ],
)
def test_is_loopback(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback


def test_entry_point_is_the_click_group() -> None:
    [script] = entry_points(group="console_scripts", name="leaseq")
    assert script.load() is cli
