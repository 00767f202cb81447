"""channel_counters (schema version 4): every statement that adds, removes or moves messages keeps
each channel's count, so that GetQueueStats reads no visible message.

The checks compare the counters with a count of the rows, and the store's stats with the stats
counted from the rows as the store counted them before version 4, after random mixes of every
operation that changes which queue holds a message: sends (one statement and with dedup ids),
acks (by receipt, one statement and the transaction way, by attempt id), expiry sweeps (bounded,
so expired messages wait unswept), purges, redrives, dead-letter moves, DeleteQueue; through two
stores on one schema (two replicas: their connections write different slots), and across a
restart. Time is a FakeClock shared by both stores.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import NewMessage, QueueConfig, QueueStats, VisibilityChange
from leaseq.server.errors import LeaseqError
from leaseq.server.store import postgres as pg
from leaseq.server.store.postgres import PostgresStore
from tests.support.postgres import channel_counters, channel_rows, connect, store_url

QUEUES = ("a", "b", "dlq")
CHANNELS = ("", "red", "blue", "green")


@asynccontextmanager
async def _two_replicas(
    schema: str,
    clock: FakeClock,
    pool_min: int,
    pool_max: int,
    tuning: pg.Tuning = pg.DEFAULT_TUNING,
) -> AsyncIterator[list[PostgresStore]]:
    """Two stores on one schema (replicas) sharing `clock`, open for the block, closed after."""
    stores = [
        PostgresStore.from_url(
            store_url(schema, pool_min=pool_min, pool_max=pool_max), clock=clock, tuning=tuning
        )
        for _ in range(2)
    ]
    for store in stores:
        await store.open()
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()


def _counted_stats(schema: str, name: str, now: float) -> dict[str, Any]:
    """The stats as the store counted them before version 4: every row of the queue."""
    with connect() as conn:
        [queue_id] = conn.execute(
            f'SELECT id FROM "{schema}".queues WHERE name = %s', (name,)
        ).fetchone()
        rows = conn.execute(
            "SELECT channel, count(*) FILTER (WHERE visible_at <= %(now)s),"
            " count(*) FILTER (WHERE visible_at > %(now)s AND leased),"
            " count(*) FILTER (WHERE visible_at > %(now)s AND NOT leased),"
            " min(enqueued_at) FILTER (WHERE visible_at <= %(now)s)"
            f' FROM "{schema}".messages WHERE queue = %(queue)s AND expires_at > %(now)s'
            " GROUP BY channel",
            {"queue": queue_id, "now": now},
        ).fetchall()
        [unswept] = conn.execute(
            f'SELECT count(*) FROM "{schema}".messages'
            " WHERE queue = %(queue)s AND expires_at <= %(now)s",
            {"queue": queue_id, "now": now},
        ).fetchone()
        [expired] = conn.execute(
            f'SELECT COALESCE(sum(expired), 0) FROM "{schema}".queue_counters WHERE queue = %s',
            (queue_id,),
        ).fetchone()
    oldest = min((enq for *_, enq in rows if enq is not None), default=None)
    return {
        "channels": {ch: (v, leased, d) for ch, v, leased, d, _ in rows},
        "oldest_visible_age": 0.0 if oldest is None else max(0.0, now - oldest),
        "expired_total": int(expired) + unswept,
    }


def _shown(stats: QueueStats) -> dict[str, Any]:
    return {
        "channels": {ch: (c.visible, c.leased, c.delayed) for ch, c in stats.channels.items()},
        "oldest_visible_age": stats.oldest_visible_age,
        "expired_total": stats.expired_total,
    }


async def _check(schema: str, stores: list[PostgresStore], clock: FakeClock) -> None:
    """Stats of every queue (through either store) as counted from the rows; counters as the
    rows. Stats first: it sweeps (at most the patched limit), then the rows are counted."""
    for i, name in enumerate(QUEUES):
        try:
            stats = await stores[i % len(stores)].stats(name)
        except LeaseqError:
            continue  # deleted by the mix
        assert _shown(stats) == _counted_stats(schema, name, clock.now()), name
        assert stats.total == sum(c.total for c in stats.channels.values())
    assert channel_counters(schema) == channel_rows(schema)


async def _create_queues(store: PostgresStore) -> None:
    await store.create_queue("dlq", QueueConfig(message_retention=600.0))
    await store.create_queue(
        "a", QueueConfig(dead_letter_queue="dlq", max_delivery_count=2, dedup_window=60.0)
    )
    await store.create_queue("b", QueueConfig(message_retention=300.0))


class Mix:
    """Random operations through random stores; remembers receipts and attempt ids."""

    def __init__(self, seed: int, stores: list[PostgresStore], clock: FakeClock) -> None:
        self.rng = random.Random(seed)
        self.stores = stores
        self.clock = clock
        self.receipts: list[tuple[str, str]] = []  # (queue, receipt)
        self.attempts: list[tuple[str, str]] = []
        self.count = 0

    def store(self) -> PostgresStore:
        return self.rng.choice(self.stores)

    def message(self) -> NewMessage:
        rng = self.rng
        self.count += 1
        return NewMessage(
            body=f"m{self.count}".encode(),
            channel=rng.choice(CHANNELS),
            ttl=rng.choice([None, None, 60.0, 120.0]),
            delay=rng.choice([None, None, None, 5.0, 40.0]),
            dedup_id=f"d{rng.randrange(30)}" if rng.random() < 0.2 else "",
        )

    async def step(self) -> None:
        rng, store = self.rng, self.store()
        name = rng.choice(("a", "a", "b", "dlq"))
        op = rng.choice(
            ["send"] * 4
            + ["receive"] * 4
            + ["ack"] * 3
            + ["release", "ack attempt", "advance", "advance", "purge", "redrive", "update"]
        )
        try:
            if op == "send":
                await store.send(name, [self.message() for _ in range(rng.randrange(1, 12))])
            elif op == "receive":
                attempt = f"r{rng.randrange(1000)}" if rng.random() < 0.2 else ""
                got = await store.receive(
                    name,
                    rng.randrange(1, 8),
                    rng.choice([None, 0.0, 10.0, 60.0]),
                    channel_filter=rng.choice(["", "", "red", "bl*"]),
                    attempt_id=attempt,
                )
                self.receipts += [(name, m.receipt) for m in got.messages]
                if attempt and got.messages:
                    self.attempts.append((name, attempt))
            elif op == "ack" and self.receipts:
                chosen = rng.sample(self.receipts, min(len(self.receipts), rng.randrange(1, 6)))
                by_queue: dict[str, list[str]] = {}
                for queue, receipt in chosen:
                    by_queue.setdefault(queue, []).append(receipt)
                for queue, receipts in by_queue.items():
                    await store.delete(queue, receipts)
            elif op == "ack attempt" and self.attempts:
                queue, attempt = rng.choice(self.attempts)
                await store.delete(queue, [], attempt_ids=[attempt])
            elif op == "release" and self.receipts:
                queue, receipt = rng.choice(self.receipts)
                await store.change_visibility(queue, [VisibilityChange(receipt, 0.0, "again")])
            elif op == "update" and self.receipts:
                queue, receipt = rng.choice(self.receipts)
                await store.update_message(queue, receipt, body=b"updated")
            elif op == "advance":
                self.clock.advance(rng.choice([1.0, 11.0, 45.0, 70.0]))
            elif op == "purge" and rng.random() < 0.3:
                await store.purge_queue(name)
            elif op == "redrive":
                await store.redrive(
                    "dlq",
                    destination=rng.choice([None, None, "b"]),
                    max_messages=rng.randrange(0, 6),
                    channel_filter=rng.choice(["", "red"]),
                )
        except LeaseqError:
            pass  # a stale receipt, an over-long body, ...: refused, nothing changed


SMALL_SWEEPS = pg.Tuning(sweep_limit=3)
"""Sweeps of at most 3 messages: expired messages wait unswept, and stats must count them as
expired, not as held."""


@pytest.mark.parametrize("seed", range(4))
async def test_counters_equal_the_rows_after_random_operations_on_two_replicas(
    schema: str, seed: int
) -> None:
    clock = FakeClock()
    async with _two_replicas(schema, clock, pool_min=1, pool_max=3, tuning=SMALL_SWEEPS) as stores:
        await _create_queues(stores[0])
        mix = Mix(seed, stores, clock)
        for step in range(160):
            await mix.step()
            if step % 20 == 19:
                await _check(schema, stores, clock)
        # Housekeeping drops the rows of channels that hold nothing, and changes no count.
        await stores[1].housekeep()
        await _check(schema, stores, clock)
        assert _counter_rows(schema) - channel_rows(schema).keys() == set()
        # DeleteQueue takes its counters along; a purge leaves only rows that sum to 0.
        await stores[0].delete_queue("b")
        await _check(schema, stores, clock)
        for name in ("a", "dlq"):
            await stores[1].purge_queue(name)
        await _check(schema, stores, clock)
        await stores[0].housekeep()
        assert _counter_rows(schema) == set()


def _counter_rows(schema: str) -> set[tuple[int, str]]:
    with connect() as conn:
        rows = conn.execute(
            f'SELECT DISTINCT queue, channel FROM "{schema}".channel_counters'
        ).fetchall()
    return set(rows)


async def test_counters_carry_across_a_restart(schema: str) -> None:
    clock = FakeClock()
    url = store_url(schema, pool_min=1, pool_max=3)
    first = PostgresStore.from_url(url, clock=clock, tuning=SMALL_SWEEPS)
    await first.open()
    await _create_queues(first)
    mix = Mix(100, [first], clock)
    for _ in range(80):
        await mix.step()
    await _check(schema, [first], clock)
    before = {name: await first.stats(name) for name in QUEUES}
    receipts = mix.receipts
    await first.close()

    again = PostgresStore.from_url(url, clock=clock, tuning=SMALL_SWEEPS)
    await again.open()
    try:
        assert {name: await again.stats(name) for name in QUEUES} == before
        # New connections (new backend pids, other slots) go on from the same totals.
        mix = Mix(101, [again], clock)
        mix.receipts = receipts
        for _ in range(80):
            await mix.step()
        await _check(schema, [again], clock)
    finally:
        await again.close()


@pytest.mark.parametrize("tuning", [SMALL_SWEEPS])
async def test_stats_oldest_visible_skips_leased_delayed_and_expired_messages(
    store: PostgresStore, clock: FakeClock
) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"short", ttl=10.0) for _ in range(5)])  # t0
    clock.advance(1)
    await store.send("q", [NewMessage(body=b"leased")])  # t0 + 1
    clock.advance(1)
    await store.send("q", [NewMessage(body=b"delayed", delay=100.0)])  # t0 + 2
    clock.advance(1)
    await store.send("q", [NewMessage(body=b"visible", channel="c")])  # t0 + 3
    clock.advance(1)
    await store.send("q", [NewMessage(body=b"visible")])  # t0 + 4
    got = await store.receive("q", 6, 60.0)
    [leased] = [m for m in got.messages if m.body == b"leased"]
    for m in got.messages:
        if m.body == b"short":  # visible again, then expired: skipped by the oldest's walk
            await store.change_visibility("q", [VisibilityChange(m.receipt, 0.0)])
    clock.advance(10)  # the short ones expire: 3 swept by the stats' own sweep, 2 wait
    stats = await store.stats("q")
    assert stats.oldest_visible_age == 11.0  # the message sent at t0 + 3
    assert (stats.visible, stats.leased, stats.delayed, stats.expired_total) == (2, 1, 1, 5)
    assert {ch: c.total for ch, c in stats.channels.items()} == {"": 3, "c": 1}
    await store.delete("q", [leased.receipt])
    assert (await store.stats("q")).leased == 0


async def test_housekeeping_drops_the_rows_of_channels_that_hold_nothing(
    store: PostgresStore, schema: str
) -> None:
    """A queue that used many channel names once keeps no rows for them."""
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"m", channel=f"c{i}") for i in range(50)])
    await store.send("q", [NewMessage(body=b"kept", channel="kept")])
    got = await store.receive("q", 50, 60.0)
    await store.delete("q", [m.receipt for m in got.messages])
    assert len(_counter_rows(schema)) == 51
    await store.housekeep()
    assert _counter_rows(schema) == {(q, "kept") for q, _ in _counter_rows(schema)}
    assert channel_counters(schema) == channel_rows(schema)
    await store.send("q", [NewMessage(body=b"m", channel="c1")])
    assert {ch: c.total for ch, c in (await store.stats("q")).channels.items()} == {
        "kept": 1,
        "c1": 1,
    }


def _write_as_an_older_version(schema: str, queue: int, dlq: int, clock: FakeClock) -> None:
    """Write messages as a replica of schema version 3 does, still serving during a rolling
    upgrade: plain statements that know nothing of channel_counters (no CTEs), on a connection
    of its own, one autocommitted statement or a transaction of several."""
    m = f'"{schema}".messages'
    now = clock.now()
    insert = (
        f"INSERT INTO {m} (queue, message_id, body, channel, enqueued_at, expires_at, visible_at)"
        " SELECT %(queue)s, md5(random()::text), 'old', c, %(now)s, %(now)s + 600, %(now)s"
        " FROM unnest(%(channels)s::text[]) AS c"
    )
    with connect() as conn:
        # Sends: one statement of several channels, and one row at a time in a transaction.
        conn.execute(insert, {"queue": queue, "now": now, "channels": ["", "red", "red", "x"]})
        with conn.transaction():
            for channel in ("blue", "blue", "x"):
                conn.execute(insert, {"queue": queue, "now": now, "channels": [channel]})
        # A delivery and a lease change (not counted: nothing moves).
        conn.execute(
            f"UPDATE {m} SET visible_at = visible_at + 60, leased = true,"
            " delivery_count = delivery_count + 1, receipt_seq = receipt_seq + 1"
            f" WHERE key IN (SELECT key FROM {m} WHERE queue = %s ORDER BY key LIMIT 3)",
            (queue,),
        )
        # Acks: some of this version's own messages, some of the store's.
        conn.execute(
            f"DELETE FROM {m} WHERE key IN"
            f" (SELECT key FROM {m} WHERE queue = %s AND channel IN ('red', '') LIMIT 2)",
            (queue,),
        )
        # A dead-letter move, and a redrive of part of it back.
        conn.execute(
            f"UPDATE {m} SET queue = %s, source_queue = 'a', receipt_seq = receipt_seq + 1"
            f" WHERE key IN (SELECT key FROM {m} WHERE queue = %s AND channel <> 'x' LIMIT 3)",
            (dlq, queue),
        )
        conn.execute(
            f"UPDATE {m} SET queue = %s, delivery_count = 0"
            f" WHERE key IN (SELECT key FROM {m} WHERE queue = %s ORDER BY key LIMIT 1)",
            (queue, dlq),
        )
        # A statement that moves some of the rows it updates and only changes the others.
        conn.execute(
            f"UPDATE {m} SET queue = CASE WHEN channel = 'x' THEN %s ELSE queue END,"
            " visible_at = visible_at + 1 WHERE queue = %s",
            (dlq, queue),
        )
        # A rolled back transaction counts nothing.
        with pytest.raises(ZeroDivisionError):
            with conn.transaction():
                conn.execute(insert, {"queue": queue, "now": now, "channels": ["gone"] * 5})
                conn.execute(f"DELETE FROM {m} WHERE queue = %s", (dlq,))
                raise ZeroDivisionError
        # A COPY (bulk load by hand).
        with conn.cursor().copy(
            f"COPY {m} (queue, message_id, body, channel, enqueued_at, expires_at, visible_at)"
            " FROM STDIN"
        ) as copy:
            for i in range(4):
                copy.write_row((queue, f"copied{i}", b"c", "green", now, now + 600, now))


async def test_writers_of_an_older_version_are_counted(
    store: PostgresStore, schema: str, clock: FakeClock
) -> None:
    """The triggers count every writer of messages, not only this store's statements: rows
    written by plain SQL, as a replica older than schema version 4 writes them, are counted
    exactly, between and after the store's own operations, and stats count right."""
    await _create_queues(store)
    mix = Mix(7, [store], clock)
    for _ in range(40):
        await mix.step()
    with connect() as conn:
        ids = dict(conn.execute(f'SELECT name, id FROM "{schema}".queues').fetchall())
    for _ in range(3):
        _write_as_an_older_version(schema, ids["a"], ids["dlq"], clock)
        assert channel_counters(schema) == channel_rows(schema)
        for _ in range(40):
            await mix.step()
        await _check(schema, [store], clock)
    # A purge by the older version: one DELETE of the queue's rows.
    with connect() as conn:
        conn.execute(f'DELETE FROM "{schema}".messages WHERE queue = %s', (ids["dlq"],))
        # The moves noted between the two move triggers are all taken out again.
        assert conn.execute(f'SELECT count(*) FROM "{schema}".channel_moves').fetchone() == (0,)
    await _check(schema, [store], clock)


