"""Issue 15's receive rows over a backlog, pgmq and leaseq measured in one run: C consumers
loop receive(B) + delete on a queue that holds N messages, nothing sending meanwhile.

    python scripts/pg_backlog_rows.py [--backlog 600000] [--consumers 1,4] [--batch 100]
                                      [--duration 10] [--rounds 1] [--no-floor] [--json FILE]

Each round runs, for every consumer count, in an order that turns from round to round:

- pgmq: its own SQL from C psycopg processes as the peers harness drives it (autocommit,
  prepared; `pgmq.read(q, 30, B)` then `pgmq.delete(q, ids)`), on a fresh queue filled first
  with N messages of 100-byte JSON strings (`pgmq.send_batch` of 1,000, not timed) and then
  ANALYZEd, as autovacuum would on a server that runs it. It needs pgmq in --pgmq-dsn's
  database: the peers harness installs it there on its first run.
- leaseq: `leaseq bench cycle --store postgres --dsn DSN --producers 0 --consumers C --backlog N`
  (a fresh `leaseq serve` and schema).
- the floor: `scripts/floor_server.py --store postgres` (pgmq's statements behind a grpc.aio
  process and nothing of leaseq) driven by the same bench with --target: the most any server
  in leaseq's place can do on this machine (--no-floor leaves it out).

Prints each cell's acked msgs/s and its share of pgmq's in the same round, and the CPU of a
message: leaseq's server and database backends, the floor's server, pgmq's database backends,
and each one's clients. The machine's speed drifts: read the ratios of one round.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

from leaseq.bench.database_cpu import DatabaseCpuMeter, with_application_name
from leaseq.bench.launcher import free_port
from leaseq.bench.settings import DEFAULT_DSN

PGMQ_DSN = "postgresql://postgres@127.0.0.1:5432/peers_pgmq"  # the peers harness's database
VT_SECONDS = 30  # the lease of a read, as the harness's and leaseq bench's
FILL_BATCH = 1000
BODY = '"' + "x" * 98 + '"'  # a JSON string of 100 characters, as the harness sends to pgmq
FLOOR = Path(__file__).resolve().with_name("floor_server.py")


# --- pgmq -------------------------------------------------------------------------------------


def _pgmq_consumer(dsn: str, queue: str, batch: int, ready, go, window, out, release) -> None:
    """One consumer process: read + delete until the window's end (time.time()); reports the
    messages whose delete completed inside the window, its own CPU seconds over it and whether
    a read found the queue empty."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor()
        ready.set()
        go.wait()
        start, end = window[0], window[1]
        acked, cpu0, emptied = 0, None, False
        while (now := time.time()) < end:
            if cpu0 is None and now >= start:
                cpu0 = time.process_time()
            cur.execute("SELECT msg_id FROM pgmq.read(%s, %s, %s)", (queue, VT_SECONDS, batch),
                        prepare=True)
            ids = [row[0] for row in cur.fetchall()]
            if ids:
                cur.execute("SELECT * FROM pgmq.delete(%s, %s::bigint[])", (queue, ids),
                            prepare=True)
                cur.fetchall()
                if start <= time.time() < end:
                    acked += len(ids)
            else:
                emptied = True
        cpu = time.process_time() - (cpu0 if cpu0 is not None else time.process_time())
        out.put((acked, cpu, emptied))
        release.wait(120)  # the connection stays until the database's CPU has been read


def run_pgmq(dsn: str, backlog: int, consumers: int, batch: int, duration: float,
             warmup: float) -> dict[str, Any]:
    """One pgmq cell: a fresh queue of `backlog` messages, then `consumers` processes."""
    import psycopg

    queue = f"backlog_rows_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise SystemExit(f"cannot reach --pgmq-dsn {dsn}: {str(exc).strip().splitlines()[0]}")
    with conn:
        if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'pgmq'").fetchone() is None:
            raise SystemExit(f"pgmq is not installed in {dsn}: run the peers harness once"
                             " (../shared/peers/run.py --systems pgmq ...)")
        conn.execute("SELECT pgmq.create(%s)", (queue,))
        try:
            for start in range(0, backlog, FILL_BATCH):
                bodies = [BODY] * min(FILL_BATCH, backlog - start)
                conn.execute("SELECT pgmq.send_batch(%s, %s::jsonb[])", (queue, bodies))
            conn.execute(f'ANALYZE pgmq."q_{queue}"')
            return _consume(with_application_name(dsn), queue, consumers, batch, duration, warmup)
        finally:
            conn.execute("SELECT pgmq.drop_queue(%s)", (queue,))


