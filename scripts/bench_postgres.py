"""The PostgreSQL store's figures: batch-100 sends, and receive(100)+delete with 1 and 4 consumers,
through gRPC against a real `leaseq serve --store postgresql://...`.

Usage: python scripts/bench_postgres.py [--dsn postgresql://postgres@127.0.0.1:5432/test]
                                        [--seconds 10] [--backlog 200000] [--pool-max 10]

The same as `python scripts/bench_cycle.py --store postgres --batch 100 --consumers 1
--consumers 4` (see bench_cycle.py for what is measured); any of its options may be added.
The server uses a fresh schema of the database, dropped afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cycle import main  # noqa: E402

if __name__ == "__main__":
    defaults = ["--store", "postgres"]
    given = sys.argv[1:]
    if "--batch" not in given:
        defaults += ["--batch", "100"]
    if "--consumers" not in given:
        defaults += ["--consumers", "1", "--consumers", "4"]
    main(defaults + given)