async def test_deliveries_and_lease_changes_fire_no_trigger(
    store: PostgresStore, schema: str, clock: FakeClock
) -> None:
    """Only an UPDATE that moves messages to another queue (or channel) fires the row trigger:
    receives, lease changes, releases and message updates (the hot path) fire nothing. The
    trigger's function, replaced here by one that also notes each call, says so."""
    [move] = [
        s
        for s in pg.MIGRATIONS[3][1]
        if s.startswith("CREATE FUNCTION {schema}.channel_counts_note_move()")
    ]
    noting = move.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION").replace(
        " BEGIN ", " BEGIN INSERT INTO {schema}.fired VALUES (OLD.key, OLD.queue, NEW.queue); "
    )
    with connect() as conn:
        conn.execute(f'CREATE TABLE "{schema}".fired (key bigint, source bigint, dest bigint)')
        conn.execute(noting.replace("{schema}", f'"{schema}"'))

    def fired() -> list[tuple[int, int, int]]:
        with connect() as conn:
            return conn.execute(f'SELECT * FROM "{schema}".fired ORDER BY key').fetchall()

    await _create_queues(store)
    await store.send("a", [NewMessage(body=b"m", channel=ch) for ch in CHANNELS * 3])
    got = await store.receive("a", 6, 30.0)
    await store.change_visibility("a", [VisibilityChange(got.messages[0].receipt, 0.0)])
    await store.change_visibility("a", [VisibilityChange(got.messages[1].receipt, 90.0)])
    await store.update_message("a", got.messages[2].receipt, body=b"new")
    await store.delete("a", [got.messages[3].receipt])
    got = await store.receive("a", 6, 0.0, channel_filter="red")  # no lease
    assert fired() == []
    # Moves fire it, once per message moved: a dead-letter move (a's max_delivery_count is 2)
    # and a redrive.
    clock.advance(100)
    await store.receive("a", 12, 30.0)  # everything delivered once more: 1 or 2 deliveries
    clock.advance(100)
    await store.receive("a", 12, 30.0)  # those delivered twice go to dlq
    dead = fired()
    with connect() as conn:
        ids = dict(conn.execute(f'SELECT name, id FROM "{schema}".queues').fetchall())
        [[in_dlq]] = conn.execute(
            f'SELECT count(*) FROM "{schema}".messages WHERE queue = %s', (ids["dlq"],)
        ).fetchall()
    assert {(s, d) for _, s, d in dead} == {(ids["a"], ids["dlq"])}
    assert len(dead) == in_dlq > 0
    assert await store.redrive("dlq", destination="b", max_messages=2) == 2
    moved = [row for row in fired() if row[1] == ids["dlq"]]
    assert [(s, d) for _, s, d in moved] == [(ids["dlq"], ids["b"])] * 2
    assert channel_counters(schema) == channel_rows(schema)


