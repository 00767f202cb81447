"""``leaseq bench SCENARIO``: throughput and latency of a real server over loopback gRPC.

See leaseq.bench for how each scenario measures; the README's "Benchmarks" section for examples.
"""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import urlsplit

import click

from .common import DURATION

BATCH_HELP = (
    "Messages per SendMessages / GetMessages / DeleteMessages call (1..10000). Repeat it, or give "
    "a comma list, to sweep: one run per size."
)


class BatchList(click.ParamType):  # type: ignore[type-arg]
    """ "100", or "1,10,100": batch sizes, each 1..10,000."""

    name = "N[,N...]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from leaseq.bench.settings import MAX_BATCH

        if isinstance(value, tuple):
            return value
        sizes = []
        for part in str(value).split(","):
            part = part.strip()
            try:
                size = int(part)
            except ValueError:
                self.fail(f"{part!r} is not a whole number", param, ctx)
            if not 1 <= size <= MAX_BATCH:
                self.fail(f"{size} is not in 1..{MAX_BATCH:,}", param, ctx)
            sizes.append(size)
        return tuple(sizes)


def _store(value: str) -> str:
    from leaseq.bench.settings import STORE_KINDS, STORE_SCHEMES

    if value in STORE_KINDS:
        return value
    if "://" in value and urlsplit(value).scheme in STORE_SCHEMES:
        return value
    raise click.BadParameter(
        f"{value!r}: use sqlite, memory, postgres, or a store URL "
        "(sqlite:///path.db, memory://, postgresql://...)",
        param_hint="--store",
    )


