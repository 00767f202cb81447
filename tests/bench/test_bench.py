"""`leaseq bench` for real: a `leaseq serve` child process, client processes, tiny durations.

Only the shape of the output and the accounting are asserted, never a speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import grpc
import pytest
from click.testing import CliRunner

from leaseq.bench.database_cpu import DatabaseCpuMeter, with_application_name
from leaseq.cli.main import cli
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support import postgres
from tests.support.process import server_process

pytestmark = pytest.mark.slow

SHORT = ["--duration", "0.6", "--warmup", "0"]
SETTINGS = ("scenario", "store", "batch", "body_bytes", "producers", "consumers", "duration")


def bench(*args: str) -> dict[str, Any]:
    """Run `leaseq bench ... --json` as a command; its one JSON object."""
    done = subprocess.run(
        [sys.executable, "-m", "leaseq.cli", "bench", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout  # exactly one JSON object, nothing else
    return json.loads(lines[0])


def assert_run(run: dict[str, Any], scenario: str, store: str) -> None:
    for key in SETTINGS + ("msgs_per_s", "p50_ms", "p99_ms", "latency", "check"):
        assert key in run, key
    assert run["scenario"] == scenario
    assert run["store"] == store
    assert run["msgs_per_s"] > 0
    assert run["p50_ms"] is not None and 0 < run["p50_ms"] <= run["p99_ms"]
    for figures in run["latency"].values():
        if figures["count"]:
            assert figures["p50_ms"] <= figures["p90_ms"] <= figures["p99_ms"] <= figures["max_ms"]
    assert run["check"]["ok"], run["check"]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_send(store: str) -> None:
    run = bench(
        "send", "--store", store, "--batch", "10", "--producers", "2", "--body-bytes", "50", *SHORT
    )
    assert_run(run, "send", store)
    assert (run["batch"], run["producers"], run["body_bytes"]) == (10, 2, 50)
    # Every message sent is still in the queue, and the counted ones are a part of them.
    assert run["check"]["queue_total"] == run["check"]["sent"] >= run["messages"] > 0
    assert run["server_cpu_percent"] is not None


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_cycle_coupled_with_in_process_and_sweep(store: str) -> None:
    out = bench("cycle", "--store", store, "--batch", "1,20", "--in-process", *SHORT)
    assert out["batch"] == [1, 20] and len(out["runs"]) == 2
    assert out["msgs_per_s"] == [r["msgs_per_s"] for r in out["runs"]]
    for run, batch in zip(out["runs"], [1, 20]):
        assert_run(run, "cycle", store)
        assert run["batch"] == batch and run["mode"] == "coupled"
        # Everything sent came back and was deleted exactly once.
        check = run["check"]
        assert check["sent"] == check["deleted"] == check["queue_deleted_total"]
        assert check["queue_total"] == 0
        assert run["in_process_msgs_per_s"] > 0
        assert run["ratio"] == pytest.approx(
            run["msgs_per_s"] / run["in_process_msgs_per_s"], rel=0.01, abs=1e-4
        )


@pytest.mark.parametrize("scenario", ["send", "cycle"])
def test_baseline_and_server_cpu_per_message(scenario: str) -> None:
    """--baseline runs the raw SQLite loop at each batch of the sweep and reports the ratio; the
    server's CPU per message is reported for send and cycle."""
    out = bench(scenario, "--store", "sqlite", "--batch", "5,50", "--baseline", *SHORT)
    assert out["batch"] == [5, 50]
    assert out["baseline_ratio"] == [r["baseline_ratio"] for r in out["runs"]]
    for run in out["runs"]:
        assert_run(run, scenario, "sqlite")
        assert run["baseline_msgs_per_s"] > 0 and run["baseline_cpu_us_per_msg"] > 0
        assert run["baseline_ratio"] == pytest.approx(
            run["msgs_per_s"] / run["baseline_msgs_per_s"], rel=0.01, abs=1e-4
        )
        assert run["server_cpu_us_per_msg"] is not None and run["server_cpu_us_per_msg"] >= 0
        assert run["stats_p50_ms"] > 0


def test_coupled_cycle_over_a_backlog() -> None:
    """The backlog stays: each cycle sends what it deletes, so the accounting holds with the
    backlog's messages left in the queue (and stats are timed on that queue)."""
    run = bench("cycle", "--store", "sqlite", "--batch", "50", "--backlog", "2000", *SHORT)
    assert_run(run, "cycle", "sqlite")
    assert run["backlog"] == 2000 and run["check"]["queue_total"] == 2000
    assert run["stats_p50_ms"] > 0


def test_baseline_loops_alone(tmp_path) -> None:
    """The raw loops count whole batches and leave no file behind."""
    from leaseq.bench.baseline import run_baseline

    for scenario in ("send", "cycle"):
        figures = run_baseline(scenario, 7, 0.05, directory=str(tmp_path))
        assert figures["messages"] > 0 and figures["messages"] % 7 == 0
        assert figures["msgs_per_s"] > 0
    assert list(tmp_path.iterdir()) == []  # the temporary files are gone


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_cycle_split(store: str) -> None:
    run = bench(
        "cycle", "--store", store, "--batch", "10", "--producers", "1", "--consumers", "2", *SHORT
    )
    assert_run(run, "cycle", store)
    assert run["mode"] == "split" and (run["producers"], run["consumers"]) == (1, 2)
    assert run["send_msgs_per_s"] > 0
    assert "receive_delete" in run["latency"] and "produce" in run["latency"]