async def test_stats_never_count_below_zero_when_counters_are_short(
    store: PostgresStore, schema: str, clock: FakeClock
) -> None:
    """Counters short of the rows (rows written with the triggers disabled, say) give no
    negative count: visible is clamped at 0 and the leased and delayed messages still show."""
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"m", channel="a") for _ in range(3)])
    await store.send("q", [NewMessage(body=b"later", channel="a", delay=60.0)])
    await store.receive("q", 2, 30.0)
    with connect() as conn:
        conn.execute(f'DELETE FROM "{schema}".channel_counters')
    stats = await store.stats("q")
    assert {ch: (c.visible, c.leased, c.delayed) for ch, c in stats.channels.items()} == {
        "a": (0, 2, 1)
    }


async def test_counters_stay_exact_under_concurrent_replicas(schema: str) -> None:
    """Sends, receives and acks at once through two replicas (several connections each: rows
    of several slots, upserted concurrently), channels mixed in every batch: the counters are
    the rows, and stats are counted right."""
    clock = FakeClock()
    async with _two_replicas(schema, clock, pool_min=4, pool_max=4) as stores:
        await stores[0].create_queue("q", QueueConfig())

        async def worker(store: PostgresStore, seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(25):
                batch = [
                    NewMessage(body=b"m", channel=rng.choice(CHANNELS))
                    for _ in range(rng.randrange(1, 20))
                ]
                await store.send("q", batch)
                got = await store.receive("q", rng.randrange(1, 20), 60.0)
                acked = [m.receipt for m in got.messages if rng.random() < 0.7]
                if acked:
                    await store.delete("q", acked)

        await asyncio.gather(*(worker(stores[i % 2], i) for i in range(8)))
        assert channel_counters(schema) == channel_rows(schema)
        stats = await stores[1].stats("q")
        assert _shown(stats) == _counted_stats(schema, "q", clock.now())
        with connect() as conn:
            [[slots]] = conn.execute(
                f'SELECT count(DISTINCT slot) FROM "{schema}".channel_counters'
            ).fetchall()
        assert slots > 1
