"""One measured run of a scenario over gRPC: make a queue, start the client processes, merge
their reports into a `RunResult`, and check that every message is accounted for.

- send   `producers` processes, each sending batches of `batch` back to back.
- cycle  coupled (default): `consumers` processes, each looping send(batch) -> receive that many
         -> delete them; a message counts once per full cycle.
         split (--producers given): `producers` processes send, `consumers` processes
         receive(batch) + delete, at the same time; msgs/s counts deletes. --producers 0 with
         --backlog N: consumers only, from N messages sent before the run.
- wake   one long poll waiting in one process, a sender in another (see workers.py).
- idle   `streams` idle follow streams from `consumers` processes; the server's CPU.
"""

from __future__ import annotations

import multiprocessing
import secrets
import time
from typing import Any

import grpc

from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc

from .database_cpu import DatabaseCpuMeter
from .driver import Outcome, Progress, Window, run_workers
from .report import ProgressBar
from .settings import MAX_BATCH, MAX_REQUEST_BYTES, RunResult, Settings
from .stats import summarize
from .workers import CHANNEL_OPTIONS, Job

FILL_BATCH = 5000
"""Messages per SendMessages when filling a backlog."""

MAIN_OPERATION = {"send": "send", "wake": "wake", "idle": None}


class Admin:
    """The few unary calls the driver makes itself (queue set-up, backlog, stats)."""

    def __init__(self, target: str) -> None:
        self.channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.QueueServiceStub(self.channel)

    def create_queue(self, name: str, body_bytes: int) -> None:
        config = pb.QueueConfig(max_in_flight=10_000_000, max_message_bytes=max(1024, body_bytes))
        self.stub.CreateQueue(pb.CreateQueueRequest(name=name, config=config), timeout=60)

    def fill(self, name: str, count: int, body_bytes: int, progress: Progress | None) -> None:
        size = max(1, min(count, FILL_BATCH, MAX_REQUEST_BYTES // max(body_bytes, 1)))
        request = pb.SendMessagesRequest(
            queue=name, entries=[pb.SendEntry(body=b"x" * body_bytes)] * size
        )
        sent = 0
        while sent < count:
            n = min(count - sent, size)
            if n < size:
                request = pb.SendMessagesRequest(queue=name, entries=request.entries[:n])
            self.stub.SendMessages(request, timeout=120)
            sent += n
            if progress is not None:
                progress(sent, sent)

    def send_each(self, name: str, count: int) -> None:
        while count > 0:
            n = min(count, MAX_BATCH)
            self.stub.SendMessages(
                pb.SendMessagesRequest(queue=name, entries=[pb.SendEntry(body=b"idle")] * n),
                timeout=60,
            )
            count -= n

    def stats(self, name: str) -> pb.QueueStats:
        return self.stub.GetQueueStats(pb.GetQueueStatsRequest(name=name), timeout=120).stats

    def delete_queue(self, name: str) -> None:
        self.stub.DeleteQueue(pb.DeleteQueueRequest(name=name), timeout=120)

    def close(self) -> None:
        self.channel.close()


def run_grpc(
    settings: Settings,
    batch: int,
    target: str,
    server_pid: int | None,
    bar: ProgressBar,
    database_meter: DatabaseCpuMeter | None = None,
) -> RunResult:
    queue = f"bench-{settings.scenario}-{batch}-{secrets.token_hex(4)}"
    admin = Admin(target)
    try:
        admin.create_queue(queue, settings.body_bytes)
        if settings.scenario == "cycle" and settings.backlog:
            with bar.run("filling the backlog", settings.backlog) as progress:
                admin.fill(queue, settings.backlog, settings.body_bytes, progress)
        jobs = _jobs(settings, batch, target, queue)
        after_end = None
        sent_at: list[float] = []
        if settings.scenario == "idle":

            def after_end(window: Window) -> None:  # one message per stream: all live?
                sent_at.append(time.monotonic())
                admin.send_each(queue, settings.streams)

        label = settings.scenario
        if settings.scenario in ("send", "cycle"):
            label += f" batch {batch}"
        with bar.run(label, settings.warmup + settings.duration) as progress:
            outcome = run_workers(
                jobs,
                settings.warmup,
                settings.duration,
                server_pid,
                progress,
                after_end,
                interval=settings.interval if settings.scenario in ("send", "cycle") else 0.0,
                database_meter=database_meter,
            )
        result = _merge(settings, batch, jobs, outcome)
        arrivals = [r["last_arrival"] for r in outcome.reports if r.get("last_arrival")]
        if sent_at and arrivals:
            # From the send of one message per stream to the last stream's delivery.
            result.extra["fanout_ms"] = round((max(arrivals) - sent_at[0]) * 1000, 3)
        if settings.scenario in ("send", "cycle"):
            result.extra["stats_p50_ms"] = _stats_p50_ms(admin, queue)
        result.check = _check(settings, admin.stats(queue), outcome.reports)
        if settings.target is not None:  # someone else's server: leave nothing behind
            admin.delete_queue(queue)
        return result
    finally:
        admin.close()


STATS_SAMPLES = 20


def _stats_p50_ms(admin: Admin, queue: str) -> float:
    """The median round trip of GetQueueStats on the queue as the run left it (with --backlog:
    a queue of that many waiting messages)."""
    times = []
    for _ in range(STATS_SAMPLES):
        start = time.perf_counter()
        admin.stats(queue)
        times.append(time.perf_counter() - start)
    return round(1000 * sorted(times)[len(times) // 2], 3)


def _jobs(settings: Settings, batch: int, target: str, queue: str) -> list[Job]:
    common: dict[str, Any] = dict(
        target=target, queue=queue, batch=batch, body_bytes=settings.body_bytes
    )
    if settings.scenario == "send":
        return [Job("send", i, **common) for i in range(settings.producers)]
    if settings.scenario == "cycle" and not settings.split:
        return [Job("cycle", i, **common) for i in range(settings.consumers)]
    if settings.scenario == "cycle":
        consume_only = settings.producers == 0
        jobs = [Job("produce", i, **common) for i in range(settings.producers)]
        jobs += [
            Job("consume", settings.producers + i, consume_only=consume_only, **common)
            for i in range(settings.consumers)
        ]
        return jobs
    if settings.scenario == "wake":
        sender_end, waiter_end = multiprocessing.get_context("spawn").Pipe()
        return [
            Job("wake_sender", 0, conn=sender_end, **common),
            Job("wake_waiter", 1, conn=waiter_end, **common),
        ]
    # idle: the streams spread over `consumers` processes
    processes = max(1, min(settings.consumers, settings.streams))
    share, extra = divmod(settings.streams, processes)
    return [
        Job("idle", i, streams=share + (1 if i < extra else 0), **common) for i in range(processes)
    ]


def _merge(settings: Settings, batch: int, jobs: list[Job], outcome: Outcome) -> RunResult:
    reports = outcome.reports
    elapsed = outcome.window.duration
    samples: dict[str, list[float]] = {}
    for report in reports:
        for kind, values in report["latency"].items():
            samples.setdefault(kind, []).extend(values)
    result = RunResult(settings=settings.describe(batch))
    result.latency = {kind: summarize(values) for kind, values in samples.items()}
    counted = sum(r.get("counted", 0) for r in reports)
    if settings.scenario == "cycle" and settings.split:
        consumers = [r for r, j in zip(reports, jobs) if j.kind == "consume"]
        producers = [r for r, j in zip(reports, jobs) if j.kind == "produce"]
        counted = sum(r["counted"] for r in consumers)
        if consumers and all(r["exhausted"] for r in consumers):
            # The backlog ran out before the end: the window ends at the last delete.
            last = max(r["last_done"] for r in consumers)
            if last > outcome.window.begin:
                elapsed = min(elapsed, last - outcome.window.begin)
            result.extra["backlog_exhausted"] = True
        if producers:
            sent = sum(r["counted"] for r in producers)
            result.extra["send_msgs_per_s"] = round(sent / outcome.window.duration, 1)
    if outcome.timeline:
        result.extra["intervals"] = _intervals(settings, jobs, outcome.timeline)
    result.messages = counted
    result.elapsed_s = round(elapsed, 3)
    result.msgs_per_s = round(counted / elapsed, 1) if elapsed > 0 else 0.0
    main = _main_operation(settings)
    if main in result.latency:
        result.p50_ms = result.latency[main].p50_ms
        result.p99_ms = result.latency[main].p99_ms
    result.server_cpu_percent = outcome.server_cpu_percent
    if settings.scenario in ("send", "cycle") and counted and outcome.server_cpu_seconds:
        result.server_cpu_us_per_msg = round(1e6 * outcome.server_cpu_seconds / counted, 2)
    result.database_cpu_percent = outcome.database_cpu_percent
    if settings.scenario in ("send", "cycle") and counted and outcome.database_cpu_seconds:
        result.database_cpu_us_per_msg = round(1e6 * outcome.database_cpu_seconds / counted, 2)
    client_cpu = sum(r.get("cpu_s", 0.0) for r in reports)
    if settings.scenario != "wake" and outcome.window.duration > 0:
        result.client_cpu_percent = round(100 * client_cpu / outcome.window.duration, 2)
    if settings.scenario == "wake":
        wake, expiry = result.latency.get("wake"), result.latency.get("expiry")
        result.extra["expiry_p50_ms"] = expiry.p50_ms if expiry else None
        result.extra["expiry_p99_ms"] = expiry.p99_ms if expiry else None
        result.msgs_per_s = round(
            ((wake.count if wake else 0) + (expiry.count if expiry else 0)) / elapsed, 1
        )
    if settings.scenario == "idle":
        result.extra["cpu_percent"] = outcome.server_cpu_percent
        result.extra["streams_open"] = sum(r["alive_at_end"] for r in reports)
        result.extra["failures"] = [f for r in reports for f in r["failures"]]
    return result


def _intervals(
    settings: Settings, jobs: list[Job], timeline: list[tuple[float, list[int]]]
) -> list[dict[str, float]]:
    """msgs/s of each interval (what the run counts: deletes of the consumers in split mode,
    else every worker's messages), with the interval's end in seconds since the window began;
    in split mode also the producers' send_msgs_per_s."""
    counting = [
        i
        for i, job in enumerate(jobs)
        if not (settings.scenario == "cycle" and settings.split) or job.kind == "consume"
    ]
    sending = [i for i, job in enumerate(jobs) if job.kind == "produce"]
    out = []
    for (t0, before), (t1, after) in zip(timeline, timeline[1:]):
        if t1 > t0:
            done = sum(after[i] - before[i] for i in counting)
            row = {"end_s": round(t1, 1), "msgs_per_s": round(done / (t1 - t0), 1)}
            if sending:
                sent = sum(after[i] - before[i] for i in sending)
                row["send_msgs_per_s"] = round(sent / (t1 - t0), 1)
            out.append(row)
    return out


def _main_operation(settings: Settings) -> str | None:
    if settings.scenario == "cycle":
        return "receive_delete" if settings.split else "cycle"
    return MAIN_OPERATION[settings.scenario]


def _check(
    settings: Settings, stats: pb.QueueStats, reports: list[dict[str, Any]]
) -> dict[str, Any]:
    """What the workers say they did against what the queue holds now."""
    sent = sum(r.get("sent", 0) for r in reports) + (
        settings.backlog if settings.scenario == "cycle" else 0
    )
    deleted = sum(r.get("deleted", 0) for r in reports)
    check: dict[str, Any] = {
        "sent": sent,
        "deleted": deleted,
        "queue_total": stats.total,
        "queue_deleted_total": stats.deleted_total,
    }
    if settings.scenario == "idle":
        streams = sum(r["streams"] for r in reports)
        received = sum(r["received"] for r in reports)
        with_one = sum(r["streams_with_one"] for r in reports)
        alive = sum(r["alive_at_end"] for r in reports)
        check.update(
            sent=settings.streams,
            streams=streams,
            alive_at_end=alive,
            received=received,
            streams_with_one=with_one,
        )
        check["ok"] = streams == alive == with_one == received == settings.streams
        return check
    # Every message sent was deleted (as many times as the workers deleted, no more, no less)
    # or is still in the queue.
    check["ok"] = stats.deleted_total == deleted and sent == deleted + stats.total
    if settings.scenario == "cycle" and not settings.split:
        # Each consumer deletes as many as it sends: what is left is the backlog.
        check["ok"] = check["ok"] and stats.total == settings.backlog
    return check
