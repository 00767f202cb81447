"""Runs a set of worker processes through one timed window and collects what they report.

Start protocol: every worker connects and reports "ready"; then the driver writes the window
(start, begin = start + warm-up, end = begin + duration) and sets the start event, so no process
start-up or connection set-up falls in the window. Server CPU (and, on PostgreSQL, the database
backends' CPU: database_cpu.py) is read at begin and end.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .cpu import CpuMeter
from .database_cpu import DatabaseCpuMeter
from .workers import Job, worker_main

READY_TIMEOUT = 60.0
RESULT_TIMEOUT = 90.0
"""After the window: the time workers get to finish their last operation and report."""


class WorkerFailed(RuntimeError):
    pass


@dataclass
class Window:
    start: float
    begin: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.begin


@dataclass
class Outcome:
    reports: list[dict[str, Any]]  # one per job, in job order
    window: Window
    server_cpu_percent: float | None
    server_cpu_seconds: float | None = None  # over the window
    database_cpu_percent: float | None = None  # the store's PostgreSQL backends (None: unknown)
    database_cpu_seconds: float | None = None
    # With an interval: (seconds since the window began, each job's counter) at every interval's
    # end, the first at 0 (the counters are what the workers report as progress).
    timeline: list[tuple[float, list[int]]] = field(default_factory=list)


Progress = Callable[[float, int], None]
"""Called about 5 times a second with (seconds since start, messages so far)."""


class _Collector:
    """Reads the workers' messages: "ready", "ok" (the report) or "error" (a traceback)."""

    def __init__(self, results, processes) -> None:
        self.results = results
        self.processes = processes
        self.ready = 0
        self.reports: dict[int, dict[str, Any]] = {}

    def poll(self, timeout: float) -> None:
        try:
            index, what, payload = (
                self.results.get(timeout=timeout) if timeout > 0 else (self.results.get_nowait())
            )
        except queue_module.Empty:
            self._check_exits()
            return
        if what == "error":
            raise WorkerFailed(f"a client process failed:\n{payload}")
        if what == "ready":
            self.ready += 1
        else:
            self.reports[index] = payload

    def _check_exits(self) -> None:
        # A worker ends with status 0 after it put its report (or its error) on the queue, which
        # the next poll reads; any other status means it died without saying why.
        for process in self.processes:
            if process.exitcode not in (None, 0):
                raise WorkerFailed(f"client process {process.name} exited ({process.exitcode})")

    def wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerFailed(f"client processes did not report {what} within {timeout:.0f} s")
            self.poll(min(remaining, 0.5))


def run_workers(
    jobs: list[Job],
    warmup: float,
    duration: float,
    server_pid: int | None,
    progress: Progress | None = None,
    after_end: Callable[[Window], None] | None = None,
    interval: float = 0.0,
    database_meter: DatabaseCpuMeter | None = None,
) -> Outcome:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    start = ctx.Event()
    timing = ctx.RawArray("d", 4)
    counters = ctx.RawArray("q", len(jobs))
    processes = [
        ctx.Process(
            target=worker_main,
            args=(job, results, start, timing, counters),
            name=f"leaseq-bench-{job.kind}-{job.index}",
            daemon=True,
        )
        for job in jobs
    ]
    collector = _Collector(results, processes)
    try:
        for process in processes:
            process.start()
        collector.wait(lambda: collector.ready >= len(jobs), READY_TIMEOUT, "ready")
        now = time.monotonic()
        window = Window(now, now + warmup, now + warmup + duration)
        timing[0], timing[1], timing[2] = window.start, window.begin, window.end
        meter = CpuMeter(server_pid)
        metering = False
        timeline: list[tuple[float, list[int]]] = []
        next_sample = window.begin
        start.set()
        while True:
            now = time.monotonic()
            if not metering and now >= window.begin:
                meter.start()
                if database_meter is not None:
                    database_meter.start()
                metering = True
            if interval > 0 and now >= next_sample and next_sample < window.end:
                timeline.append((now - window.begin, list(counters)))
                next_sample += interval
            if now >= window.end:
                break
            if progress is not None:
                progress(now - window.start, sum(counters))
            collector.poll(0)
            pause = min(0.2, window.end - now)
            if interval > 0:
                pause = min(pause, max(0.001, next_sample - now))
            if not metering:
                pause = min(pause, max(0.001, window.begin - now))
            time.sleep(max(0.0, pause))
        cpu = meter.stop() if metering else None
        database_cpu = database_meter.stop() if metering and database_meter is not None else None
        if interval > 0:
            timeline.append((time.monotonic() - window.begin, list(counters)))
        if progress is not None:
            progress(window.end - window.start, sum(counters))
        if after_end is not None:
            after_end(window)
        collector.wait(lambda: len(collector.reports) >= len(jobs), RESULT_TIMEOUT, "results")
        for process in processes:
            process.join(timeout=10)
        return Outcome(
            [collector.reports[job.index] for job in jobs],
            window,
            cpu,
            meter.cpu_seconds,
            database_cpu,
            database_meter.cpu_seconds if database_meter else None,
            timeline,
        )
    finally:
        for process in processes:  # only after a failure: the others ended above
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        results.close()