def test_cycle_consume_backlog() -> None:
    run = bench(
        "cycle",
        "--store",
        "memory",
        "--batch",
        "100",
        "--producers",
        "0",
        "--consumers",
        "2",
        "--backlog",
        "3000",
        "--duration",
        "5",
        "--warmup",
        "0",
    )
    assert_run(run, "cycle", "memory")
    # A small backlog runs out early: all of it was consumed, the window ended there.
    assert run["backlog_exhausted"] is True
    assert run["check"]["deleted"] == 3000 and run["check"]["queue_total"] == 0
    assert run["elapsed_s"] < 5


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_wake(store: str) -> None:
    run = bench("wake", "--store", store, "--duration", "1", "--warmup", "0")
    assert_run(run, "wake", store)
    assert run["latency"]["wake"]["count"] > 0 and run["latency"]["expiry"]["count"] > 0
    assert run["p50_ms"] == run["latency"]["wake"]["p50_ms"]
    assert 0 <= run["expiry_p50_ms"] <= run["expiry_p99_ms"]
    # Each round's message was delivered and deleted by the waiter: none left.
    assert run["check"]["queue_total"] == 0


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_idle(store: str) -> None:
    run = bench("idle", "--store", store, "--streams", "300", "--consumers", "2", *SHORT)
    for key in SETTINGS + ("msgs_per_s", "p50_ms", "p99_ms", "cpu_percent", "streams"):
        assert key in run, key
    assert run["streams"] == 300 and run["streams_open"] == 300
    assert 0 <= run["cpu_percent"] < 400
    # Every stream stayed live: after the window each got exactly one of 300 messages.
    assert run["check"]["ok"], run["check"]
    assert run["check"]["streams_with_one"] == 300 and not run["failures"]


def test_target_existing_server(tmp_path) -> None:
    with server_process("memory://", tmp_path) as server:
        run = bench(
            "send",
            "--target",
            server.target,
            "--server-pid",
            str(server.process.pid),
            "--store",
            "memory",
            "--in-process",
            "--batch",
            "5",
            *SHORT,
        )
        assert_run(run, "send", "memory")
        assert run["target"] == server.target
        assert run["in_process_msgs_per_s"] > 0 and run["server_cpu_percent"] is not None
        with grpc.insecure_channel(server.target) as channel:  # its queue is gone again
            queues = pb_grpc.QueueServiceStub(channel).ListQueues(pb.ListQueuesRequest()).queues
            assert list(queues) == []


def test_postgres() -> None:
    postgres.require_postgres()
    before = _bench_schemas()
    run = bench(
        "cycle",
        "--store",
        "postgres",
        "--dsn",
        postgres.dsn(),
        "--batch",
        "10",
        "--in-process",
        *SHORT,
    )
    assert_run(run, "cycle", "postgres")
    assert run["in_process_msgs_per_s"] > 0
    # The database on this machine: its backends' CPU beside the server's.
    assert run["database_cpu_percent"] > 0 and run["database_cpu_us_per_msg"] > 0
    assert not (_bench_schemas() - before)  # the fresh schemas were dropped


def test_database_cpu_of_no_backend_is_unknown() -> None:
    """A meter whose application_name no backend has gives no figure, not 0%."""
    postgres.require_postgres()
    meter = DatabaseCpuMeter(with_application_name(postgres.dsn()))
    meter.start()
    assert meter.stop() is None and meter.cpu_seconds is None


def test_database_cpu_only_for_postgres() -> None:
    run = bench("send", "--store", "sqlite", "--batch", "10", *SHORT)
    assert run["database_cpu_percent"] is None and run["database_cpu_us_per_msg"] is None


def _bench_schemas() -> set[str]:
    with postgres.connect() as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench%'"
        ).fetchall()
    return {r[0] for r in rows}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["send", "--batch", "0"], "0 is not in 1..10,000"),
        (["send", "--batch", "10001"], "10001 is not in 1..10,000"),
        (["send", "--batch", "1,x"], "'x' is not a whole number"),
        (["send", "--store", "mysql"], "use sqlite, memory, postgres"),
        (["fly"], "'fly' is not one of"),
        (["wake", "--in-process"], "--in-process is for the send and cycle"),
        (["idle", "--baseline"], "--baseline is for the send and cycle"),
        (["send", "--in-process", "--target", "127.0.0.1:1"], "needs --store"),
        (["cycle", "--producers", "0"], "give --backlog"),
        (["send", "--duration", "soon"], "is not a duration"),
        (["send", "--batch", "10000", "--body-bytes", "100000"], "does not fit"),
        (["idle", "--plot", "x.png"], "send and cycle only"),
    ],
)
def test_bad_options(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["bench", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_unreachable_database_is_one_line() -> None:
    """libpq's message ends with a hint on a line of its own; the bench prints one line."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaseq.cli",
            "bench",
            "send",
            "--store",
            "postgres",
            "--dsn",
            "postgresql://postgres@127.0.0.1:1/test",
            *SHORT,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: the benchmark failed: "), done.stderr
    assert "Connection refused" in lines[0]


def test_plot_needs_matplotlib(tmp_path) -> None:
    path = tmp_path / "send.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        result = CliRunner().invoke(cli, ["bench", "send", "--plot", str(path)])
        assert result.exit_code == 2 and "pip install 'leaseq[bench]'" in result.output
        return
    out = bench("send", "--store", "memory", "--batch", "1,10", "--plot", str(path), *SHORT)
    assert len(out["runs"]) == 2 and path.stat().st_size > 0
