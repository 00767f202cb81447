"""Fixtures for the SQLite backend's own tests: real files in tmp_path, a fake clock.

`held_writer` parks the writer's thread on a heavy operation of its own, so that everything
submitted meanwhile waits in its queue and is committed as one group once the block exits: group
commit becomes deterministic without sleeping.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.store.sqlite import SqliteStore, writer


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    # A parent that does not exist yet: opening must create it.
    return tmp_path / "data" / "leaseq.db"


@pytest.fixture
async def store(db_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(db_path, clock=clock)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def run_on_writer(store: SqliteStore, fn: Callable[[sqlite3.Connection], object], weight: int = 1):
    """Run fn(connection) on the store's writer as one operation of a group: on the event loop,
    or with a weight above writer.INLINE_WEIGHT on the writer's thread."""
    assert store._writer is not None
    return store._writer.submit(fn, weight)


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the event loop until condition holds (each turn lets ready tasks run)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def waiting_operations(store: SqliteStore) -> int:
    assert store._writer is not None
    return store._writer.waiting()


@asynccontextmanager
async def held_writer(store: SqliteStore) -> AsyncIterator[None]:
    entered, release = threading.Event(), threading.Event()

    def park(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(timeout=30)

    # Heavy, so that it parks the writer's thread and not the event loop.
    parked = asyncio.ensure_future(run_on_writer(store, park, writer.HEAVY))
    # Waiting for a thread event is blocking, so it happens on a helper thread.
    assert await asyncio.to_thread(entered.wait, 30)
    try:
        yield
    finally:
        release.set()
        await parked


@contextmanager
def read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """A second connection to the file (WAL lets it read while the store is open)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()


# Version 4's message indexes, as that version made them.
_VERSION_4_INDEXES = (
    "CREATE INDEX messages_visible ON messages (queue, visible_at, key)",
    "CREATE INDEX messages_expiry ON messages (queue, expires_at)",
    "CREATE INDEX messages_leased ON messages (queue, visible_at) WHERE leased = 1",
    "CREATE INDEX messages_enqueued ON messages (queue, enqueued_at)",
)


def rewrite_as_version_6(conn: sqlite3.Connection) -> None:
    """Turn a file of the current schema into what version 6 wrote (inside the caller's
    transaction): no retry policy columns, no messages' backoff and its index."""
    conn.execute("DROP INDEX messages_backoff")
    conn.execute("ALTER TABLE messages DROP COLUMN backoff")
    conn.execute("ALTER TABLE queues DROP COLUMN retry_minimum_backoff")
    conn.execute("ALTER TABLE queues DROP COLUMN retry_maximum_backoff")
    conn.execute("UPDATE meta SET value = 6 WHERE name = 'schema_version'")


def rewrite_as_version_5(conn: sqlite3.Connection) -> None:
    """Turn a file of the current schema into what version 5 wrote (inside the caller's
    transaction): no message groups (nor what later versions added)."""
    rewrite_as_version_6(conn)
    for index in ("messages_group", "messages_group_visible"):
        conn.execute(f"DROP INDEX {index}")
    conn.execute("DROP TABLE groups")
    conn.execute("ALTER TABLE messages DROP COLUMN grp")
    for column in ("ordering", "content_based_dedup", "dedup_scope"):
        conn.execute(f"ALTER TABLE queues DROP COLUMN {column}")
    conn.execute("UPDATE meta SET value = 5 WHERE name = 'schema_version'")


def rewrite_as_version_4(conn: sqlite3.Connection) -> None:
    """Turn a file of the current schema into what version 4 wrote (inside the caller's
    transaction): no lifetime classes, its four message indexes."""
    rewrite_as_version_5(conn)
    for index in ("messages_visible", "messages_expiry", "messages_enqueued"):
        conn.execute(f"DROP INDEX {index}")
    conn.execute("DROP TABLE lifetimes")
    conn.execute("ALTER TABLE messages DROP COLUMN lifetime")
    for statement in _VERSION_4_INDEXES:
        conn.execute(statement)
    conn.execute("UPDATE meta SET value = 4 WHERE name = 'schema_version'")
