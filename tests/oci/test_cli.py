"""The real OCI CLI (`oci queue ...`, PyPI oci-cli) with --endpoint pointed at the server: a queue
made and waited on, a message put, received and deleted, errors as the CLI shows them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.http_frontend import FrontendServer

from .conftest import COMPARTMENT, TENANCY, ApiKey, unique

# The CLI is the same whatever the store (and each command starts a new interpreter): SQLite only.
pytestmark = pytest.mark.parametrize("oci_server", ["sqlite"], indirect=True)


@pytest.fixture(scope="module")
def cli_config(tmp_path_factory: pytest.TempPathFactory, api_key: ApiKey) -> Path:
    path = tmp_path_factory.mktemp("oci-cli") / "config"
    path.write_text(
        "[DEFAULT]\n"
        f"user={api_key.user}\nfingerprint={api_key.fingerprint}\nkey_file={api_key.key_file}\n"
        f"tenancy={TENANCY}\nregion=us-ashburn-1\n"
    )
    path.chmod(0o600)
    return path


def oci_cli(config: Path, server: FrontendServer, *args: str) -> subprocess.CompletedProcess[str]:
    command = Path(sys.executable).parent / "oci"
    return subprocess.run(
        [str(command), "--config-file", str(config), *args, "--endpoint", server.endpoint],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "OCI_CLI_SUPPRESS_FILE_PERMISSIONS_WARNING": "True",
            "SUPPRESS_LABEL_WARNING": "True",
        },
    )


def test_queue_and_messages_through_the_cli(cli_config: Path, oci_server: FrontendServer) -> None:
    name = unique("cli")
    made = oci_cli(
        cli_config,
        oci_server,
        "queue",
        "queue-admin",
        "queue",
        "create",
        "--compartment-id",
        COMPARTMENT,
        "--display-name",
        name,
        "--wait-for-state",
        "SUCCEEDED",
        "--wait-interval-seconds",
        "1",
    )
    assert made.returncode == 0, made.stderr
    queue_id = json.loads(made.stdout)["data"]["resources"][0]["identifier"]
    put = oci_cli(
        cli_config,
        oci_server,
        "queue",
        "messages",
        "put-messages",
        "--queue-id",
        queue_id,
        "--messages",
        '[{"content": "from the cli", "metadata": {"channelId": "ops"}}]',
    )
    assert put.returncode == 0, put.stderr
    got = oci_cli(
        cli_config,
        oci_server,
        "queue",
        "messages",
        "get-messages",
        "--queue-id",
        queue_id,
        "--timeout-in-seconds",
        "0",
        "--limit",
        "5",
    )
    assert got.returncode == 0, got.stderr
    [message] = json.loads(got.stdout)["data"]["messages"]
    assert message["content"] == "from the cli" and message["metadata"]["channel-id"] == "ops"
    deleted = oci_cli(
        cli_config,
        oci_server,
        "queue",
        "messages",
        "delete-message",
        "--queue-id",
        queue_id,
        "--message-receipt",
        message["receipt"],
        "--force",
    )
    assert deleted.returncode == 0, deleted.stderr


def test_cli_errors_are_oci_service_errors(cli_config: Path, oci_server: FrontendServer) -> None:
    missing = oci_cli(
        cli_config,
        oci_server,
        "queue",
        "queue-admin",
        "queue",
        "get",
        "--queue-id",
        f"ocid1.queue.oc1.leaseq.{unique('missing')}",
    )
    assert missing.returncode != 0
    assert (
        '"code": "NotAuthorizedOrNotFound"' in missing.stderr and '"status": 404' in missing.stderr
    )
