"""The README's code runs as written: every Python snippet, and the shell commands of the
five-minute tour, against a real `leaseq serve` (a child process, memory store, a free port).

Each snippet runs in a fresh interpreter in an empty directory, with two substitutions and
nothing else: the README's address 127.0.0.1:50051 (also `QueueClient()`, which means it) becomes
the test server's, its SQS endpoint 127.0.0.1:9324 the test server's `--sqs-listen` address, and
/tmp/leaseq-demo a fresh temporary directory. The TLS snippet gets the
files it names (made by a test CA) and LEASEQ_TOKEN. Spark snippets need PySpark and Java 17,
which CI has (`.ci/run`); elsewhere they skip, saying why.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.security.certs import CA
from tests.support.process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# Generous: on a loaded machine the two Spark snippets take minutes; a deadline is only there so
# that a hang fails.
SNIPPET_TIMEOUT = 900.0


@dataclass(frozen=True)
class Snippet:
    language: str
    code: str
    line: int  # of the opening fence, 1-based
    heading: str  # the nearest heading above it

    @property
    def name(self) -> str:
        return f"README.md:{self.line} ({self.heading})"


def snippets(text: str) -> list[Snippet]:
    found: list[Snippet] = []
    heading = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            found.append(
                Snippet(fence.group(1), "\n".join(lines[i + 1 : end]) + "\n", i + 1, heading)
            )
            i = end
        i += 1
    return found


ALL = snippets(README.read_text())
PYTHON = [s for s in ALL if s.language == "python"]
[TOUR] = [s for s in ALL if s.language == "sh" and s.heading == "A five-minute tour"]


def needs_spark(snippet: Snippet) -> bool:
    return "pyspark" in snippet.code or "spark_ext" in snippet.code


PLAIN = [s for s in PYTHON if not needs_spark(s)]
SPARK = [s for s in PYTHON if needs_spark(s)]


def spark_missing() -> str | None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "PySpark is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (Spark needs Java 17)"
    return None


# The README's SQS endpoint address (`leaseq serve --sqs-listen 127.0.0.1:9324`).
README_SQS = "127.0.0.1:9324"
# The README's OCI endpoint address (`leaseq serve --oci-listen 127.0.0.1:10443`).
README_OCI = "127.0.0.1:10443"
# The README's Azure connection string, and what it means on another address (the SDK's).
README_AZURE = "UseDevelopmentStorage=true"
AZURE_AT = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlm"
    "EtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
    "QueueEndpoint=http://{address}/devstoreaccount1;"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    sqs = f"127.0.0.1:{free_port()}"
    azure = f"127.0.0.1:{free_port()}"
    oci = f"127.0.0.1:{free_port()}"
    process = ServerProcess(
        "memory://",
        free_port(),
        tmp_path / "server.log",
        extra_args=("--sqs-listen", sqs, "--azure-listen", azure, "--oci-listen", oci),
    )
    process.sqs_address = sqs  # type: ignore[attr-defined]
    process.azure_address = azure  # type: ignore[attr-defined]
    process.oci_address = oci  # type: ignore[attr-defined]
    process.start()
    yield process
    if process.process is not None and process.process.poll() is None:
        process.terminate()


def child_env(server: ServerProcess, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEQ_")}
    env.update(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        # Spark's workers must run this interpreter, which has leaseq.
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.update(extra)
    return env


def as_written(code: str, target: str, sqs: str, demo: Path, azure: str = "", oci: str = "") -> str:
    code = code.replace("127.0.0.1:50051", target).replace(README_SQS, sqs)
    if oci:
        code = code.replace(README_OCI, oci)
    code = code.replace(README_AZURE, AZURE_AT.format(address=azure))
    code = code.replace("QueueClient()", f'QueueClient("{target}")')
    return code.replace("/tmp/leaseq-demo", str(demo))


def write_tls_files(directory: Path) -> None:
    """ca.pem, me.pem and me-key.pem, as the TLS snippet names them."""
    ca = CA("readme test CA")
    (directory / "ca.pem").write_bytes(ca.pem)
    client = ca.issue("me.internal", dns=("me.internal",))
    (directory / "me.pem").write_bytes(client.cert)
    (directory / "me-key.pem").write_bytes(client.key)


def test_the_readme_has_the_snippets_this_test_expects() -> None:
    assert len(PLAIN) >= 3
    assert len(SPARK) == 2
    assert "leaseq ack" in TOUR.code


def run_python(
    code: str, server: ServerProcess, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    write_tls_files(work)
    written = as_written(
        code,
        server.target,
        server.sqs_address,
        tmp_path / "leaseq-demo",
        server.azure_address,
        server.oci_address,
    )
    return subprocess.run(
        [sys.executable, "-c", written],
        cwd=work,
        env=child_env(
            server,
            LEASEQ_TOKEN="readme-test-token",
            # Spark's web UI is of no use here and costs start-up time.
            PYSPARK_SUBMIT_ARGS="--conf spark.ui.enabled=false pyspark-shell",
        ),
        capture_output=True,
        text=True,
        timeout=SNIPPET_TIMEOUT,
    )


@pytest.mark.slow
@pytest.mark.parametrize("snippet", PLAIN, ids=[s.name for s in PLAIN])
def test_python_snippet_runs(snippet: Snippet, server: ServerProcess, tmp_path: Path) -> None:
    result = run_python(snippet.code, server, tmp_path)
    assert result.returncode == 0, f"{snippet.name} failed:\n{result.stderr[-4000:]}"


@pytest.mark.slow
@pytest.mark.timeout(SNIPPET_TIMEOUT + 60)
def test_spark_snippets_run(server: ServerProcess, tmp_path: Path) -> None:
    # Both in one interpreter, one after the other, as a reader would paste them into one
    # session: one Spark start-up (the slow part) instead of two. Each uses its own queues.
    if why := spark_missing():
        pytest.skip(why)
    code = "".join(f"print({s.name!r}, flush=True)\n{s.code}" for s in SPARK)
    result = run_python(code, server, tmp_path)
    assert result.returncode == 0, (
        f"the Spark snippets failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    )
    # What the comments promise: 1000 messages consumed and acked, 1000 rows read by the stream.
    assert "received=1000, acked=1000" in result.stdout
    assert "1000" in result.stdout.splitlines()


@pytest.mark.slow
def test_the_tour_runs(server: ServerProcess, tmp_path: Path) -> None:
    # The installed `leaseq` script when it is on PATH (pip puts it next to the interpreter, or
    # in ~/.local/bin for --user installs, which PATH may lack); else the same CLI through -m.
    script = (
        "set -euo pipefail\n"
        f'command -v leaseq >/dev/null || leaseq() {{ {shlex.quote(sys.executable)} -m leaseq.cli "$@"; }}\n'
        + TOUR.code
    )
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=child_env(server, LEASEQ_TARGET=server.target),
        capture_output=True,
        text=True,
        timeout=SNIPPET_TIMEOUT,
    )
    assert result.returncode == 0, f"the tour failed:\n{result.stdout[-3000:]}\n{result.stderr}"
    assert "Error" not in result.stderr
    # What the comments promise: receipts printed by receive, and acks that worked.
    assert "receipts (leaseq ack|release|extend" in result.stdout
    # Of the four sent, the first receive holds two and one was dead-lettered: one is acked.
    assert "dead-lettered 1 of 1" in result.stderr
    assert "acknowledged 1 of 1" in result.stderr
