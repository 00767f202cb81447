"""TLS and mutual TLS on the gRPC port, with the Python client's TLSConfig and the command line's
flags; certificates come from conftest's test PKI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner

from leaseq.cli.main import cli
from leaseq.client import QueueClient, TLSConfig
from leaseq.client.errors import PermissionDenied, Unauthenticated, Unavailable
from leaseq.server.auth import Security, hash_token
from tests.security.conftest import PKI
from tests.support.process import free_port
from tests.support.server import running_server

# A refused handshake fails the call at once (UNAVAILABLE); the deadline only bounds a hang.
QUICK = 5.0


def refused(client_kwargs: dict, target: str) -> None:
    with (
        pytest.raises(Unavailable),
        QueueClient(target, timeout=QUICK, retry=None, **client_kwargs) as c,
    ):
        c.list_queues()


def test_tls_serves_clients_that_trust_the_ca_and_refuses_plaintext(pki: PKI) -> None:
    with running_server(security=Security(tls=pki.tls_files(mutual=False))) as server:
        with QueueClient(server.target, tls=TLSConfig(root_certificates=pki.ca.pem)) as client:
            client.create_queue("jobs")
            client.send("jobs", "over TLS")
            [message] = client.receive("jobs", wait_time=0)
            assert message.text == "over TLS"
        refused({}, server.target)  # plaintext
        refused({"tls": TLSConfig(root_certificates=pki.rogue_ca.pem)}, server.target)


def test_mutual_tls_refuses_clients_without_a_good_certificate(pki: PKI) -> None:
    """Without a policy, any certificate the CA signed may do everything."""
    with running_server(security=Security(tls=pki.tls_files(mutual=True))) as server:
        good = TLSConfig(pki.ca.pem, pki.stranger.cert, pki.stranger.key)
        with QueueClient(server.target, tls=good) as client:
            client.create_queue("jobs")
            assert [q.name for q in client.list_queues()] == ["jobs"]
        refused({"tls": TLSConfig(root_certificates=pki.ca.pem)}, server.target)  # no cert
        rogue = TLSConfig(pki.ca.pem, pki.rogue.cert, pki.rogue.key)
        refused({"tls": rogue}, server.target)  # the right name, the wrong CA
        refused({}, server.target)  # plaintext


def test_mutual_tls_and_policy_name_the_principal_by_certificate(pki: PKI, mtls_server) -> None:
    worker = TLSConfig(pki.ca.pem, pki.worker.cert, pki.worker.key)
    stranger = TLSConfig(pki.ca.pem, pki.stranger.cert, pki.stranger.key)
    with QueueClient(mtls_server.target, tls=stranger, token="tok-root-5d1c") as root:
        root.create_queue("orders-us")
        root.send("orders-us", "for the worker")
    with QueueClient(mtls_server.target, tls=worker) as client:  # no token: the cert decides
        [message] = client.receive("orders-us", wait_time=0)
        assert client.delete("orders-us", [message.receipt]).ok
        with pytest.raises(PermissionDenied):
            client.send("orders-us", "not allowed: cert-worker may receive and ack only")
    with QueueClient(mtls_server.target, tls=stranger) as client, pytest.raises(Unauthenticated):
        client.list_queues()


def test_serve_flags_check_the_files_and_pairing(pki: PKI, tmp_path: Path) -> None:
    runner = CliRunner()
    other_key = pki.rogue.write(tmp_path, "rogue")[1]
    cases = [
        (["--tls-cert", str(pki.server_cert)], 2, "--tls-cert and --tls-key go together"),
        (["--tls-client-ca", str(pki.ca_path)], 2, "--tls-client-ca needs --tls-cert"),
        (
            ["--tls-cert", str(pki.server_cert), "--tls-key", str(other_key)],
            1,
            "do not load as a matching PEM pair",
        ),
        (
            [
                "--tls-cert",
                str(pki.server_cert),
                "--tls-key",
                str(pki.server_key),
                "--tls-client-ca",
                str(pki.server_key),
            ],
            1,
            "is not a PEM certificate file",
        ),
        (["--auth-policy", str(tmp_path / "missing.toml")], 1, "cannot read the policy file"),
        # TLS alone is not authentication: a public address still needs the explicit flag.
        (
            [
                "--listen",
                "0.0.0.0:0",
                "--tls-cert",
                str(pki.server_cert),
                "--tls-key",
                str(pki.server_key),
            ],
            2,
            "--allow-unauthenticated",
        ),
    ]
    for args, code, message in cases:
        result = runner.invoke(cli, ["serve", "--store", "memory://", *args])
        assert result.exit_code == code, (args, result.output)
        assert message in result.output, (args, result.output)


def wait_for(predicate, timeout: float = 15.0) -> None:
    """Poll a separate process (it offers nothing to wait on) until predicate() is true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


@pytest.mark.slow
def test_leaseq_serve_with_mtls_and_policy_on_a_public_address(pki: PKI, tmp_path: Path) -> None:
    """The real command: TLS flags from the environment, the policy by flag, a non-loopback
    address accepted because auth is on, a SIGHUP that swaps tokens, and the client command's
    --tls-* options."""
    token, new = "tok-ops-first", "tok-ops-second"
    policy = tmp_path / "policy.toml"

    def write_policy(tok: str) -> None:
        tmp = tmp_path / "policy.tmp"
        tmp.write_text(
            f'[[principals]]\nname = "ops"\ntokens = ["{hash_token(tok)}"]\n'
            '[[principals.grants]]\nqueues = ["*"]\nactions = ["*"]\n'
        )
        os.replace(tmp, policy)

    write_policy(token)
    port = free_port()
    target = f"127.0.0.1:{port}"
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        LEASEQ_TLS_CERT=str(pki.server_cert),
        LEASEQ_TLS_KEY=str(pki.server_key),
        LEASEQ_TLS_CLIENT_CA=str(pki.ca_path),
    )
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "leaseq.cli",
                "serve",
                "--store",
                "memory://",
                "--listen",
                f"0.0.0.0:{port}",
                "--auth-policy",
                str(policy),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    client_cert, client_key = pki.stranger.write(tmp_path, "client")
    tls_args = [
        "--tls-ca",
        str(pki.ca_path),
        "--tls-client-cert",
        str(client_cert),
        "--tls-client-key",
        str(client_key),
    ]
    runner = CliRunner()

    def cli_as(tok: str, *args: str):
        return runner.invoke(cli, [*args, "--target", target, "--token", tok, *tls_args])

    try:
        wait_for(lambda: b"listening on" in log_path.read_bytes() or process.poll() is not None)
        assert process.poll() is None, log_path.read_text()
        assert cli_as(token, "queue", "create", "ops-q").exit_code == 0
        result = cli_as(token, "queue", "list")
        assert result.exit_code == 0 and "ops-q" in result.output

        write_policy(new)
        process.send_signal(signal.SIGHUP)
        wait_for(lambda: b"auth policy reloaded" in log_path.read_bytes())
        old = cli_as(token, "queue", "list")
        assert old.exit_code == 1 and "UNAUTHENTICATED" in old.output
        assert cli_as(new, "queue", "list").exit_code == 0

        # No client certificate under mutual TLS: refused at the handshake.
        with grpc.secure_channel(
            target, grpc.ssl_channel_credentials(root_certificates=pki.ca.pem)
        ) as channel:
            with pytest.raises(grpc.FutureTimeoutError):
                grpc.channel_ready_future(channel).result(timeout=2)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    text = log_path.read_text()
    assert token not in text and new not in text and "Traceback" not in text
