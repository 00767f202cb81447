"""`--baseline`: the floor under the SQLite store, measured in the same run.

The raw loop does what a durable queue must do per batch, straight on SQLite in this process, with
nothing else: no gRPC, no protobuf, no receipts beyond a random token per delivery. WAL and
synchronous=FULL as the store, the same three commits per cycle (send; lease; delete). A server
can only approach it, so `leaseq bench ... --baseline` prints the server's rate as a ratio of it
(the targets are such ratios, measured side by side because a machine's speed drifts).

- cycle: insert `batch` rows, COMMIT; select the first `batch` visible rows, lease each with a
  random token, read them back, COMMIT; delete each by (id, token), COMMIT.
- send: the insert and its COMMIT only.

Also reported: the loop's own CPU time per message (this thread's), the figure to hold the
server's `server_cpu_us_per_msg` against.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

SCENARIOS = ("send", "cycle")

_SCHEMA = """CREATE TABLE m (id INTEGER PRIMARY KEY, queue TEXT, body BLOB, enqueued_at REAL,
expires_at REAL, visible_at REAL, receipt TEXT, delivery_count INTEGER)"""
_INDEX = "CREATE INDEX m_vis ON m (queue, visible_at, id)"
_INSERT = (
    "INSERT INTO m (queue, body, enqueued_at, expires_at, visible_at, delivery_count)"
    " VALUES (?, ?, ?, ?, ?, 0)"
)


def connect(path: str, check_same_thread: bool = True) -> sqlite3.Connection:
    """The raw loop's file: WAL, synchronous=FULL, its one table and index."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute(_SCHEMA)
    db.execute(_INDEX)
    return db


def insert(db: sqlite3.Connection, bodies: list[bytes]) -> None:
    """One durable send: the rows, COMMIT."""
    now = time.time()
    _insert_rows(db, [("q", body, now, now + 604800, now) for body in bodies])


def _insert_rows(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    db.execute("BEGIN")
    db.executemany(_INSERT, rows)
    db.execute("COMMIT")


def lease(db: sqlite3.Connection, batch: int) -> list[tuple[int, bytes, str]]:
    """One durable receive: the first `batch` visible rows leased for 30 s, each with a random
    token; (id, body, token) of each, COMMIT."""
    now = time.time()
    db.execute("BEGIN")
    rows = db.execute(
        "SELECT id FROM m WHERE queue = 'q' AND visible_at <= ? ORDER BY visible_at, id LIMIT ?",
        (now, batch),
    ).fetchall()
    db.executemany(
        "UPDATE m SET visible_at = ?, receipt = ?, delivery_count = delivery_count + 1"
        " WHERE id = ?",
        [(now + 30, uuid.uuid4().hex, r[0]) for r in rows],
    )
    marks = ",".join("?" * len(rows))
    got = db.execute(
        f"SELECT id, body, receipt FROM m WHERE id IN ({marks})", [r[0] for r in rows]
    ).fetchall()
    db.execute("COMMIT")
    return got


def delete(db: sqlite3.Connection, leases: list[tuple[int, str]]) -> None:
    """One durable ack: each (id, token) deleted, COMMIT."""
    db.execute("BEGIN")
    db.executemany("DELETE FROM m WHERE id = ? AND receipt = ?", leases)
    db.execute("COMMIT")


def _send(db: sqlite3.Connection, batch: int, body: bytes) -> int:
    # As insert(), with one parameter tuple repeated (the rows are alike): the loop's own cost
    # stays what it was before insert() was written for the floor server.
    now = time.time()
    _insert_rows(db, [("q", body, now, now + 604800, now)] * batch)
    return batch


def _cycle(db: sqlite3.Connection, batch: int, body: bytes) -> int:
    _send(db, batch, body)
    got = lease(db, batch)
    delete(db, [(g[0], g[2]) for g in got])
    return len(got)


_LOOPS: dict[str, Callable[[sqlite3.Connection, int, bytes], int]] = {
    "send": _send,
    "cycle": _cycle,
}


def run_baseline(
    scenario: str,
    batch: int,
    seconds: float,
    body_bytes: int = 100,
    directory: str | None = None,
    warmup: float = 0.0,
) -> dict[str, Any]:
    """Run the raw loop of `scenario` for `seconds` (after `warmup`, not counted) in a fresh file
    in a temporary directory (under `directory` when given): msgs_per_s and cpu_us_per_msg."""
    loop = _LOOPS[scenario]
    body = b"x" * body_bytes
    with tempfile.TemporaryDirectory(prefix="leaseq-baseline-", dir=directory) as tmp:
        db = connect(os.path.join(tmp, "raw.db"))
        try:
            end = time.perf_counter() + warmup
            while time.perf_counter() < end:
                loop(db, batch, body)
            done = 0
            cpu0, t0 = time.thread_time(), time.perf_counter()
            while True:
                done += loop(db, batch, body)
                elapsed = time.perf_counter() - t0
                if elapsed >= seconds:
                    break
            cpu = time.thread_time() - cpu0
        finally:
            db.close()
    return {
        "msgs_per_s": round(done / elapsed, 1),
        "cpu_us_per_msg": round(1e6 * cpu / done, 2) if done else None,
        "messages": done,
    }


def main(argv: list[str] | None = None) -> None:
    """`python -m leaseq.bench.baseline SCENARIO BATCH SECONDS`: the raw loop alone."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] not in SCENARIOS:
        raise SystemExit("usage: python -m leaseq.bench.baseline send|cycle BATCH SECONDS")
    figures = run_baseline(args[0], int(args[1]), float(args[2]))
    print(f"{figures['msgs_per_s']:.0f} msgs/s, {figures['cpu_us_per_msg']} us CPU per message")


if __name__ == "__main__":
    main()
