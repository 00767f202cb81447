"""scripts/instructions_per_message.py: its two measured loops run as the script's children do
(valgrind itself is left out: the loops are what would break when the store's API moves)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "instructions_per_message.py"


@pytest.mark.parametrize("side", ["store", "raw"])
@pytest.mark.parametrize("scenario", ["cycle", "send"])
def test_each_measured_loop_runs(side: str, scenario: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--child", side, "--scenario", scenario,
         "--batch", "10", "--batches", "2"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_a_batch_out_of_range_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--batch", "0"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "--batch takes 1 to 10,000" in done.stderr
