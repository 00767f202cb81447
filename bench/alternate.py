"""Two builds of leaseq side by side: `leaseq bench send|cycle` alternated between them.

    python -m leaseq.bench.alternate A_LEASEQ B_LEASEQ [--rounds 4] [--batch 100,1000]
                                     [--duration 8] [--warmup 2] [--scenarios cycle,send]

A_LEASEQ and B_LEASEQ are the `leaseq` executables of two installs (two checkouts, each installed
into its own virtual environment). Each round runs every cell with both, the order swapped every
round, so a drift of the machine's speed falls on both alike; the table gives each side's median
msgs/s and server CPU per message and the median of the per-round ratios B/A with their range.
Each run is one `leaseq bench ... --json` (its own server, its own fresh store).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile


def _run(exe: str, scenario: str, batch: int, args: argparse.Namespace) -> tuple[float, float]:
    command = [exe, "bench", scenario, "--batch", str(batch), "--duration", str(args.duration)]
    command += ["--warmup", str(args.warmup), "--json"]
    with tempfile.TemporaryDirectory() as cwd:
        try:
            done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False)
        except OSError as error:
            sys.exit(f"Error: cannot run {exe}: {error.strerror}")
    if done.returncode != 0:
        sys.exit(
            f"Error: {' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-400:]}"
        )
    figures = json.loads(done.stdout)
    if not figures["check"]["ok"]:
        sys.exit(f"Error: the count check failed: {figures['check']}")
    return float(figures["msgs_per_s"]), float(figures["server_cpu_us_per_msg"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a_leaseq")
    parser.add_argument("b_leaseq")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch", default="100,1000")
    parser.add_argument("--scenarios", default="cycle,send")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    args = parser.parse_args()
    cells = [(s, int(b)) for s in args.scenarios.split(",") for b in args.batch.split(",")]
    sides = {"A": args.a_leaseq, "B": args.b_leaseq}
    results: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    for round_no in range(args.rounds):
        for scenario, batch in cells:
            order = "AB" if round_no % 2 == 0 else "BA"
            for side in order:
                rate, cpu = _run(sides[side], scenario, batch, args)
                results.setdefault((scenario, batch, side), []).append((rate, cpu))
                print(
                    f"round {round_no} {scenario} {batch} {side}: {rate:,.0f} msgs/s, "
                    f"{cpu:.1f} us/msg",
                    file=sys.stderr,
                    flush=True,
                )
    print(
        "| scenario | batch | A msgs/s | B msgs/s | B/A (range) | A server us/msg | B server us/msg |"
    )
    print("|---|---|---|---|---|---|---|")
    for scenario, batch in cells:
        a, b = results[(scenario, batch, "A")], results[(scenario, batch, "B")]
        ratios = [bb[0] / aa[0] for aa, bb in zip(a, b, strict=True)]
        print(
            f"| {scenario} | {batch} | {statistics.median(x[0] for x in a):,.0f} "
            f"| {statistics.median(x[0] for x in b):,.0f} | {statistics.median(ratios):.3f} "
            f"({min(ratios):.2f}-{max(ratios):.2f}) | {statistics.median(x[1] for x in a):.1f} "
            f"| {statistics.median(x[1] for x in b):.1f} |"
        )


if __name__ == "__main__":
    main()
