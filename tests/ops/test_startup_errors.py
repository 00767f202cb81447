"""`leaseq serve` start-up failures as a user meets them: one line on stderr, a non-zero exit, no
traceback, and for addresses, before the store is opened (real processes, real ports, real
files, the real PostgreSQL)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.ops.conftest import Serve
from tests.support import postgres
from tests.support.process import free_port

TIMEOUT = 60.0


def serve(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leaseq.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The failure's only line on stderr (without click's "Error: ")."""
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    return lines[0].removeprefix("Error: ")


# --- a port in use --------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--listen", "--health-listen", "--metrics-listen"])
def test_a_second_server_on_a_busy_port_fails_before_opening_its_store(
    serve_process: type[Serve], tmp_path: Path, flag: str
) -> None:
    first = serve_process(tmp_path, "memory://").start()
    busy = {
        "--listen": first.port,
        "--health-listen": first.health_port,
        "--metrics-listen": first.metrics_port,
    }[flag]
    data = tmp_path / "second"
    args = ["--store", f"sqlite:///{data}/leaseq.db", "--listen", "127.0.0.1:0"]
    result = serve(*args, flag, f"127.0.0.1:{busy}")
    assert one_error_line(result) == f"address 127.0.0.1:{busy} is already in use"
    assert not data.exists(), "the store was opened"
    assert first.process is not None and first.process.poll() is None


def test_a_port_some_other_program_listens_on(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        result = serve(
            "--store", f"sqlite:///{tmp_path}/data/leaseq.db", "--listen", f"localhost:{port}"
        )
    assert one_error_line(result) == f"address localhost:{port} is already in use"
    assert not (tmp_path / "data").exists()


def test_two_flags_naming_one_address(tmp_path: Path) -> None:
    port = free_port()
    result = serve(
        "--store",
        "memory://",
        "--listen",
        f"127.0.0.1:{port}",
        "--metrics-listen",
        f"127.0.0.1:{port}",
    )
    assert one_error_line(result) == f"address 127.0.0.1:{port} is already in use"


def test_an_address_of_no_interface_here() -> None:
    # 192.0.2.0/24 is TEST-NET-1: never an address of this machine.
    result = serve("--store", "memory://", "--listen", "192.0.2.1:50051", "--allow-unauthenticated")
    assert (
        one_error_line(result)
        == "cannot listen on 192.0.2.1:50051: Cannot assign requested address"
    )


# --- addresses that are not HOST:PORT -------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--listen", "50052", "'50052' is not HOST:PORT (e.g. 127.0.0.1:50052)"),
        ("--listen", "127.0.0.1:99999", "port 99999 is outside 1..65535"),
        ("--listen", "127.0.0.1:", "'127.0.0.1:' has no port number"),
        ("--listen", ":50051", "':50051' has no host: give 127.0.0.1:50051"),
        ("--listen", "::1:50051", "write an IPv6 address in brackets"),
        ("--metrics-listen", "garbage", "'garbage' is not HOST:PORT (e.g. 127.0.0.1:9090)"),
        ("--metrics-listen", "127.0.0.1:70000", "port 70000 is outside 1..65535"),
        ("--health-listen", "localhost", "'localhost' is not HOST:PORT (e.g. 127.0.0.1:8081)"),
        ("--grace", "-5", "-5.0 is not in the range x>=0"),
        ("--max-connections", "0", "0 is not in the range x>=1"),
        ("--max-connection-idle", "soon", "'soon' is not a duration"),
    ],
)
def test_malformed_flags_are_usage_errors(flag: str, value: str, message: str) -> None:
    result = serve("--store", "memory://", flag, value)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    [error] = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert f"Invalid value for '{flag}'" in error and message in error, error
    assert "loopback" not in error


# --- stores that cannot be opened -----------------------------------------------------------


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    notes = tmp_path / "file.txt"
    notes.write_text("not a database\n" * 100)
    result = serve("--store", f"sqlite:///{notes}", "--listen", "127.0.0.1:0")
    assert one_error_line(result) == (
        f"cannot open the SQLite store {notes}: the file is not a SQLite database"
    )
    assert notes.read_text() == "not a database\n" * 100


def test_a_store_path_that_is_a_directory(tmp_path: Path) -> None:
    result = serve("--store", f"sqlite:///{tmp_path}", "--listen", "127.0.0.1:0")
    assert one_error_line(result) == (
        f"cannot open the SQLite store {tmp_path}: it is a directory "
        "(name a file in it, e.g. sqlite:///DIR/leaseq.db)"
    )


def test_a_store_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    path = tmp_path / "plain" / "data" / "leaseq.db"
    result = serve("--store", f"sqlite:///{path}", "--listen", "127.0.0.1:0")
    assert one_error_line(result) == (
        f"cannot open the SQLite store {path}: {tmp_path / 'plain'} is not a directory"
    )


def test_an_unwritable_store(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root writes through file modes; sysfs refuses new files even to root.
        path = Path("/sys/leaseq-test.db")
        reason = "cannot write it: Permission denied"
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        path = locked / "leaseq.db"
        reason = "cannot write it: Permission denied"
    result = serve("--store", f"sqlite:///{path}", "--listen", "127.0.0.1:0")
    assert one_error_line(result) == f"cannot open the SQLite store {path}: {reason}"


def test_postgresql_server_down() -> None:
    port = free_port()  # nothing listens there
    result = serve(
        "--store", f"postgresql://postgres@127.0.0.1:{port}/test", "--listen", "127.0.0.1:0"
    )
    line = one_error_line(result)
    assert line.startswith(
        f"cannot connect to PostgreSQL (user=postgres dbname=test host=127.0.0.1 port={port}): "
    ), line
    assert "Connection refused" in line
    assert "pool" not in result.stderr  # no psycopg pool warnings, no "incomplete after 15 sec"


def test_postgresql_database_that_does_not_exist() -> None:
    dsn = urlsplit(postgres.require_postgres())
    missing = urlunsplit(dsn._replace(path="/no_such_db_leaseq_test"))
    result = serve("--store", missing, "--listen", "127.0.0.1:0")
    line = one_error_line(result)
    assert line.startswith("cannot connect to PostgreSQL ("), line
    assert line.endswith('FATAL: database "no_such_db_leaseq_test" does not exist'), line
    assert "pool" not in result.stderr
