"""Showing results: a progress bar while running (stderr), a table at the end, one JSON object
with --json, and --plot's PNG of throughput by batch size."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from .settings import RunResult


class ProgressBar:
    """One bar per measured run: time through warm-up + duration, and messages so far."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Progress | None = None

    @contextmanager
    def run(self, label: str, total_seconds: float) -> Iterator[Any]:
        """A callback (seconds since start, messages so far) for the driver; None when off."""
        if not self.enabled:
            yield None
            return
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[messages]:>12,} msgs"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        with progress:
            task = progress.add_task(label, total=total_seconds, messages=0)

            def update(elapsed: float, messages: int) -> None:
                progress.update(task, completed=min(elapsed, total_seconds), messages=messages)

            yield update


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _where(settings: dict[str, Any]) -> str:
    """What was measured: the store of a server started here, or --target's address."""
    if settings.get("target"):
        return f"target={settings['target']}"
    return f"store={settings['store']}"


def print_table(results: list[RunResult], stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout
    # Not a terminal (a file, a pipe): wide enough that no column is cut.
    console = Console(file=stream, width=None if stream.isatty() else 150)
    first = results[0].settings
    title = (
        f"leaseq bench {first['scenario']}  {_where(first)}  body={first['body_bytes']} B  "
        f"duration={first['duration']:g} s (+{first['warmup']:g} s warm-up)"
    )
    table = Table(title=title)
    scenario = first["scenario"]
    if scenario == "wake":
        for column in ("latency", "samples", "p50 ms", "p90 ms", "p99 ms", "max ms"):
            table.add_column(column, justify="right" if column != "latency" else "left")
        for result in results:
            for kind, label in (
                ("wake", "send -> waiting long poll"),
                ("send", "  of which: the send's round trip"),
                ("expiry", "lease expiry -> redelivery"),
            ):
                lat = result.latency.get(kind)
                if lat is None:
                    continue
                table.add_row(
                    label,
                    str(lat.count),
                    _ms(lat.p50_ms),
                    _ms(lat.p90_ms),
                    _ms(lat.p99_ms),
                    _ms(lat.max_ms),
                )
    elif scenario == "idle":
        for column in (
            "streams",
            "client procs",
            "server CPU % of a core",
            "client CPU %",
            "streams live",
            "fan-out ms",
        ):
            table.add_column(column, justify="right")
        for result in results:
            table.add_row(
                str(result.settings["streams"]),
                str(result.settings["consumers"]),
                _ms(result.extra.get("cpu_percent")),
                _ms(result.client_cpu_percent),
                f"{result.check.get('streams_with_one', 0)}/{result.settings['streams']}",
                _ms(result.extra.get("fanout_ms")),
            )
    else:
        columns = ["batch", "prod/cons", "msgs/s", "p50 ms", "p99 ms"]
        in_process = any(r.in_process_msgs_per_s is not None for r in results)
        if in_process:
            columns += ["in-process msgs/s", "grpc/in-process"]
        baseline = any(r.baseline_msgs_per_s is not None for r in results)
        if baseline:
            columns += ["raw SQLite msgs/s", "x raw", "raw µs/msg"]
        columns += ["server CPU %", "server µs/msg"]
        database = any(r.database_cpu_percent is not None for r in results)
        if database:
            columns += ["database CPU %", "database µs/msg"]
        columns += ["client CPU %"]
        for column in columns:
            table.add_column(column, justify="right")
        for result in results:
            s = result.settings
            if scenario == "send":
                who = f"{s['producers']}/-"
            elif s.get("mode") == "split":
                who = f"{s['producers']}/{s['consumers']}"
            else:
                who = f"-/{s['consumers']}"
            row = [
                f"{s['batch']:,}",
                who,
                _rate(result.msgs_per_s),
                _ms(result.p50_ms),
                _ms(result.p99_ms),
            ]
            if in_process:
                row += [
                    _rate(result.in_process_msgs_per_s),
                    "-" if result.ratio is None else f"{result.ratio:.2f}x",
                ]
            if baseline:
                row += [
                    _rate(result.baseline_msgs_per_s),
                    "-" if result.baseline_ratio is None else f"{result.baseline_ratio:.2f}x",
                    _ms(result.baseline_cpu_us_per_msg),
                ]
            row += [_ms(result.server_cpu_percent), _ms(result.server_cpu_us_per_msg)]
            if database:
                row += [_ms(result.database_cpu_percent), _ms(result.database_cpu_us_per_msg)]
            row += [_ms(result.client_cpu_percent)]
            table.add_row(*row)
    console.print(table)
    for result in results:
        if not result.check.get("ok", True):
            console.print(f"[red]accounting check failed:[/red] {result.check}")
        if result.extra.get("backlog_exhausted"):
            console.print("the backlog ran out before the end: the window ends at the last delete")
        if result.extra.get("stats_p50_ms") is not None:
            console.print(
                f"batch {result.settings['batch']}: GetQueueStats on the queue after "
                f"the run: p50 {result.extra['stats_p50_ms']:,.2f} ms"
            )
        if result.extra.get("send_msgs_per_s") is not None:
            console.print(
                f"batch {result.settings['batch']}: producers sent "
                f"{result.extra['send_msgs_per_s']:,.0f} msgs/s"
            )


def to_json(results: list[RunResult]) -> dict[str, Any]:
    """One object: the run itself; or, with several batch sizes, the common settings, the
    figures as lists in batch order (batch, msgs_per_s, p50_ms, p99_ms, ...) and `runs` (one
    object per batch size, as for a single run)."""
    runs = [r.to_json() for r in results]
    if len(runs) == 1:
        return runs[0]
    common = {k: v for k, v in runs[0].items() if k in results[0].settings and k != "batch"}
    sweep = {key: [r[key] for r in runs] for key in ("batch", "msgs_per_s", "p50_ms", "p99_ms")}
    if any(r.get("ratio") is not None for r in runs):
        sweep["in_process_msgs_per_s"] = [r["in_process_msgs_per_s"] for r in runs]
        sweep["ratio"] = [r["ratio"] for r in runs]
    if any(r.get("baseline_ratio") is not None for r in runs):
        sweep["baseline_msgs_per_s"] = [r["baseline_msgs_per_s"] for r in runs]
        sweep["baseline_ratio"] = [r["baseline_ratio"] for r in runs]
    return {**common, **sweep, "runs": runs}


def print_json(results: list[RunResult]) -> None:
    sys.stdout.write(json.dumps(to_json(results)) + "\n")


def plot(results: list[RunResult], path: str) -> None:
    """Throughput by batch size (log x), with the in-process figures when measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = [r.settings["batch"] for r in results]
    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.plot(batches, [r.msgs_per_s for r in results], marker="o", label="gRPC")
    if any(r.in_process_msgs_per_s is not None for r in results):
        axes.plot(
            batches,
            [r.in_process_msgs_per_s or 0 for r in results],
            marker="s",
            linestyle="--",
            label="in-process (store only)",
        )
    first = results[0].settings
    axes.set_xscale("log")
    axes.set_xlabel("batch size")
    axes.set_ylabel("messages / s")
    axes.set_title(
        f"leaseq bench {first['scenario']} ({first['store']}, {first['body_bytes']} B bodies)"
    )
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
