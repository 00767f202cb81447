"""Stats come from counters (channel_counts) and the leased/delayed range, not from a scan of the
queue (schema version 3). After any mix of operations, and across restarts, they must equal what
a full scan of the file says: this test keeps the old scan as the reference."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import CountsByState, NewMessage, QueueConfig, VisibilityChange
from leaseq.server.errors import OverLimit
from leaseq.server.store.sqlite import SqliteStore

from .conftest import read_only

QUEUES = ("main", "dlq")
CHANNELS = ("", "", "a", "orders/eu")


def _scanned(path: Path, queue: str, now: float) -> tuple[dict[str, CountsByState], float | None]:
    """Counts by channel and state and the oldest visible enqueue time, by reading every row."""
    with read_only(path) as conn:
        rows = conn.execute(
            "SELECT channel, SUM(visible_at <= ?), SUM(visible_at > ? AND leased = 1),"
            " SUM(visible_at > ? AND leased = 0),"
            " MIN(CASE WHEN visible_at <= ? THEN enqueued_at END)"
            " FROM messages WHERE queue = (SELECT id FROM queues WHERE name = ?)"
            " GROUP BY channel",
            (now, now, now, now, queue),
        ).fetchall()
    channels = {channel: CountsByState(v, leased, d) for channel, v, leased, d, _ in rows}
    oldest = min((enq for *_, enq in rows if enq is not None), default=None)
    return channels, oldest


async def _check(store: SqliteStore, path: Path, clock: FakeClock) -> None:
    for queue in QUEUES:
        stats = await store.stats(queue)
        channels, oldest = _scanned(path, queue, clock.now())
        assert stats.channels == channels, queue
        expected_age = 0.0 if oldest is None else max(0.0, clock.now() - oldest)
        assert stats.oldest_visible_age == expected_age, queue


async def _random_operation(
    store: SqliteStore, rng: random.Random, clock: FakeClock, receipts: list[str]
) -> None:
    queue = rng.choice(QUEUES)
    kind = rng.choices(
        ["send", "receive", "delete", "release", "attempt", "advance", "purge", "redrive"],
        weights=[6, 5, 4, 2, 1, 3, 0.3, 0.5],
    )[0]
    if kind == "send":
        await store.send(
            queue,
            [
                NewMessage(
                    b"m",
                    channel=rng.choice(CHANNELS),
                    delay=rng.choice([None, None, 0.0, 5.0]),
                    ttl=rng.choice([None, None, 3.0, 50.0]),
                )
                for _ in range(rng.randint(1, 6))
            ],
        )
    elif kind in ("receive", "attempt"):
        try:
            outcome = await store.receive(
                queue,
                rng.randint(1, 5),
                visibility_timeout=rng.choice([0.0, 2.0, 10.0]),
                channel_filter=rng.choice(["", "", "a", "orders/*"]),
                attempt_id=rng.choice(["x", "y"]) if kind == "attempt" else "",
            )
        except OverLimit:
            return
        receipts.extend(m.receipt for m in outcome.messages)
    elif kind == "delete" and receipts:
        chosen = rng.sample(receipts, min(len(receipts), rng.randint(1, 4)))
        await store.delete(queue, chosen, attempt_ids=[rng.choice(["x", "y"])] * rng.randint(0, 1))
    elif kind == "release" and receipts:
        await store.change_visibility(queue, [VisibilityChange(rng.choice(receipts), 0.0)])
    elif kind == "advance":
        clock.advance(rng.choice([0.0, 1.0, 2.5, 6.0]))
    elif kind == "purge":
        await store.purge_queue(queue)
    elif kind == "redrive":
        await store.redrive("dlq", rng.choice([None, "main"]), rng.randint(0, 3))


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_counters_match_a_scan_after_random_operations_and_restarts(
    db_path: Path, clock: FakeClock, seed: int
) -> None:
    rng = random.Random(seed)
    store = SqliteStore(db_path, clock=clock)
    await store.open()
    try:
        await store.create_queue("dlq", QueueConfig(message_retention=40.0))
        # Every second delivery of a message goes to the dead letter queue instead.
        await store.create_queue(
            "main", QueueConfig(dead_letter_queue="dlq", max_delivery_count=2, max_in_flight=20)
        )
        receipts: list[str] = []
        for step in range(300):
            await _random_operation(store, rng, clock, receipts)
            await _check(store, db_path, clock)
            if step % 60 == 59:  # a restart: the counters are in the file
                await store.close()
                store = SqliteStore(db_path, clock=clock)
                await store.open()
                await _check(store, db_path, clock)
        totals = [(await store.stats(q)).total for q in QUEUES]
        assert sum(totals) > 0  # the mix left messages behind, so the comparison meant something
    finally:
        await store.close()
