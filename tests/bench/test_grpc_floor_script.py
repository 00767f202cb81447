"""python -m leaseq.bench.grpc_floor --per-rpc: each hot RPC's call, on leaseq and on the do-nothing server,
runs end to end (a memory or SQLite store and a few calls: the figures themselves are the script's
business, not a test's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

MODULE = "leaseq.bench.grpc_floor"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", MODULE, *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_per_rpc_prints_a_row_for_each_rpc(store: str) -> None:
    done = _run("--per-rpc", "--store", store, "--batch", "5", "--calls", "3")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[3:]}
    assert set(rows) == {"SendMessages", "GetMessages", "DeleteMessages", "GetQueueStats"}
    for method, figures in rows.items():
        leaseq, nothing, adds = (float(figure) for figure in figures[:3])
        assert leaseq >= 0 and nothing >= 0, method
        assert abs(adds - (leaseq - nothing)) <= 1, method  # rounded to whole µs


def test_a_batch_out_of_range_is_a_usage_error() -> None:
    done = _run("--per-rpc", "--batch", "0")
    assert done.returncode == 2
    assert "--batch takes 1 to 10,000" in done.stderr