def _consume(dsn: str, queue: str, consumers: int, batch: int, duration: float,
             warmup: float) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    out, go, release = context.Queue(), context.Event(), context.Event()
    window = context.Array("d", 2)
    readies = [context.Event() for _ in range(consumers)]
    # Daemons: when this process gives up (a consumer that never connects), the others, waiting
    # for `go`, end with it instead of holding its exit.
    processes = [
        context.Process(target=_pgmq_consumer, daemon=True,
                        args=(dsn, queue, batch, ready, go, window, out, release))
        for ready in readies
    ]
    for process in processes:
        process.start()
    for ready in readies:
        if not ready.wait(60):
            raise SystemExit("a pgmq consumer did not connect within 60 s")
    window[0] = time.time() + warmup
    window[1] = window[0] + duration
    go.set()
    meter = DatabaseCpuMeter(dsn)  # the consumers' backends, by their application_name
    time.sleep(max(0.0, window[0] - time.time()))
    meter.start()
    time.sleep(max(0.0, window[1] - time.time()))
    database_percent = meter.stop()
    release.set()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join()
    rate = sum(acked for acked, _, _ in results) / duration
    client_percent = 100 * sum(cpu for _, cpu, _ in results) / duration
    return {"msgs_per_s": rate, "database_cpu_us_per_msg": _per_msg(database_percent, rate),
            "client_cpu_us_per_msg": _per_msg(client_percent, rate),
            "emptied": any(emptied for _, _, emptied in results)}


def _per_msg(percent: float | None, rate: float) -> float | None:
    """% of one core at `rate` msgs/s -> µs of CPU a message."""
    return None if percent is None or rate <= 0 else round(percent * 1e4 / rate, 2)


# --- leaseq and the floor, through leaseq bench -----------------------------------------------


def _bench(arguments: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "leaseq.cli", "bench", "cycle", *arguments, "--json"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"leaseq bench cycle {' '.join(arguments)} failed: {last}")
    return json.loads(done.stdout)


def _from_bench(run: dict[str, Any]) -> dict[str, Any]:
    rate = run["msgs_per_s"]
    return {"msgs_per_s": rate, "server_cpu_us_per_msg": run.get("server_cpu_us_per_msg"),
            "database_cpu_us_per_msg": run.get("database_cpu_us_per_msg"),
            "client_cpu_us_per_msg": _per_msg(run.get("client_cpu_percent"), rate),
            "emptied": run["check"]["queue_total"] == 0}


def run_leaseq(dsn: str, common: list[str]) -> dict[str, Any]:
    return _from_bench(_bench(["--store", "postgres", "--dsn", dsn, *common]))


def run_floor(dsn: str, common: list[str]) -> dict[str, Any]:
    listen = f"127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [sys.executable, str(FLOOR), "--store", "postgres", "--dsn", dsn, "--listen", listen],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "floor server on ...": it serves
        if server.poll() is not None:
            raise SystemExit("scripts/floor_server.py did not start")
        run = _bench(["--target", listen, "--server-pid", str(server.pid), *common])
    finally:
        server.terminate()
        server.wait(60)
    return _from_bench(run)


# --- the table --------------------------------------------------------------------------------


