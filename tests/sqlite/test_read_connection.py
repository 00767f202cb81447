"""Stats and peek read on the store's read connection, not on the writer thread: a long scan
does not hold up sends, receives and acks (the writer only sweeps, and reads the counters)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from leaseq.server.domain.types import NewMessage, QueueConfig
from leaseq.server.store.sqlite import SqliteStore


@asynccontextmanager
async def parked_reader(store: SqliteStore) -> AsyncIterator[None]:
    """Keep the read connection's thread busy (standing for a scan that takes long) for the
    duration of the block."""
    assert store._reader is not None
    entered, release = threading.Event(), threading.Event()

    def park(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(30)

    parked = asyncio.ensure_future(store._reader.run(park))
    await asyncio.to_thread(entered.wait, 30)
    try:
        yield
    finally:
        release.set()
        await parked


async def test_the_writer_goes_on_while_a_stats_scan_waits(store: SqliteStore) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(b"a"), NewMessage(b"b"), NewMessage(b"c")])
    async with parked_reader(store):
        stats = asyncio.ensure_future(store.stats("q"))
        # Sends and receives commit while the stats call waits for the read connection (the
        # receive is queued behind the stats call's part on the writer).
        await store.send("q", [NewMessage(b"d")])
        received = await store.receive("q", 1, visibility_timeout=30)
        assert len(received.messages) == 1
        assert not stats.done()
    result = await stats
    # The scan reads the last commit: all four messages, one of them leased.
    assert (result.total, result.visible, result.leased, result.delayed) == (4, 3, 1, 0)


async def test_the_writer_goes_on_while_a_peek_waits(store: SqliteStore) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(b"a"), NewMessage(b"b")])
    async with parked_reader(store):
        peek = asyncio.ensure_future(store.peek("q", 10))
        # The second send is queued behind peek's sweep on the writer: both commit while the
        # peek waits for the read connection.
        await store.send("q", [NewMessage(b"c")])
        await store.send("q", [NewMessage(b"d")])
        assert not peek.done()
    page = await peek
    assert [m.body for m in page.messages] == [b"a", b"b", b"c", b"d"]


async def test_the_read_connection_cannot_write(store: SqliteStore) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(b"a")])
    assert store._reader is not None
    with pytest.raises(sqlite3.OperationalError):
        await store._reader.run(lambda conn: conn.execute("DELETE FROM messages"))
    assert (await store.stats("q")).total == 1
