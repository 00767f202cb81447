"""A Node.js client (@grpc/grpc-js + @grpc/proto-loader, from the .proto alone) sends, long-poll
receives and deletes against a real server. Needs node and `npm ci --prefix tests/polyglot`
(scripts/test runs it); skipped without them, except with LEASEQ_REQUIRE_NODE=1 (CI)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.server import running_server

HERE = Path(__file__).resolve().parent


def _node() -> str:
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not (HERE / "node_modules" / "@grpc" / "grpc-js").is_dir():
        missing = "tests/polyglot/node_modules is missing: run npm ci --prefix tests/polyglot"
    if missing:
        if os.environ.get("LEASEQ_REQUIRE_NODE") == "1":
            pytest.fail(missing + " (LEASEQ_REQUIRE_NODE=1)")
        pytest.skip(missing)
    return node


@pytest.mark.slow
def test_node_client_sends_long_polls_and_deletes() -> None:
    node = _node()
    with running_server() as server:
        done = subprocess.run(
            [node, str(HERE / "client.js"), server.target, "from-node"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        stats = server.call(lambda: server.store.stats("from-node"))
    assert report["received_id"] == report["sent_id"]
    assert report["body"] == "hello from node"
    assert report["attributes"] == {"lang": "js"}
    assert report["delivery_count"] == 1
    assert report["has_server_time"] is True
    assert report["send_request_id"] == "node-send-1"
    assert report["waited_ms"] < 15_000  # woken by the send, not by the 20 s wait_time
    assert report["delete_status"] == "LEASE_STATUS_OK"
    assert report["delete_again_status"] == "LEASE_STATUS_ALREADY_DELETED"
    assert (stats.total, stats.deleted_total) == (0, 1)
