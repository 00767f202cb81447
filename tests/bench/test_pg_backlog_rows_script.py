"""scripts/pg_backlog_rows.py against the real PostgreSQL: its leaseq and floor cells over a
backlog, the backlog running out told as such, the table, and a clear refusal where pgmq is not
installed (pgmq's own SQL is not part of the project: the peers harness installs it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.support.postgres import require_postgres

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pg_backlog_rows.py"

# A script, not a module of the package: loaded from its file.
_spec = importlib.util.spec_from_file_location("pg_backlog_rows", SCRIPT)
assert _spec is not None and _spec.loader is not None
pg_backlog_rows = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pg_backlog_rows)

SMALL = ["--producers", "0", "--consumers", "1", "--batch", "50", "--duration", "0.5",
         "--warmup", "0"]


def test_leaseq_and_floor_cells_over_a_backlog() -> None:
    dsn = require_postgres()
    for run in (pg_backlog_rows.run_leaseq, pg_backlog_rows.run_floor):
        # A backlog no consumer empties in half a second.
        cell = run(dsn, [*SMALL, "--backlog", "60000"])
        assert cell["msgs_per_s"] > 0 and not cell["emptied"], (run, cell)
        assert cell["server_cpu_us_per_msg"] > 0 and cell["client_cpu_us_per_msg"] > 0
        # One that runs out: the cell says so, rather than counting an empty queue's rate.
        assert run(dsn, [*SMALL, "--backlog", "100"])["emptied"], run


def test_a_database_without_pgmq_is_refused_in_one_line() -> None:
    dsn = require_postgres()  # the test database: pgmq is installed elsewhere, if at all
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--pgmq-dsn", dsn, "--dsn", dsn, "--backlog", "10",
         "--consumers", "1", "--duration", "0.1"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("pgmq is not installed in ")
    assert "Traceback" not in done.stderr


def test_the_table_gives_each_round_and_the_median_share() -> None:
    def cell(rate: float) -> dict[str, object]:
        return {"msgs_per_s": rate, "server_cpu_us_per_msg": None,
                "database_cpu_us_per_msg": 30.0, "client_cpu_us_per_msg": 5.25, "emptied": False}

    cells = {"4": {"pgmq": [cell(40_000), cell(20_000)], "leaseq": [cell(10_000), cell(10_000)]}}
    lines = pg_backlog_rows._table(cells, ["pgmq", "leaseq"]).splitlines()
    assert lines[2] == "| 4 | 1 | 40,000 | 10,000 (0.25x) | - / 30.0 / 5.2 | - / 30.0 / 5.2 |"
    assert lines[3].startswith("| 4 | 2 | 20,000 | 10,000 (0.50x) |")
    assert lines[4].startswith("| 4 | median |  | 0.38x |")
