"""Lifetime classes (schema version 5, schema._LIFETIMES): one index answers both the expiry sweep
and stats' oldest visible message. After any mix of operations (ttls of many values, retention
changes, dead-lettering, redrive, purge, housekeeping) and across restarts, the sweep leaves no
expired message, stats' oldest visible message is what a full scan says, and the file keeps the
classes' rules. A file of version 4 opens, is migrated, and answers the same."""

from __future__ import annotations

import dataclasses
import random
import sqlite3
from pathlib import Path

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import NewMessage, QueueConfig, VisibilityChange
from leaseq.server.errors import OverLimit
from leaseq.server.store.sqlite import SCHEMA_VERSION, SqliteStore
from leaseq.server.store.sqlite.schema import MAX_LIFETIMES

from .conftest import read_only, rewrite_as_version_4
from .test_stats_counters import _scanned

QUEUES = ("main", "dlq")


def _check_file(path: Path) -> tuple[int, int]:
    """The rules of the classes, read from every row; (messages of class 0, the most classes
    above 0 of a queue)."""
    with read_only(path) as conn:
        unrecorded = conn.execute(
            "SELECT COUNT(*) FROM messages m WHERE NOT EXISTS (SELECT 1 FROM lifetimes l"
            " WHERE l.queue = m.queue AND l.lifetime = m.lifetime)"
        ).fetchone()[0]
        assert unrecorded == 0
        rows = conn.execute(
            "SELECT enqueued_at, expires_at, lifetime FROM messages WHERE lifetime != 0"
        ).fetchall()
        assert all(expires == enqueued + lifetime for enqueued, expires, lifetime in rows)
        most = conn.execute(
            "SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM lifetimes WHERE lifetime > 0"
            " GROUP BY queue)"
        ).fetchone()[0]
        assert (most or 0) <= MAX_LIFETIMES
        unclassed = conn.execute("SELECT COUNT(*) FROM messages WHERE lifetime = 0").fetchone()[0]
    return unclassed, most or 0


async def _check(store: SqliteStore, path: Path, clock: FakeClock) -> tuple[int, int]:
    now = clock.now()
    for queue in QUEUES:
        stats = await store.stats(queue)  # sweeps the queue first, as every operation does
        _, oldest = _scanned(path, queue, now)
        assert stats.oldest_visible_age == (0.0 if oldest is None else max(0.0, now - oldest))
        with read_only(path) as conn:
            expired = conn.execute(
                "SELECT COUNT(*) FROM messages WHERE queue = (SELECT id FROM queues WHERE name = ?)"
                " AND expires_at <= ?",
                (queue, now),
            ).fetchone()[0]
        assert expired == 0, queue
    return _check_file(path)


async def _random_operation(
    store: SqliteStore, rng: random.Random, clock: FakeClock, receipts: list[str]
) -> None:
    queue = rng.choice(QUEUES)
    kind = rng.choices(
        [
            "send",
            "plain",
            "receive",
            "delete",
            "release",
            "advance",
            "retention",
            "purge",
            "redrive",
        ],
        weights=[6, 3, 5, 3, 2, 3, 0.7, 0.2, 0.6],
    )[0]
    if kind == "send":
        # Many distinct ttls: more classes than a queue may have.
        ttls = [None, None, 5.0, 30.0, *(rng.randint(2, 120) / 2 for _ in range(3))]
        await store.send(
            queue,
            [
                NewMessage(b"m", delay=rng.choice([None, 0.0, 3.0]), ttl=rng.choice(ttls))
                for _ in range(rng.randint(1, 8))
            ],
        )
    elif kind == "plain":
        await store.send_bodies(queue, [b"p"] * rng.randint(1, 30))
    elif kind == "receive":
        try:
            outcome = await store.receive(
                queue, rng.randint(1, 6), visibility_timeout=rng.choice([0.0, 2.0, 10.0])
            )
        except OverLimit:
            return
        receipts.extend(m.receipt for m in outcome.messages)
    elif kind == "delete" and receipts:
        await store.delete(queue, rng.sample(receipts, min(len(receipts), rng.randint(1, 5))))
    elif kind == "release" and receipts:
        await store.change_visibility(queue, [VisibilityChange(rng.choice(receipts), 0.0)])
    elif kind == "advance":
        clock.advance(rng.choice([0.5, 2.0, 7.0, 25.0]))
    elif kind == "retention":
        info = await store.get_queue(queue)
        retention = rng.choice([20.0, 45.0, 60.0, 90.5])
        await store.update_queue(
            queue, dataclasses.replace(info.config, message_retention=retention)
        )
    elif kind == "purge":
        await store.purge_queue(queue)
    elif kind == "redrive":
        await store.redrive("dlq", rng.choice([None, "main"]), rng.randint(0, 5))


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_sweep_and_oldest_visible_match_a_scan_after_random_operations_and_restarts(
    db_path: Path, clock: FakeClock, seed: int
) -> None:
    rng = random.Random(seed)
    store = SqliteStore(db_path, clock=clock)
    await store.open()
    try:
        await store.create_queue("dlq", QueueConfig(message_retention=40.0))
        await store.create_queue(
            "main",
            QueueConfig(
                message_retention=60.0,
                dead_letter_queue="dlq",
                max_delivery_count=2,
                max_in_flight=40,
            ),
        )
        receipts: list[str] = []
        unclassed = most_classes = 0
        for step in range(400):
            await _random_operation(store, rng, clock, receipts)
            seen = await _check(store, db_path, clock)
            unclassed, most_classes = max(unclassed, seen[0]), max(most_classes, seen[1])
            if step % 80 == 79:  # a restart: the classes are in the file
                await store.close()
                store = SqliteStore(db_path, clock=clock)
                await store.open()
                await _check(store, db_path, clock)
        # The mix made messages of class 0 (past the cap, redriven) and filled a queue's classes
        # up to the cap, so the comparisons meant something.
        assert unclassed > 0 and most_classes == MAX_LIFETIMES
    finally:
        await store.close()