@click.command("bench")
@click.argument("scenario", type=click.Choice(["send", "cycle", "wake", "idle", "groups"]))
@click.option(
    "group_count",
    "--groups",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="groups: the FIFO backlog's groups.",
)
@click.option(
    "--store",
    default="sqlite",
    show_default=True,
    help="sqlite (a temp file, durable), memory, postgres (a fresh schema in --dsn, dropped "
    "afterwards), or a full store URL used as it is.",
)
@click.option(
    "--dsn",
    envvar="LEASEQ_BENCH_DSN",
    show_envvar=True,
    default="postgresql://postgres@127.0.0.1:5432/test",
    show_default=True,
    help="--store postgres: the database that gets the fresh schema.",
)
@click.option(
    "--target",
    metavar="HOST:PORT",
    default=None,
    help="Drive this running server instead of starting one (plaintext, no token).",
)
@click.option(
    "--server-pid",
    type=click.IntRange(min=1),
    default=None,
    help="With --target: the server's process id, for its CPU figures (this machine only).",
)
@click.option(
    "batches", "--batch", type=BatchList(), multiple=True, help=BATCH_HELP + "  [default: 100]"
)
@click.option(
    "--body-bytes",
    type=click.IntRange(0, 8 * 1024 * 1024),
    default=100,
    show_default=True,
    help="Bytes of each message body.",
)
@click.option(
    "--producers",
    type=click.IntRange(min=0, max=256),
    default=None,
    help="send: sending processes [default: 1]. cycle: given, producers send while --consumers "
    "receive and delete (split mode); 0 with --backlog: consume only.",
)
@click.option(
    "--consumers",
    type=click.IntRange(min=1, max=256),
    default=None,
    help="cycle: processes [default: 1], each doing send -> receive -> delete itself unless "
    "--producers is given. idle: client processes holding the streams [default: 2].",
)
@click.option(
    "--streams",
    type=click.IntRange(1, 9000),
    default=1000,
    show_default=True,
    help="idle: follow streams held open.",
)
@click.option(
    "--backlog",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="cycle: messages sent before the run (not timed).",
)
@click.option(
    "--duration",
    type=DURATION,
    default=30.0,
    show_default=True,
    help="Measured time of each run (after the warm-up).",
)
@click.option(
    "--warmup",
    type=DURATION,
    default=3.0,
    show_default=True,
    help="Time run before measuring, not counted.",
)
@click.option(
    "--interval",
    type=DURATION,
    default=0.0,
    help="send/cycle: also report the rate of every interval of this length (JSON: "
    "extra.intervals), e.g. 60s to compare a long run's first and last minute.",
)
@click.option(
    "--in-process",
    is_flag=True,
    help="send/cycle: also run the same loops against the store directly (no gRPC) and "
    "report the ratio gRPC / in-process.",
)
@click.option(
    "--baseline",
    is_flag=True,
    help="send/cycle: also run the raw SQLite loop (durable insert + lease + delete, or insert "
    "only for send; no gRPC) at each batch and report the ratio to it.",
)
@click.option("as_json", "--json", is_flag=True, help="Print one JSON object (no table, no bar).")
@click.option(
    "--plot",
    metavar="FILE.png",
    default=None,
    help="send/cycle: draw throughput by batch size (needs matplotlib: pip install "
    "'leaseq[bench]').",
)
def bench(
    scenario: str,
    group_count: int,
    store: str,
    dsn: str,
    target: str | None,
    server_pid: int | None,
    batches: tuple[tuple[int, ...], ...],
    body_bytes: int,
    producers: int | None,
    consumers: int | None,
    streams: int,
    backlog: int,
    duration: float,
    warmup: float,
    interval: float,
    in_process: bool,
    baseline: bool,
    as_json: bool,
    plot: str | None,
) -> None:
    """Measure a server: SCENARIO is send, cycle (send + receive + delete), wake (long-poll wake-up
    and lease-expiry redelivery latency), idle (server CPU with idle follow streams) or groups
    (against the store alone: receives of a FIFO backlog of --backlog messages, default
    1,000,000, over --groups groups against a plain queue's, and how long a FAIR queue's
    5-message group waits behind a 100,000-message one).

    Starts `leaseq serve` on a free loopback port (or drives --target) and runs the clients in
    separate processes. Prints a table, or with --json one object with msgs_per_s, p50_ms,
    p99_ms and the settings.
    """
    from leaseq.bench import Settings, run
    from leaseq.bench.report import ProgressBar, print_json, print_table
    from leaseq.bench.report import plot as draw_plot
    from leaseq.bench.settings import MAX_REQUEST_BYTES

    store_given = click.get_current_context().get_parameter_source("store") not in (
        click.core.ParameterSource.DEFAULT,
        None,
    )
    store = _store(store)
    sizes = tuple(dict.fromkeys(size for group in batches for size in group)) or (100,)
    if scenario == "groups":
        backlog = backlog or 1_000_000
        _bench_groups(store, dsn, backlog, group_count, sizes[0], duration, body_bytes, as_json)
        return
    if duration <= 0:
        raise click.BadParameter("must be more than 0", param_hint="--duration")
    if max(sizes) * max(body_bytes, 1) > MAX_REQUEST_BYTES:
        raise click.BadParameter(
            f"batch {max(sizes)} x {body_bytes} B bodies does not fit one 64 MiB gRPC message",
            param_hint="--batch/--body-bytes",
        )
    if in_process and scenario not in ("send", "cycle"):
        raise click.UsageError("--in-process is for the send and cycle scenarios")
    if baseline and scenario not in ("send", "cycle"):
        raise click.UsageError("--baseline is for the send and cycle scenarios")
    if in_process and target is not None and not store_given:
        raise click.UsageError(
            "--in-process with --target needs --store: the kind of store to run in-process"
        )
    if plot is not None and scenario not in ("send", "cycle"):
        raise click.UsageError("--plot draws throughput by batch size: send and cycle only")
    if server_pid is not None and target is None:
        raise click.UsageError("--server-pid goes with --target (a started server's is known)")
    if scenario != "cycle" and backlog:
        raise click.UsageError("--backlog is for the cycle scenario")
    split = scenario == "cycle" and producers is not None
    if scenario == "cycle" and producers == 0 and not backlog:
        raise click.UsageError("--producers 0 consumes a prefilled queue: give --backlog N")
    if scenario == "send" and producers == 0:
        raise click.BadParameter("send needs at least one producer", param_hint="--producers")
    if scenario in ("wake",) and (producers not in (None, 1) or consumers not in (None, 1)):
        raise click.UsageError("wake runs one waiter and one sender: no --producers/--consumers")
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.UsageError(
                "--plot needs matplotlib: pip install 'leaseq[bench]' (or pip install matplotlib)"
            ) from None
    default_producers = 1 if scenario in ("send", "wake") or split else 0
    default_consumers = 2 if scenario == "idle" else 1
    settings = Settings(
        scenario=scenario,
        store=store,
        batches=sizes if scenario in ("send", "cycle") else (1,),
        body_bytes=body_bytes,
        producers=default_producers if producers is None else producers,
        consumers=default_consumers if consumers is None else consumers,
        split=split,
        duration=float(duration),
        warmup=float(warmup),
        backlog=backlog,
        streams=streams,
        target=target,
        server_pid=server_pid,
        dsn=dsn,
        in_process=in_process,
        baseline=baseline,
        interval=float(interval),
    )
    bar = ProgressBar(enabled=not as_json and sys.stderr.isatty() and not os.environ.get("CI"))
    try:
        results = run(settings, bar)
    except KeyboardInterrupt:
        raise click.Abort() from None
    except Exception as error:  # a failed run: one message, not a traceback
        # One line: libpq's messages, for one, end with a hint on a line of its own.
        reason = " ".join(str(error).split())
        raise click.ClickException(f"the benchmark failed: {reason}") from error
    if as_json:
        print_json(results)
    else:
        print_table(results)
    if plot is not None:
        draw_plot(results, plot)
        if not as_json:
            click.echo(f"plot written to {plot}", err=True)


def _bench_groups(
    store: str,
    dsn: str,
    backlog: int,
    groups: int,
    batch: int,
    duration: float,
    body_bytes: int,
    as_json: bool,
) -> None:
    """`leaseq bench groups` (bench/groups.py)."""
    import json

    from leaseq.bench.groups import run_groups
    from leaseq.bench.launcher import store_for

    with store_for(store, dsn, prefix="bench_groups") as url:
        figures = run_groups(url, backlog, groups, batch, duration, body_bytes)
    if as_json:
        click.echo(json.dumps(figures))
        return
    for name, value in figures.items():
        click.echo(f"{name:28} {value}")
