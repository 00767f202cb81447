"""A whole `leaseq bench` run: the server (started here, or --target's), one gRPC run per batch
size, then, with --in-process, the same runs against the store alone, and with --baseline the raw
SQLite loop (baseline.py) at each batch size, once the server is gone."""

from __future__ import annotations

from contextlib import ExitStack
from urllib.parse import urlsplit

from .database_cpu import DatabaseCpuMeter, with_application_name
from .inprocess import run_in_process
from .launcher import running_server, store_for
from .report import ProgressBar
from .scenarios import run_grpc
from .settings import RunResult, Settings


def in_process_store(settings: Settings) -> tuple[str, str]:
    """(store kind, DSN) for the in-process run: the same kind, always a fresh store (a temp file,
    a new schema of the URL's database)."""
    if settings.store in ("sqlite", "memory", "postgres"):
        return settings.store, settings.dsn
    scheme = urlsplit(settings.store).scheme
    if scheme in ("postgresql", "postgres"):
        return "postgres", settings.store
    return scheme, settings.dsn  # sqlite or memory


def run(settings: Settings, bar: ProgressBar) -> list[RunResult]:
    total = settings.warmup + settings.duration
    results: list[RunResult] = []
    with ExitStack() as stack:
        database_meter = None
        if settings.target is not None:
            target, pid = settings.target, settings.server_pid
        else:
            url = stack.enter_context(store_for(settings.store, settings.dsn))
            if settings.store == "postgres":  # a fresh schema: its backends are the bench's own
                url = with_application_name(url)
                database_meter = DatabaseCpuMeter(url)
            server = stack.enter_context(running_server(url))
            target, pid = server.target, server.pid
        for batch in settings.batches:
            results.append(run_grpc(settings, batch, target, pid, bar, database_meter))
    if settings.in_process:
        kind, dsn = in_process_store(settings)
        for result in results:
            batch = result.settings["batch"]
            with (
                store_for(kind, dsn, prefix="bench_inproc") as url,
                bar.run(f"in-process batch {batch}", total) as progress,
            ):
                figures = run_in_process(settings, batch, url, progress)
            result.in_process_msgs_per_s = figures["msgs_per_s"]
            result.in_process_p50_ms = figures["p50_ms"]
            result.in_process_p99_ms = figures["p99_ms"]
            if figures["msgs_per_s"]:
                result.ratio = round(result.msgs_per_s / figures["msgs_per_s"], 4)
    if settings.baseline:
        # Imported here so that `python -m leaseq.bench.baseline` runs it fresh (runpy).
        from .baseline import run_baseline

        for result in results:
            batch = result.settings["batch"]
            with bar.run(f"raw SQLite loop batch {batch}", total) as progress:
                figures = run_baseline(
                    settings.scenario,
                    batch,
                    settings.duration,
                    settings.body_bytes,
                    warmup=settings.warmup,
                )
                if progress is not None:
                    progress(total, figures["messages"])
            result.baseline_msgs_per_s = figures["msgs_per_s"]
            result.baseline_cpu_us_per_msg = figures["cpu_us_per_msg"]
            if figures["msgs_per_s"]:
                result.baseline_ratio = round(result.msgs_per_s / figures["msgs_per_s"], 4)
    return results
