"""/metrics has no authentication and names every queue: a non-loopback --metrics-listen needs
--allow-unauthenticated, like a non-loopback --listen without auth (real `leaseq serve`)."""

from __future__ import annotations

from pathlib import Path

from leaseq.client import QueueClient
from leaseq.server.auth import hash_token
from tests.ops.conftest import Serve
from tests.ops.test_startup_errors import serve

TOKEN = "metrics-exposure-test-token"


def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(
        f'[[principals]]\nname = "app"\ntokens = ["{hash_token(TOKEN)}"]\n\n'
        '[[principals.grants]]\nqueues = ["*"]\nactions = ["*"]\n'
    )
    return path


def test_public_metrics_are_refused_without_allow_unauthenticated(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = serve(
        "--store",
        f"sqlite:///{data}/leaseq.db",
        "--listen",
        "0.0.0.0:0",
        "--auth-policy",
        str(policy(tmp_path)),  # the gRPC port is protected ...
        "--metrics-listen",
        "0.0.0.0:0",  # ... /metrics would not be
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    [error] = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert error == (
        "Error: --metrics-listen 0.0.0.0:0 is not a loopback address and /metrics has no "
        "authentication (it names every queue): pass --allow-unauthenticated to serve it anyway"
    )
    assert not data.exists()


def test_public_metrics_with_allow_unauthenticated(
    serve_process: type[Serve], tmp_path: Path
) -> None:
    server = serve_process(
        tmp_path,
        "memory://",
        "--auth-policy",
        str(policy(tmp_path)),
        "--metrics-listen",
        "0.0.0.0:0",
        "--allow-unauthenticated",
    ).start()
    with QueueClient(server.target, token=TOKEN) as client:
        client.create_queue("hr-salaries")
    samples = server.scrape("leaseq_queue_messages")
    assert samples.get_value("leaseq_queue_messages", queue="hr-salaries", state="visible") == 0
