"""A store closed and opened again on the same file keeps everything: messages, counters,
queue configs and the receipt signing key (receipts issued before the restart still work)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import LeaseStatus, MessageState, NewMessage, QueueConfig
from leaseq.server.errors import Unavailable
from leaseq.server.store import StoreOpenError, open_store
from leaseq.server.store.sqlite import SqliteStore

from .conftest import read_only


async def _reopen(store: SqliteStore, path: Path, clock: FakeClock) -> SqliteStore:
    await store.close()
    again = SqliteStore(path, clock=clock)
    await again.open()
    return again


async def test_reopen_keeps_messages_counters_and_receipts(db_path: Path, clock: FakeClock) -> None:
    store = SqliteStore(db_path, clock=clock)
    await store.open()
    try:
        assert db_path.parent.is_dir()
        await store.create_queue("dead", QueueConfig())
        config = QueueConfig(dead_letter_queue="dead", max_delivery_count=1, dedup_window=600.0)
        await store.create_queue("work", config)
        sent = await store.send(
            "work",
            [
                NewMessage(b"held", {"k": "v"}, channel="c", dedup_id="d"),
                NewMessage(b"to-delete"),
                NewMessage(b"short", ttl=5.0),
                NewMessage(b"dead-soon"),
            ],
        )
        held, to_delete = (await store.receive("work", 2, visibility_timeout=300.0)).messages
        await store.delete("work", [to_delete.receipt])
        clock.advance(10)  # "short" expires
        # "dead-soon" is delivered once; the next receive moves it to the dead letter queue.
        await store.receive("work", 1, visibility_timeout=1.0)
        clock.advance(2)
        assert (await store.receive("work", 1, visibility_timeout=1.0)).messages == []
        before = await store.stats("work")

        store = await _reopen(store, db_path, clock)

        assert await store.stats("work") == before
        assert (before.dead_lettered_total, before.expired_total, before.deleted_total) == (1, 1, 1)
        assert (await store.get_queue("work")).config == config
        [peeked] = (await store.peek("work", 10, include_leased=True)).messages
        assert (peeked.body, peeked.attributes, peeked.channel) == (b"held", {"k": "v"}, "c")
        assert peeked.state is MessageState.LEASED
        # The signing key lives in the file: receipts from before the restart still verify.
        outcome = await store.delete("work", [held.receipt, to_delete.receipt])
        assert [r.status for r in outcome.results] == [LeaseStatus.OK, LeaseStatus.ALREADY_DELETED]
        # Dedup records survive too.
        [again] = await store.send("work", [NewMessage(b"x", dedup_id="d")])
        assert (again.message_id, again.duplicate) == (sent[0].message_id, True)
    finally:
        await store.close()


async def test_keys_are_never_reused(db_path: Path, clock: FakeClock) -> None:
    """A receipt names (key, seq): were a key reused after its message was deleted, an old
    receipt could act on a new message. AUTOINCREMENT keeps keys growing, even across a restart
    with an empty table."""
    store = SqliteStore(db_path, clock=clock)
    await store.open()
    try:
        await store.create_queue("q", QueueConfig())
        await store.send("q", [NewMessage(b"a"), NewMessage(b"b")])
        old = (await store.receive("q", 2)).messages
        await store.delete("q", [m.receipt for m in old])
        store = await _reopen(store, db_path, clock)
        await store.send("q", [NewMessage(b"c")])
        [new] = (await store.receive("q", 1)).messages
        assert new.key > max(m.key for m in old)
        outcome = await store.delete("q", [m.receipt for m in old])
        assert {r.status for r in outcome.results} == {LeaseStatus.ALREADY_DELETED}
    finally:
        await store.close()


async def test_open_store_url_gives_a_sqlite_store(tmp_path: Path, clock: FakeClock) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x/q.db", clock=clock)
    assert isinstance(store, SqliteStore)
    await store.open()
    await store.close()
    assert (tmp_path / "x" / "q.db").exists()


async def test_close_finishes_queued_work_then_refuses(db_path: Path, clock: FakeClock) -> None:
    store = SqliteStore(db_path, clock=clock)
    await store.open()
    await store.create_queue("q", QueueConfig())
    sends = [asyncio.ensure_future(store.send("q", [NewMessage(b"%d" % i)])) for i in range(20)]
    await asyncio.sleep(0)  # let every send reach the writer's queue before close does
    await store.close()
    assert all(len(s.result()) == 1 for s in sends)
    with pytest.raises(Unavailable):
        await store.stats("q")

    store = SqliteStore(db_path, clock=clock)
    await store.open()
    try:
        assert (await store.stats("q")).visible == 20
    finally:
        await store.close()


async def test_the_signing_key_is_made_once_per_file(db_path: Path, clock: FakeClock) -> None:
    keys = []
    for _ in range(2):
        store = SqliteStore(db_path, clock=clock)
        await store.open()
        await store.close()
        with read_only(db_path) as conn:
            rows = conn.execute(
                "SELECT value FROM meta WHERE name = 'receipt_signing_key'"
            ).fetchall()
        keys.append(rows)
    assert keys[0] == keys[1] and len(keys[0]) == 1 and len(keys[0][0][0]) == 32


async def test_open_fails_cleanly_when_the_path_is_unusable(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()  # a directory where the file should be
    store = SqliteStore(tmp_path / "taken")
    with pytest.raises(StoreOpenError, match="it is a directory"):
        await store.open()
    with pytest.raises(Unavailable):
        await store.stats("q")


async def test_a_file_of_another_schema_version_is_refused(db_path: Path, clock: FakeClock) -> None:
    store = SqliteStore(db_path, clock=clock)
    await store.open()
    await store.close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE meta SET value = 99 WHERE name = 'schema_version'")
    conn.close()
    with pytest.raises(RuntimeError, match="schema version 99"):
        await SqliteStore(db_path, clock=clock).open()
