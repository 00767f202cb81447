"""`leaseq serve --azure-listen` / LEASEQ_AZURE_LISTEN: start-up rules."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from azure.storage.queue import QueueClient

from tests.support import http_frontend
from tests.support.http_frontend import wait_listening
from tests.support.process import ServerProcess, free_port

from .conftest import connection_string, unique

pytestmark = pytest.mark.slow


def test_a_busy_azure_port_fails_start_up_with_one_line():
    http_frontend.assert_a_busy_port_fails_with_one_line("--azure-listen")


def test_a_non_loopback_azure_address_needs_a_policy_or_allow_unauthenticated():
    http_frontend.assert_non_loopback_needs_auth_or_allow_unauthenticated("--azure-listen")


def test_the_environment_variable_turns_it_on(tmp_path, monkeypatch):
    port = free_port()
    monkeypatch.setenv("LEASEQ_AZURE_LISTEN", f"127.0.0.1:{port}")
    process = ServerProcess("memory://", free_port(), tmp_path / "server.log")
    process.start()
    try:
        wait_listening(port, process)
        server = SimpleNamespace(endpoint=f"http://127.0.0.1:{port}")
        client = QueueClient.from_connection_string(
            connection_string(server), unique(), retry_total=0
        )
        client.create_queue()
        client.send_message("via env")
        assert client.receive_message().content == "via env"
    finally:
        assert process.terminate() == 0


def test_off_by_default():
    env = {k: v for k, v in os.environ.items() if k != "LEASEQ_AZURE_LISTEN"}
    help_text = subprocess.run(
        [sys.executable, "-m", "leaseq.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    assert "--azure-listen" in help_text and "Off by default" in help_text
