"""`python -m leaseq.bench.alternate`: two installs side by side (here the same one twice)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _leaseq_script(folder: Path) -> str:
    script = folder / "leaseq"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m leaseq.cli "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def _alternate(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "leaseq.bench.alternate", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def test_alternates_the_two_sides_and_prints_one_row_per_cell(tmp_path: Path) -> None:
    leaseq = _leaseq_script(tmp_path)
    done = _alternate(
        leaseq,
        leaseq,
        "--rounds",
        "2",
        "--scenarios",
        "send",
        "--batch",
        "10",
        "--duration",
        "0.3",
        "--warmup",
        "0",
    )
    assert done.returncode == 0, done.stderr
    progress = [line.split(":")[0] for line in done.stderr.splitlines()]
    # Round 0 runs A first, round 1 B first.
    assert progress == [
        "round 0 send 10 A",
        "round 0 send 10 B",
        "round 1 send 10 B",
        "round 1 send 10 A",
    ]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| send | 10 |")]
    assert len(rows) == 1, done.stdout


def test_a_missing_executable_is_one_error_line(tmp_path: Path) -> None:
    done = _alternate(str(tmp_path / "nothing"), str(tmp_path / "nothing"), "--rounds", "1")
    assert done.returncode != 0
    assert done.stderr.startswith("Error: cannot run"), done.stderr
    assert "Traceback" not in done.stderr
