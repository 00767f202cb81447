"""Errors a careless user meets on the command line: one clear line on stderr and a non-zero exit,
never a traceback or gRPC core's log lines. Run as real child processes, because gRPC's C core
writes to file descriptor 2 directly, which CliRunner would not see."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from leaseq.server.auth import Security, TLSFiles
from tests.cli.processes import run_leaseq
from tests.security.certs import CA
from tests.support.process import free_port
from tests.support.server import RunningServer, running_server


@pytest.fixture(scope="module")
def plaintext_server() -> Iterator[RunningServer]:
    with running_server() as server:
        yield server


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    ca = CA("leaseq cli test CA")
    (directory / "ca.pem").write_bytes(ca.pem)
    ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",), server=True).write(
        directory, "server"
    )
    (directory / "other-ca.pem").write_bytes(CA("another CA").pem)
    (directory / "not-pem.txt").write_text("hello\n")
    return directory


@pytest.fixture(scope="module")
def tls_server(tls_dir: Path) -> Iterator[RunningServer]:
    files = TLSFiles(tls_dir / "server.pem", tls_dir / "server-key.pem", None)
    with running_server(security=Security(None, files)) as server:
        yield server


def one_line(result: object, status: int) -> str:
    """The single line the command printed on stderr (stdout empty), its exit status checked."""
    stderr = result.stderr  # type: ignore[attr-defined]
    assert result.returncode == status, stderr  # type: ignore[attr-defined]
    assert result.stdout == "", result.stdout  # type: ignore[attr-defined]
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), stderr
    assert "Traceback" not in stderr
    return stderr.rstrip("\n")


# --- client TLS files ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--tls-ca", "/missing.pem"], "Error: --tls-ca /missing.pem: No such file or directory"),
        (
            ["--tls-client-cert", "/missing-cert.pem", "--tls-client-key", "/missing-key.pem"],
            "Error: --tls-client-cert /missing-cert.pem: No such file or directory",
        ),
        (["--tls-ca", "/"], "Error: --tls-ca /: Is a directory"),
    ],
)
def test_unreadable_tls_file(flags: list[str], expected: str) -> None:
    assert one_line(run_leaseq(["queue", "list", *flags]), 2) == expected


def test_tls_key_file_missing(tls_dir: Path) -> None:
    result = run_leaseq(
        [
            "queue",
            "list",
            "--tls-client-cert",
            str(tls_dir / "server.pem"),
            "--tls-client-key",
            "/missing-key.pem",
        ]
    )
    assert (
        one_line(result, 2) == "Error: --tls-client-key /missing-key.pem: No such file or directory"
    )


def test_tls_file_that_is_not_pem(tls_dir: Path) -> None:
    path = tls_dir / "not-pem.txt"
    result = run_leaseq(["queue", "list", "--tls-ca", str(path)])
    assert (
        one_line(result, 2) == f"Error: --tls-ca: {path} is not a PEM file (no '-----BEGIN' line)"
    )


# --- addresses -------------------------------------------------------------------------------


def test_port_out_of_range_is_refused() -> None:
    result = run_leaseq(["queue", "list", "--target", "127.0.0.1:99999"])
    assert (
        one_line(result, 2) == "Error: --target '127.0.0.1:99999': port 99999 is outside 1..65535"
    )


def test_empty_target_is_one_line_without_grpc_logs() -> None:
    result = run_leaseq(["queue", "list", "--target", ""])
    assert one_line(result, 2) == (
        "Error: --target '': it is empty: give HOST:PORT, e.g. 127.0.0.1:50051"
    )


def test_host_without_port_dials_50051() -> None:
    # Whatever answers on this machine's port 50051 (nothing, or some server), the command talks
    # to port 50051, never to gRPC's default 443.
    result = run_leaseq(["queue", "get", "no-such-queue-e3b0", "--target", "localhost"])
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert ":443" not in result.stderr
    if "connection refused" in result.stderr:  # the usual case: no server on 50051
        assert "localhost:50051" in result.stderr


def test_connection_refused_says_no_server_listens() -> None:
    target = f"127.0.0.1:{free_port()}"
    result = run_leaseq(["queue", "list", "--target", target])
    assert one_line(result, 1) == (
        f"Error: no leaseq server answers at {target} (connection refused): "
        "is leaseq serve running?"
    )


# --- TLS mix-ups -----------------------------------------------------------------------------


def test_tls_against_a_plaintext_server(plaintext_server: RunningServer) -> None:
    target = plaintext_server.target
    result = run_leaseq(["queue", "list", "--tls", "--target", target])
    assert one_line(result, 1) == (
        f"Error: {target} does not speak TLS (the TLS handshake failed): drop --tls/--tls-ca "
        "for a plaintext server"
    )


def test_plaintext_against_a_tls_server(tls_server: RunningServer) -> None:
    target = tls_server.target
    result = run_leaseq(["queue", "list", "--target", target])
    assert one_line(result, 1) == (
        f"Error: {target} closed the connection at once: if the server uses TLS, add --tls "
        "(and --tls-ca)"
    )


def test_untrusted_server_certificate(tls_server: RunningServer, tls_dir: Path) -> None:
    target = tls_server.target
    result = run_leaseq(
        ["queue", "list", "--target", target, "--tls-ca", str(tls_dir / "other-ca.pem")]
    )
    assert one_line(result, 1) == (
        f"Error: the TLS certificate of {target} is not trusted (unable to get local issuer "
        "certificate): give its CA with --tls-ca"
    )


def test_tls_with_the_right_ca_works(tls_server: RunningServer, tls_dir: Path) -> None:
    result = run_leaseq(
        [
            "queue",
            "list",
            "--json",
            "--target",
            tls_server.target,
            "--tls-ca",
            str(tls_dir / "ca.pem"),
        ]
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
