#!/usr/bin/env python3
"""Instructions per message of the SQLite store against the raw SQLite loop, load-independent.

    python scripts/instructions_per_message.py                      # cycle, batch 1000
    python scripts/instructions_per_message.py --scenario send --batch 100

Rates on this shared machine drift by a fifth from one minute to the next; instruction counts do
not. Each side runs in a child process under `valgrind --tool=callgrind` twice, for N and for 3N
batches after the same warm-up, and the difference of the two totals over 2N batches is the
instructions one message costs, start-up and imports cancelled out:

- store: the SQLite store's own calls, in process, as the service makes them for plain messages
  (`send_bodies`; `receive` with the service's byte limit; `delete` of the receipts), on its
  writer thread with group commit and synchronous=FULL: everything but gRPC and protobuf.
- raw: `leaseq.bench.baseline`'s loop (what `leaseq bench --baseline` runs), straight on SQLite.

Instructions are user-space only: the kernel's share (fsync, futex wake-ups) and waiting do not
show here, so this answers "how much work per message", not "how fast". Needs valgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WARMUP_BATCHES = 5
BODY = b"x" * 100


def _store_child(scenario: str, batch: int, batches: int) -> None:
    from leaseq.server.budget import CALL_BYTES
    from leaseq.server.store.base import QueueConfig
    from leaseq.server.store.sqlite.store import SqliteStore

    async def run() -> None:
        with tempfile.TemporaryDirectory(prefix="leaseq-ipm-") as tmp:
            store = SqliteStore(Path(tmp) / "store.db")
            await store.open()
            await store.create_queue("q", QueueConfig(max_in_flight=10_000_000))
            bodies = [BODY] * batch

            async def once() -> None:
                await store.send_bodies("q", bodies)
                if scenario == "cycle":
                    got = await store.receive("q", batch, None, "", "", CALL_BYTES)
                    await store.delete("q", [m.receipt for m in got.messages])

            for _ in range(WARMUP_BATCHES + batches):
                await once()
            await store.close()

    asyncio.run(run())


def _raw_child(scenario: str, batch: int, batches: int) -> None:
    from leaseq.bench import baseline

    with tempfile.TemporaryDirectory(prefix="leaseq-ipm-raw-") as tmp:
        db = baseline.connect(os.path.join(tmp, "raw.db"))
        loop = baseline._LOOPS[scenario]
        for _ in range(WARMUP_BATCHES + batches):
            loop(db, batch, BODY)
        db.close()


def _count(side: str, scenario: str, batch: int, batches: int) -> int:
    """callgrind's total for one child run."""
    with tempfile.TemporaryDirectory(prefix="leaseq-ipm-cg-") as tmp:
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
            sys.executable, __file__, "--child", side,
            "--scenario", scenario, "--batch", str(batch), "--batches", str(batches),
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode != 0 or found is None:
            raise SystemExit(f"valgrind failed for {side}: {done.stderr.strip()[-500:]}")
        return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=["cycle", "send"], default="cycle")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=0, help="N (default: 20,000 messages)")
    parser.add_argument("--child", choices=["store", "raw"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.batch <= 10_000:
        parser.error("--batch takes 1 to 10,000")
    batches = args.batches or max(2, 20_000 // args.batch)
    if args.child == "store":
        return _store_child(args.scenario, args.batch, batches)
    if args.child == "raw":
        return _raw_child(args.scenario, args.batch, batches)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    messages = 2 * batches * args.batch
    print(f"{args.scenario}, batch {args.batch}: instructions per message"
          f" (callgrind, {batches} vs {3 * batches} batches)")
    for side in ("store", "raw"):
        low = _count(side, args.scenario, args.batch, batches)
        high = _count(side, args.scenario, args.batch, 3 * batches)
        print(f"  {side:5s} {(high - low) / messages:10,.0f}")


if __name__ == "__main__":
    main()