def _cpu(cell: dict[str, Any]) -> str:
    parts = [cell.get(k) for k in ("server_cpu_us_per_msg", "database_cpu_us_per_msg",
                                   "client_cpu_us_per_msg")]
    return " / ".join("-" if v is None else f"{v:.1f}" for v in parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=600_000, help="messages queued first")
    parser.add_argument("--consumers", default="1,4", help="consumer processes, a comma list")
    parser.add_argument("--batch", type=int, default=100, help="messages per receive")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured a cell")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds run before measuring")
    parser.add_argument("--rounds", type=int, default=1, help="times every cell runs")
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="leaseq's and the floor's database")
    parser.add_argument("--pgmq-dsn", default=PGMQ_DSN, help="a database with pgmq installed")
    parser.add_argument("--no-floor", action="store_true", help="leave the floor server out")
    parser.add_argument("--json", metavar="FILE", help="also write every cell's figures here")
    args = parser.parse_args()
    try:
        counts = [int(c) for c in args.consumers.split(",")]
    except ValueError:
        parser.error(f"--consumers: a comma list of numbers, not {args.consumers!r}")
    if args.rounds < 1 or args.backlog < 1 or args.batch < 1 or min(counts) < 1:
        parser.error("--rounds, --backlog, --batch and --consumers must be at least 1")
    if args.duration <= 0 or args.warmup < 0:
        parser.error("--duration must be positive and --warmup not negative")

    systems = ["pgmq", "leaseq"] + ([] if args.no_floor else ["floor"])
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()[0]
    cells: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for round_number in range(args.rounds):
        for consumers in counts:
            common = ["--producers", "0", "--consumers", str(consumers), "--backlog",
                      str(args.backlog), "--batch", str(args.batch), "--duration",
                      f"{args.duration:g}", "--warmup", f"{args.warmup:g}"]
            turn = round_number % len(systems)
            for system in systems[turn:] + systems[:turn]:
                print(f"round {round_number + 1}, {consumers} consumer(s): {system}",
                      file=sys.stderr, flush=True)
                if system == "pgmq":
                    cell = run_pgmq(args.pgmq_dsn, args.backlog, consumers, args.batch,
                                    args.duration, args.warmup)
                elif system == "leaseq":
                    cell = run_leaseq(args.dsn, common)
                else:
                    cell = run_floor(args.dsn, common)
                cells.setdefault(str(consumers), {}).setdefault(system, []).append(cell)

    print(f"{started}, load average {load_before:.1f} before and {os.getloadavg()[0]:.1f} after;"
          f" receive({args.batch}) + delete over a backlog of {args.backlog:,},"
          f" {args.duration:g} s a cell, {args.rounds} round(s)")
    print(_table(cells, systems))
    if args.json:
        Path(args.json).write_text(json.dumps(cells, indent=1))
    emptied = [f"{system} with {consumers} consumer(s)" for consumers, by_system in cells.items()
               for system, runs in by_system.items() if any(run["emptied"] for run in runs)]
    if emptied:
        raise SystemExit(f"the backlog ran out during the window ({', '.join(emptied)}): those"
                         " figures count an empty queue; give a bigger --backlog")


def _share(cell: dict[str, Any], pgmq: dict[str, Any]) -> str:
    if pgmq["msgs_per_s"] <= 0:
        return f"{cell['msgs_per_s']:,.0f}"
    return f"{cell['msgs_per_s']:,.0f} ({cell['msgs_per_s'] / pgmq['msgs_per_s']:.2f}x)"


def _table(cells: dict[str, dict[str, list[dict[str, Any]]]], systems: list[str]) -> str:
    others = systems[1:]  # every system beside pgmq, each as a share of pgmq's rate
    header = ["consumers", "round", *systems,
              *(f"{s}: CPU µs/msg server / database / clients" for s in systems)]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for consumers, by_system in cells.items():
        pgmq_runs = by_system["pgmq"]
        for index, pgmq in enumerate(pgmq_runs):
            row = [consumers, str(index + 1), f"{pgmq['msgs_per_s']:,.0f}"]
            row += [_share(by_system[s][index], pgmq) for s in others]
            row += [_cpu(by_system[s][index]) for s in systems]
            lines.append("| " + " | ".join(row) + " |")
        if len(pgmq_runs) > 1 and all(p["msgs_per_s"] > 0 for p in pgmq_runs):
            shares = [median(c["msgs_per_s"] / p["msgs_per_s"]
                             for c, p in zip(by_system[s], pgmq_runs)) for s in others]
            row = [consumers, "median", ""] + [f"{x:.2f}x" for x in shares] + [""] * len(systems)
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
