"""What a bench run is asked to do (`Settings`) and what one measured run found (`RunResult`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCENARIOS = ("send", "cycle", "wake", "idle")
STORE_KINDS = ("sqlite", "memory", "postgres")
STORE_SCHEMES = ("sqlite", "memory", "postgresql", "postgres")

MAX_BATCH = 10_000
"""Entries per SendMessages / GetMessages / DeleteMessages call (the server's limit)."""

MAX_BODY_BYTES = 8 * 1024 * 1024
"""The largest max_message_bytes a queue may have."""

MAX_REQUEST_BYTES = 60 * 1024 * 1024
"""batch x body must fit one gRPC message (64 MiB on both sides) with room for framing."""

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True)
class Settings:
    """One `leaseq bench` invocation, options resolved (see cli/bench_cmd.py)."""

    scenario: str
    store: str  # a kind (sqlite, memory, postgres) or a full store URL
    batches: tuple[int, ...] = (100,)
    body_bytes: int = 100
    producers: int = 1  # send and split cycle: sending processes (0: consume a backlog only)
    consumers: int = 1  # cycle: cycling / consuming processes; idle: client processes
    split: bool = False  # cycle: producers and consumers apart (else each consumer cycles)
    duration: float = 30.0
    warmup: float = 3.0
    backlog: int = 0  # messages sent before the run, not timed (cycle)
    streams: int = 1000  # idle: follow streams
    target: str | None = None  # drive this server instead of starting one
    server_pid: int | None = None  # with --target: the server process, for CPU figures
    dsn: str = DEFAULT_DSN  # --store postgres: the database (a fresh schema is used)
    in_process: bool = False
    baseline: bool = False  # also run the raw SQLite loop (bench/baseline.py) at each batch
    interval: float = 0.0  # send/cycle: also the rate of every interval of this many seconds

    def describe(self, batch: int) -> dict[str, Any]:
        """The settings of the run with this batch, as they go into the JSON."""
        out: dict[str, Any] = {
            "scenario": self.scenario,
            "store": self.store_label,
            "batch": batch,
            "body_bytes": self.body_bytes,
            # A coupled cycle has no producers of its own: each consumer sends what it cycles.
            "producers": None
            if self.scenario == "idle" or (self.scenario == "cycle" and not self.split)
            else self.producers,
            "consumers": self.consumers,
            "duration": self.duration,
            "warmup": self.warmup,
            "target": self.target,
        }
        if self.scenario == "cycle":
            out["mode"] = "split" if self.split else "coupled"
            out["backlog"] = self.backlog
        if self.scenario == "idle":
            out["streams"] = self.streams
        return out

    @property
    def store_label(self) -> str:
        """The store as shown: its kind, or the URL without a password."""
        if self.store in STORE_KINDS:
            return self.store
        from leaseq.server.store import redact_url

        return redact_url(self.store)


@dataclass
class Latency:
    """Percentiles of one kind of operation, in milliseconds."""

    count: int = 0
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


@dataclass
class RunResult:
    """One measured run (one scenario, one batch size)."""

    settings: dict[str, Any]
    msgs_per_s: float = 0.0
    messages: int = 0  # counted in the measured window
    elapsed_s: float = 0.0  # the measured window
    p50_ms: float | None = None  # of the main operation (see latency's first entry)
    p99_ms: float | None = None
    latency: dict[str, Latency] = field(default_factory=dict)
    server_cpu_percent: float | None = None  # of one core, over the measured window
    # Server CPU time (all threads) over the window per message counted: the figure that load
    # on the machine disturbs least (send, cycle).
    server_cpu_us_per_msg: float | None = None
    # --store postgres: the PostgreSQL backends of the server's connections (bench/database_cpu.py)
    database_cpu_percent: float | None = None
    database_cpu_us_per_msg: float | None = None
    client_cpu_percent: float | None = None  # all client processes together
    in_process_msgs_per_s: float | None = None
    in_process_p50_ms: float | None = None
    in_process_p99_ms: float | None = None
    ratio: float | None = None  # msgs_per_s / in_process_msgs_per_s
    baseline_msgs_per_s: float | None = None  # --baseline: the raw SQLite loop, same batch
    baseline_cpu_us_per_msg: float | None = None  # its own CPU time per message
    baseline_ratio: float | None = None  # msgs_per_s / baseline_msgs_per_s
    extra: dict[str, Any] = field(default_factory=dict)  # scenario-specific figures
    check: dict[str, Any] = field(default_factory=dict)  # message accounting; "ok" says it held

    def to_json(self) -> dict[str, Any]:
        out = dict(self.settings)
        body = asdict(self)
        del body["settings"], body["extra"]
        out.update(body)
        out.update(self.extra)
        return out