async def test_a_class_nobody_uses_is_forgotten_by_housekeeping(
    store: SqliteStore, db_path: Path, clock: FakeClock
) -> None:
    await store.create_queue("main", QueueConfig(message_retention=100.0))
    await store.send("main", [NewMessage(b"short", ttl=10.0), NewMessage(b"long")])
    with read_only(db_path) as conn:
        assert sorted(conn.execute("SELECT lifetime FROM lifetimes")) == [(10.0,), (100.0,)]
    clock.advance(11.0)
    assert (await store.stats("main")).total == 1  # the short one expired and was swept
    clock.advance(60.0)  # housekeeping is due before the next operation
    await store.send("main", [NewMessage(b"again")])
    with read_only(db_path) as conn:
        assert conn.execute("SELECT lifetime FROM lifetimes").fetchall() == [(100.0,)]


async def test_a_version_4_file_is_migrated_and_answers_the_same(
    db_path: Path, clock: FakeClock
) -> None:
    store = SqliteStore(db_path, clock=clock)
    await store.open()
    await store.create_queue("main", QueueConfig(message_retention=100.0))
    await store.send("main", [NewMessage(b"a", ttl=50.0)])
    clock.advance(1.0)
    await store.send("main", [NewMessage(b"b"), NewMessage(b"c", ttl=20.0)])
    clock.advance(1.0)
    await store.send("main", [NewMessage(b"d", delay=5.0)])
    [leased] = (await store.receive("main", 1, visibility_timeout=30.0)).messages  # "a"
    await store.close()
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        rewrite_as_version_4(conn)
        conn.execute("COMMIT")
    finally:
        conn.close()
    with read_only(db_path) as conn:
        assert "lifetime" not in {row[1] for row in conn.execute("PRAGMA table_info(messages)")}

    store = SqliteStore(db_path, clock=clock)
    await store.open()
    try:
        with read_only(db_path) as conn:
            version = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'")
            assert int(version.fetchone()[0]) == SCHEMA_VERSION == 7
            assert conn.execute("SELECT DISTINCT lifetime FROM messages").fetchall() == [(0.0,)]
            assert conn.execute("SELECT lifetime FROM lifetimes").fetchall() == [(0.0,)]
            indexes = {row[1] for row in conn.execute("PRAGMA index_list(messages)")}
            assert "messages_leased" not in indexes
            assert {"messages_visible", "messages_expiry", "messages_enqueued"} <= indexes
        # "a" is leased, "d" delayed: the oldest visible message is "b".
        await _check_queue(store, db_path, clock, expected_total=4)
        clock.advance(19.5)  # "c" (ttl 20 from t+1) expires
        await _check_queue(store, db_path, clock, expected_total=3)
        await store.send("main", [NewMessage(b"e")])  # a new message gets its class
        with read_only(db_path) as conn:
            assert sorted(conn.execute("SELECT lifetime FROM lifetimes")) == [(0.0,), (100.0,)]
        assert (await store.delete("main", [leased.receipt])).results[0].status.name == "OK"
        clock.advance(80.0)  # "b" expires (t+1 + 100), "e" not yet
        await _check_queue(store, db_path, clock, expected_total=2)
        _check_file(db_path)
    finally:
        await store.close()


async def _check_queue(
    store: SqliteStore, path: Path, clock: FakeClock, expected_total: int
) -> None:
    stats = await store.stats("main")
    _, oldest = _scanned(path, "main", clock.now())
    assert oldest is not None
    assert stats.oldest_visible_age == clock.now() - oldest
    assert stats.total == expected_total
