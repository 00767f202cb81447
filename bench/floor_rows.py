"""The SQLite store against its floor, every row in one run: the figures table of the README's
"Against SQLite's own cost".

    python -m leaseq.bench.floor_rows [--duration 15] [--rounds 1] [--json FILE]

Runs one after the other, each a `leaseq bench ... --json` of its own (a fresh server and file):

| row | command |
|---|---|
| cycle, batch 1000, 1 consumer | `leaseq bench cycle --batch 1000 --baseline` |
| cycle, batch 1000, 2 consumers | `leaseq bench cycle --batch 1000 --consumers 2 --baseline` |
| cycle, batch 100, 2 consumers | `leaseq bench cycle --batch 100 --consumers 2 --baseline` |
| send, batch 100, 2 producers | `leaseq bench send --batch 100 --producers 2 --baseline` |
| cycle, batch 1000, empty queue | `leaseq bench cycle --batch 1000` |
| the same over a backlog of 1,000,000 | `leaseq bench cycle --batch 1000 --backlog 1000000` |
| 1,000 idle follow streams | `leaseq bench idle --streams 1000` |
| wake-up after a send, lease expiry to redelivery | `leaseq bench wake` |

and prints one table: each row's figure, the raw SQLite loop's beside it (`--baseline`, run in
the same minutes) and their ratio, the server's CPU per message, and the target it is held to.
This machine's speed drifts by a fifth from hour to hour, so read the ratios, not the rates.
About 3 minutes at the default 15 s a run (the backlog run fills its million first).

`--rounds N` runs the ratio rows and the backlog pair N times over, round after round (each
round every row once, so drift reaches every row alike), and prints each row's median ratio, its
range and in how many rounds it met its target: near a target, one run is a coin toss. The idle
and wake rows run once. `--json FILE` gets every run: row -> a list, one run per round.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from statistics import median
from typing import Any

# (row, scenario arguments, target)
_RATIO_ROWS = [
    ("cycle b1000, 1 consumer", ["cycle", "--batch", "1000", "--baseline"], 0.5),
    (
        "cycle b1000, 2 consumers",
        ["cycle", "--batch", "1000", "--consumers", "2", "--baseline"],
        0.5,
    ),
    (
        "cycle b100, 2 consumers",
        ["cycle", "--batch", "100", "--consumers", "2", "--baseline"],
        0.35,
    ),
    ("send b100, 2 producers", ["send", "--batch", "100", "--producers", "2", "--baseline"], 0.6),
]


def _bench(arguments: list[str], duration: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "leaseq.cli", "bench", *arguments, "--json"]
    if arguments[0] in ("send", "cycle", "idle", "wake"):
        command += ["--duration", f"{duration:g}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"leaseq bench {' '.join(arguments)} failed: {last}")
    return json.loads(done.stdout)


def _ratio_cell(ratios: list[float]) -> str:
    if len(ratios) == 1:
        return f"{ratios[0]:.2f}x"
    return f"{median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def _met_cell(met: list[bool]) -> str:
    if len(met) == 1:
        return "yes" if met[0] else "no"
    return f"{sum(met)} of {len(met)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=15.0, help="seconds measured per run")
    parser.add_argument("--rounds", type=int, default=1, help="times every ratio row runs")
    parser.add_argument("--json", metavar="FILE", help="also write every run's JSON here")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.rounds):
        for row, arguments, _target in _RATIO_ROWS:
            runs.setdefault(row, []).append(_bench(arguments, args.duration))
        runs.setdefault("cycle b1000, empty", []).append(
            _bench(["cycle", "--batch", "1000"], args.duration)
        )
        runs.setdefault("cycle b1000, backlog 1M", []).append(
            _bench(["cycle", "--batch", "1000", "--backlog", "1000000"], args.duration)
        )
    lines = []
    for row, _arguments, target in _RATIO_ROWS:
        row_runs = runs[row]
        ratios = [run["baseline_ratio"] for run in row_runs]
        lines.append(
            f"| {row} | {median([r['msgs_per_s'] for r in row_runs]):,.0f} |"
            f" {median([r['baseline_msgs_per_s'] for r in row_runs]):,.0f} |"
            f" {_ratio_cell(ratios)} |"
            f" {median([r['server_cpu_us_per_msg'] for r in row_runs]):.2f} | >= {target}x |"
            f" {_met_cell([ratio >= target for ratio in ratios])} |"
        )
    empties, backlogs = runs["cycle b1000, empty"], runs["cycle b1000, backlog 1M"]
    ratios = [b["msgs_per_s"] / e["msgs_per_s"] for e, b in zip(empties, backlogs)]
    stats = [b["stats_p50_ms"] for b in backlogs]
    lines.append(
        f"| cycle b1000 over 1,000,000 waiting | {median([b['msgs_per_s'] for b in backlogs]):,.0f} |"
        f" {median([e['msgs_per_s'] for e in empties]):,.0f} (empty queue) | {_ratio_cell(ratios)} |"
        f" {median([b['server_cpu_us_per_msg'] for b in backlogs]):.2f} |"
        f" >= 0.8x; stats <= 5 ms ({max(stats)} ms at most) |"
        f" {_met_cell([r >= 0.8 and ms <= 5 for r, ms in zip(ratios, stats)])} |"
    )
    idle = _bench(["idle", "--streams", "1000"], args.duration)
    wake = _bench(["wake"], args.duration)
    runs["idle"], runs["wake"] = [idle], [wake]
    lines.append(
        f"| 1,000 idle follow streams; wake p99 | idle {idle['cpu_percent']}% of a core;"
        f" wake p50 {wake['p50_ms']} ms, p99 {wake['p99_ms']} ms | | | |"
        f" <= 5%; <= 10 ms | {'yes' if idle['cpu_percent'] <= 5 and wake['p99_ms'] <= 10 else 'no'} |"
    )
    rounds = f"; {args.rounds} rounds, medians" if args.rounds > 1 else ""
    print(
        f"{started}, load average {load_before:.1f} before and {os.getloadavg()[0]:.1f} after;"
        f" {args.duration:g} s a run{rounds}"
    )
    print(
        "| row | leaseq msgs/s | raw SQLite loop msgs/s | ratio | server µs CPU/msg | target | met |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(runs, out, indent=1)


if __name__ == "__main__":
    main()
