"""Schema creation and migration on open: versioned, one replica at a time, refused when newer."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from leaseq.server.domain.types import LeaseStatus, NewMessage, QueueConfig, VisibilityChange
from leaseq.server.store import open_store
from leaseq.server.store import postgres as pg
from leaseq.server.store.postgres import PostgresStore
from tests.support.postgres import channel_counters, channel_rows, connect, store_url


def _tables(schema: str) -> set[str]:
    with connect() as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
    return {name for (name,) in rows}


def _meta(schema: str, name: str) -> bytes | None:
    with connect() as conn:
        row = conn.execute(f'SELECT value FROM "{schema}".meta WHERE name = %s', (name,)).fetchone()
    return None if row is None else bytes(row[0])


async def _open_at_version(
    url: str, monkeypatch: pytest.MonkeyPatch, version: int, *queues: str
) -> PostgresStore:
    """A store opened as schema `version` made it (only its migrations; monkeypatch.undo()
    brings back the current ones), with these queues. Today's code writes the columns of
    versions 6 (message groups) and 7 (the retry policy), so they come too: those migrations are
    idempotent and run again."""
    migrations = list(pg.MIGRATIONS[:version])
    number, statements = migrations[-1]
    later = dict(pg.MIGRATIONS)
    migrations[-1] = (number, [*statements, *later[6], *later[7]])
    store = PostgresStore.from_url(url, tuning=pg.Tuning(migrations=tuple(migrations)))
    await store.open()
    for name in queues:
        await store.create_queue(name, QueueConfig())
    return store


async def test_replicas_starting_at_once_create_the_schema_once(schema: str, url: str) -> None:
    stores = [PostgresStore.from_url(url) for _ in range(5)]
    # All at once on a schema that does not exist yet: the advisory lock makes them take turns;
    # the first creates everything, the others find it done (no "already exists" errors).
    await asyncio.gather(*(s.open() for s in stores))
    try:
        assert _tables(schema) == {
            "meta",
            "queues",
            "queue_counters",
            "messages",
            "tombstones",
            "dedup",
            "attempts",
            "queue_metadata",
            "channel_counters",
            "channel_moves",
            "queue_state",
            "settings",
            "groups",
        }
        assert _meta(schema, "schema_version") == str(pg.SCHEMA_VERSION).encode()
        # One signing key, shared: every replica accepts every replica's receipts.
        await stores[0].create_queue("q", QueueConfig())
        await stores[1].send("q", [NewMessage(body=b"m")])
        [message] = (await stores[2].receive("q", 1, 60.0)).messages
        outcome = await stores[3].delete("q", [message.receipt])
        assert outcome.results[0].status is LeaseStatus.OK
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_reopening_keeps_data_and_key(schema: str, url: str) -> None:
    first = PostgresStore.from_url(url)
    await first.open()
    await first.create_queue("q", QueueConfig())
    await first.send("q", [NewMessage(body=b"m")])
    [message] = (await first.receive("q", 1, 60.0)).messages
    await first.close()
    key = _meta(schema, "receipt_signing_key")

    again = PostgresStore.from_url(url)
    await again.open()
    try:
        assert _meta(schema, "receipt_signing_key") == key
        outcome = await again.delete("q", [message.receipt])
        assert outcome.results[0].status is LeaseStatus.OK
    finally:
        await again.close()


async def test_a_schema_newer_than_the_code_is_refused(schema: str, url: str) -> None:
    store = PostgresStore.from_url(url)
    await store.open()
    await store.close()
    with connect() as conn:
        conn.execute(
            f"UPDATE \"{schema}\".meta SET value = %s WHERE name = 'schema_version'",
            (str(pg.SCHEMA_VERSION + 1).encode(),),
        )
    newer = PostgresStore.from_url(url)
    with pytest.raises(RuntimeError, match="version"):
        await newer.open()


async def test_a_failed_migration_leaves_nothing_behind(schema: str, url: str, monkeypatch) -> None:
    # A migration whose last statement fails: the whole transaction rolls back, so a fixed
    # release starts again from a clean slate instead of from half a schema.
    broken = [(pg.SCHEMA_VERSION, pg.MIGRATIONS[0][1] + ["SELECT * FROM no_such_table"])]
    store = PostgresStore.from_url(url, tuning=pg.Tuning(migrations=tuple(broken)))
    with pytest.raises(Exception, match="no_such_table"):
        await store.open()
    assert _tables(schema) == set()


def test_store_urls() -> None:
    settings = pg.parse_url(
        "postgresql://u:pw@db.example:6432/app?schema=tenant_1&pool_min=3&pool_max=20"
        "&sslmode=require&application_name=worker"
    )
    assert settings.schema == "tenant_1"
    assert (settings.pool_min, settings.pool_max) == (3, 20)
    assert settings.conninfo == (
        "postgresql://u:pw@db.example:6432/app?sslmode=require&application_name=worker"
    )
    defaults = pg.parse_url("postgres://localhost/app")
    assert (defaults.schema, defaults.pool_min, defaults.pool_max) == (
        pg.DEFAULT_SCHEMA,
        pg.DEFAULT_POOL_MIN,
        pg.DEFAULT_POOL_MAX,
    )
    assert pg.parse_url("postgresql://h/db?pool_min=30").pool_max == 30
    for bad in ("schema=Upper", "schema=1x", "schema=a-b", "pool_min=x", "pool_min=5&pool_max=2"):
        with pytest.raises(ValueError):
            pg.parse_url(f"postgresql://h/db?{bad}")
    assert isinstance(open_store("postgresql://h/db?schema=s"), PostgresStore)
    assert pg.with_pool_size("postgresql://h/db?schema=s&pool_max=3", 1, 9) == (
        "postgresql://h/db?schema=s&pool_min=1&pool_max=9"
    )


def test_url_options_with_spaces_reach_the_server() -> None:
    # libpq's `options` takes "-c name=value" pairs, spaces included: they must reach
    # PostgreSQL as spaces, whether the URL wrote them as %20 or as +, and also after
    # `leaseq serve --pool-max` has rewritten the URL.
    for spaced in ("-c%20statement_timeout%3D4321", "-c+statement_timeout=4321"):
        url = pg.with_pool_size(store_url("url_options") + f"&options={spaced}", 1, 2)
        with psycopg.connect(pg.parse_url(url).conninfo) as conn:
            assert conn.execute("SHOW statement_timeout").fetchone() == ("4321ms",)


def test_serve_flags_size_the_pool() -> None:
    from leaseq.cli.serve_cmd import _with_pool_size

    url = store_url("s")
    assert pg.parse_url(_with_pool_size(url, 1, 7)).pool_max == 7
    assert _with_pool_size("sqlite:///x.db", 1, 7) == "sqlite:///x.db"


def _send_as_before_version_4(
    schema: str,
    queue: str,
    bodies: list[bytes],
    channels: list[str] | None = None,
    ttl: float = 3600.0,
    delay: float = 0.0,
) -> None:
    """Messages written as a store older than schema version 4 wrote them: rows only (the
    store's own send keeps channel_counters, which that schema does not have yet)."""
    with connect() as conn:
        for i, body in enumerate(bodies):
            conn.execute(
                f'INSERT INTO "{schema}".messages (queue, message_id, body, channel,'
                " enqueued_at, expires_at, visible_at)"
                " SELECT q.id, md5(random()::text), %s, %s, t.now, t.now + %s, t.now + %s"
                f' FROM "{schema}".queues q, (SELECT extract(epoch FROM now()) AS now) t'
                " WHERE q.name = %s",
                (body, channels[i] if channels else "", ttl, delay, queue),
            )


async def test_a_version_2_schema_migrated_keeps_its_tombstones(
    schema: str, url: str, monkeypatch
) -> None:
    """Version 3 makes tombstones runs (last_key); the one-key rows of version 2 stay as they
    are (last_key NULL) and keep answering ALREADY_DELETED / RECEIPT_SUPERSEDED."""
    old = await _open_at_version(url, monkeypatch, 2, "q")
    _send_as_before_version_4(schema, "q", [str(i).encode() for i in range(4)])
    first = (await old.receive("q", 4, 60.0)).messages
    await old.change_visibility("q", [VisibilityChange(first[0].receipt, 0.0)])
    [again] = (await old.receive("q", 1, 60.0)).messages
    await old.close()
    # Acked as version 2 did: one tombstone row per key (the last message stays).
    acked = [(again.key, 2)] + [(m.key, 1) for m in first[1:3]]
    with connect() as conn:
        for key, seq in acked:
            conn.execute(f'DELETE FROM "{schema}".messages WHERE key = %s', (key,))
            conn.execute(
                f'INSERT INTO "{schema}".tombstones (key, queue, receipt_seq, deleted_at)'
                f' SELECT %s, id, %s, extract(epoch FROM now()) FROM "{schema}".queues',
                (key, seq),
            )
    monkeypatch.undo()

    store = PostgresStore.from_url(url)
    await store.open()
    try:
        assert _meta(schema, "schema_version") == str(pg.SCHEMA_VERSION).encode()
        with connect() as conn:
            nulls = conn.execute(
                f'SELECT count(*) FROM "{schema}".tombstones WHERE last_key IS NULL'
            ).fetchone()
        assert nulls == (3,)
        outcome = await store.delete("q", [m.receipt for m in first] + [again.receipt])
        assert [r.status for r in outcome.results] == [
            LeaseStatus.RECEIPT_SUPERSEDED,
            LeaseStatus.ALREADY_DELETED,
            LeaseStatus.ALREADY_DELETED,
            LeaseStatus.OK,
            LeaseStatus.ALREADY_DELETED,
        ]
        assert (await store.delete("q", [first[3].receipt])).results[0].status is (
            LeaseStatus.ALREADY_DELETED
        )
    finally:
        await store.close()


async def test_a_version_3_schema_migrated_counts_its_channels(
    schema: str, url: str, monkeypatch
) -> None:
    """Version 4 adds channel_counters, filled from the rows already there (expired ones not
    swept yet included), and messages_enqueued: stats afterwards are what counting said."""
    old = await _open_at_version(url, monkeypatch, 3, "q", "other")
    _send_as_before_version_4(schema, "q", [b"a", b"b", b"c"], ["", "red", "red"])
    _send_as_before_version_4(schema, "q", [b"late"], ["blue"], delay=600.0)
    _send_as_before_version_4(schema, "other", [b"x"] * 5, ["green"] * 5)
    [leased] = (await old.receive("q", 1, 60.0)).messages
    _send_as_before_version_4(schema, "q", [b"gone", b"gone"], ["red", "blue"], ttl=-1.0)
    await old.close()
    monkeypatch.undo()

    store = PostgresStore.from_url(url)
    await store.open()
    try:
        assert _meta(schema, "schema_version") == str(pg.SCHEMA_VERSION).encode()
        with connect() as conn:
            counters = conn.execute(
                f'SELECT q.name, c.channel, sum(c.total) FROM "{schema}".channel_counters c'
                f' JOIN "{schema}".queues q ON q.id = c.queue GROUP BY q.name, c.channel'
            ).fetchall()
            [[indexed]] = conn.execute(
                "SELECT count(*) FROM pg_indexes WHERE schemaname = %s"
                " AND indexname = 'messages_enqueued'",
                (schema,),
            ).fetchall()
        # Counted before any sweep: the two expired messages are held still.
        assert sorted(counters) == [
            ("other", "green", 5),
            ("q", "", 1),
            ("q", "blue", 2),
            ("q", "red", 3),
        ]
        assert indexed == 1
        stats = await store.stats("q")
        assert {ch: (c.visible, c.leased, c.delayed) for ch, c in stats.channels.items()} == {
            "": (0, 1, 0),
            "red": (2, 0, 0),
            "blue": (0, 0, 1),
        }
        assert (stats.total, stats.expired_total) == (4, 2)
        assert stats.oldest_visible_age > 0
        assert (await store.stats("other")).channels["green"].visible == 5
        outcome = await store.delete("q", [leased.receipt])
        assert outcome.results[0].status is LeaseStatus.OK
        assert (await store.stats("q")).total == 3
        # Replicas of version 3 still serving write as before (plain statements, no counters):
        # the triggers count them all the same.
        _send_as_before_version_4(schema, "q", [b"d", b"e"], ["red", "new"])
        _send_as_before_version_4(schema, "other", [b"y"], ["green"])
        with connect() as conn:
            m = f'"{schema}".messages'
            conn.execute(  # an ack of one of q's
                f"DELETE FROM {m} WHERE key = (SELECT min(key) FROM {m} WHERE channel = 'red')"
            )
            conn.execute(  # a dead-letter move of 'other's messages to q
                f"UPDATE {m} SET queue = (SELECT id FROM \"{schema}\".queues WHERE name = 'q')"
                f" WHERE key IN (SELECT key FROM {m} WHERE channel = 'green' LIMIT 2)"
            )
        assert channel_counters(schema) == channel_rows(schema)
        assert (await store.stats("q")).total == 3 + 2 - 1 + 2
    finally:
        await store.close()


async def test_writes_of_version_3_replicas_during_the_migration_are_counted_once(
    schema: str, url: str, monkeypatch
) -> None:
    """A replica of version 3 sends, acks and moves messages by plain SQL, on its own
    connection, all through the migration to version 4 (a rolling upgrade): each of its writes
    lands either before the initial count or after the triggers exist, so the counters are the
    rows afterwards, exactly."""
    import threading

    old = await _open_at_version(url, monkeypatch, 3, "q", "dlq")
    await old.close()
    monkeypatch.undo()
    _send_as_before_version_4(schema, "q", [b"m"] * 50, ["a", "b"] * 25)

    stop = threading.Event()
    writes = [0]

    def writer() -> None:
        m = f'"{schema}".messages'
        with connect() as conn:
            ids = dict(conn.execute(f'SELECT name, id FROM "{schema}".queues').fetchall())
            while not stop.is_set():
                conn.execute(
                    f"INSERT INTO {m} (queue, message_id, body, channel, enqueued_at,"
                    " expires_at, visible_at) SELECT %s, md5(random()::text), 'm', c, 0, 1e12, 0"
                    " FROM unnest(ARRAY['a', 'b', 'c']) AS c",
                    (ids["q"],),
                )
                conn.execute(
                    f"DELETE FROM {m} WHERE key = (SELECT min(key) FROM {m} WHERE queue = %s)",
                    (ids["q"],),
                )
                conn.execute(
                    f"UPDATE {m} SET queue = %s"
                    f" WHERE key = (SELECT max(key) FROM {m} WHERE queue = %s)",
                    (ids["dlq"], ids["q"]),
                )
                writes[0] += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while writes[0] < 20:
            await asyncio.sleep(0.01)
        store = PostgresStore.from_url(url)
        await store.open()  # migrates to version 4 while the writer goes on
        try:
            before = writes[0]
            while writes[0] < before + 20:
                await asyncio.sleep(0.01)
        finally:
            await store.close()
    finally:
        stop.set()
        thread.join()
    assert _meta(schema, "schema_version") == str(pg.SCHEMA_VERSION).encode()
    assert channel_counters(schema) == channel_rows(schema)
