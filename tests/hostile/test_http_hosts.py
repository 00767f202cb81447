"""DNS rebinding: without an auth policy every HTTP port answers only loopback Host names, IP
addresses and the names of --http-allowed-hosts (LEASEQ_HTTP_ALLOWED_HOSTS); with a policy
(credentials checked on every request) any Host."""

from __future__ import annotations

import pytest

from leaseq.server.auth import hash_token
from tests.hostile.http_raw import request, serving
from tests.support.process import free_port


def _status(port: int, host: str, path: str) -> int:
    return request(port, "GET", path, {"Host": host})[0]


def test_without_a_policy_only_loopback_and_configured_host_names_are_answered(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("LEASEQ_HTTP_ALLOWED_HOSTS", "leaseq.internal, Queue.Example.")
    azure, console = free_port(), free_port()
    with serving(
        tmp_path,
        "--sqs-listen",
        "--azure-listen",
        f"127.0.0.1:{azure}",
        "--console-listen",
        f"127.0.0.1:{console}",
    ) as server:
        sqs = server.port
        for host in (
            "evil.example",
            f"evil.example:{sqs}",
            "127.0.0.1.evil.example",
            "localhost.evil",
        ):
            assert _status(sqs, host, "/?Action=ListQueues") == 403, host
            assert _status(console, host, "/api/session") == 403, host
        status, headers, _ = request(
            azure, "GET", "/devstoreaccount1?comp=list", {"Host": "evil.example"}
        )
        assert status == 403 and headers["x-ms-error-code"] == "AuthorizationFailure"
        for host in (
            f"127.0.0.1:{sqs}",
            f"localhost:{sqs}",
            "LOCALHOST",
            f"[::1]:{sqs}",
            "127.8.9.10",
            "app.localhost",
            "10.1.2.3",
            "leaseq.internal",
            f"queue.example:{sqs}",
        ):
            assert _status(sqs, host, "/?Action=ListQueues") == 200, host
            assert _status(console, host, "/api/session") == 200, host


def test_with_a_policy_any_host_name_is_answered(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[[principals]]\nname = "p"\ntokens = ["{hash_token("t" * 32)}"]\n')
    with serving(tmp_path, "--console-listen", "--auth-policy", str(policy)) as server:
        assert _status(server.port, "queues.example.com", "/api/session") == 200


@pytest.mark.parametrize("value", ["0", "-1"])
def test_bad_limits_are_usage_errors(value):
    from tests.support.http_frontend import serve

    result = serve("--sqs-listen", "127.0.0.1:0", "--http-idle-timeout", value)
    assert result.returncode == 2 and "Traceback" not in result.stderr
