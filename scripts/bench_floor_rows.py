"""The SQLite store against its floor, every row in one run: the figures table of the README's
"Against SQLite's own cost".

    python scripts/bench_floor_rows.py [--duration 15] [--json FILE]

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
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

# (row, scenario arguments, target)
_RATIO_ROWS = [
    ("cycle b1000, 1 consumer", ["cycle", "--batch", "1000", "--baseline"], 0.5),
    ("cycle b1000, 2 consumers", ["cycle", "--batch", "1000", "--consumers", "2", "--baseline"], 0.5),
    ("cycle b100, 2 consumers", ["cycle", "--batch", "100", "--consumers", "2", "--baseline"], 0.35),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=15.0, help="seconds measured per run")
    parser.add_argument("--json", metavar="FILE", help="also write every run's JSON here")
    args = parser.parse_args()

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()[0]
    runs: dict[str, dict[str, Any]] = {}
    lines = []
    for row, arguments, target in _RATIO_ROWS:
        run = runs[row] = _bench(arguments, args.duration)
        ratio = run["baseline_ratio"]
        lines.append(
            f"| {row} | {run['msgs_per_s']:,.0f} | {run['baseline_msgs_per_s']:,.0f} |"
            f" {ratio:.2f}x | {run['server_cpu_us_per_msg']} | >= {target}x |"
            f" {'yes' if ratio >= target else 'no'} |"
        )
    empty = runs["cycle b1000, empty"] = _bench(["cycle", "--batch", "1000"], args.duration)
    backlog = runs["cycle b1000, backlog 1M"] = _bench(
        ["cycle", "--batch", "1000", "--backlog", "1000000"], args.duration
    )
    ratio = backlog["msgs_per_s"] / empty["msgs_per_s"]
    stats_ms = backlog["stats_p50_ms"]
    lines.append(
        f"| cycle b1000 over 1,000,000 waiting | {backlog['msgs_per_s']:,.0f} |"
        f" {empty['msgs_per_s']:,.0f} (empty queue) | {ratio:.2f}x |"
        f" {backlog['server_cpu_us_per_msg']} | >= 0.8x; stats <= 5 ms ({stats_ms} ms) |"
        f" {'yes' if ratio >= 0.8 and stats_ms <= 5 else 'no'} |"
    )
    idle = runs["idle"] = _bench(["idle", "--streams", "1000"], args.duration)
    wake = runs["wake"] = _bench(["wake"], args.duration)
    lines.append(
        f"| 1,000 idle follow streams; wake p99 | idle {idle['cpu_percent']}% of a core;"
        f" wake p50 {wake['p50_ms']} ms, p99 {wake['p99_ms']} ms | | | |"
        f" <= 5%; <= 10 ms | {'yes' if idle['cpu_percent'] <= 5 and wake['p99_ms'] <= 10 else 'no'} |"
    )
    print(f"{started}, load average {load_before:.1f} before and {os.getloadavg()[0]:.1f} after;"
          f" {args.duration:g} s a run")
    print("| row | leaseq msgs/s | raw SQLite loop msgs/s | ratio | server µs CPU/msg | target | met |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(runs, out, indent=1)


if __name__ == "__main__":
    main()
