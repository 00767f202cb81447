"""scripts/pg_send_cost.py: its kinds of send (the four, and --parts') run against the real
PostgreSQL, each in a schema of its own that is gone afterwards (the figures are the script's
business)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from leaseq.bench.launcher import free_port
from tests.support.postgres import connect, require_postgres

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pg_send_cost.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


def _schemas() -> set[str]:
    with connect() as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'leaseq_send_cost_%'"
        ).fetchall()
    return {row[0] for row in rows}


def test_each_kind_is_measured_and_its_schema_dropped() -> None:
    dsn = require_postgres()
    before = _schemas()
    done = _run("--dsn", dsn, "--batch", "3", "--statements", "4", "--rounds", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rounds = [line.split() for line in lines if line.split()[0] in ("1", "2", "median")]
    assert [row[0] for row in rounds] == ["1", "2", "median"]
    for row in rounds:
        figures = [float(figure) for figure in row[1:]]
        assert len(figures) == 8 and all(figure >= 0 for figure in figures)
        assert all(figure > 0 for figure in figures[1::2])  # each statement took some time
    assert lines[-1].startswith("backend CPU per message: bodies / any ")
    assert _schemas() == before


def test_parts_take_one_part_away_at_a_time() -> None:
    dsn = require_postgres()
    before = _schemas()
    done = _run("--dsn", dsn, "--batch", "3", "--statements", "4", "--rounds", "1", "--parts")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split()[1::3] == [
        "bodies", "untriggered", "bare", "unindexed", "anonymous", "lean", "pgmq",
    ]
    median = next(line.split() for line in lines if line.startswith("median"))
    assert len(median) == 1 + 2 * 7
    assert lines[-1].startswith("backend CPU per message against pgmq: bodies ")
    assert _schemas() == before


def test_an_unreachable_database_is_one_line_and_exit_1() -> None:
    done = _run("--dsn", f"postgresql://nobody@127.0.0.1:{free_port()}/x")
    assert done.returncode == 1
    assert done.stderr.startswith("pg_send_cost.py: connection failed")
    assert "Traceback" not in done.stderr


def test_a_count_below_one_is_a_usage_error() -> None:
    done = _run("--rounds", "0")
    assert done.returncode == 2
    assert "--batch, --statements and --rounds take 1 or more" in done.stderr
