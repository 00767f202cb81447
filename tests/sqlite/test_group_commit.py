"""Group commit: operations waiting together share one transaction and one fsync, and a failing
operation inside a group rolls back only itself."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from leaseq.server.domain.types import NewMessage, QueueConfig
from leaseq.server.errors import InvalidArgument, QueueNotFound, Unavailable
from leaseq.server.store.sqlite import SqliteStore

from .conftest import held_writer, run_on_writer, until, waiting_operations


async def test_concurrent_sends_share_commits(store: SqliteStore) -> None:
    await store.create_queue("q", QueueConfig())
    commits = store.commit_count
    await asyncio.gather(*(store.send("q", [NewMessage(b"%d" % i)]) for i in range(16)))
    # Without any help: while one group commits, the next sends queue up behind it.
    assert store.commit_count - commits < 16
    assert (await store.stats("q")).visible == 16


async def test_operations_waiting_together_commit_once(store: SqliteStore) -> None:
    await store.create_queue("q", QueueConfig())
    async with held_writer(store):
        commits, operations = store.commit_count, store.operation_count
        sends = [asyncio.ensure_future(store.send("q", [NewMessage(b"%d" % i)])) for i in range(16)]
        await until(lambda: waiting_operations(store) == 16)
    results = await asyncio.gather(*sends)
    assert all(len(r) == 1 and not r[0].duplicate for r in results)
    # One commit for the parked operation's group, one for all sixteen sends.
    assert store.commit_count - commits == 2
    assert store.operation_count - operations == 17
    page = await store.peek("q", 100)
    assert [m.body for m in page.messages] == [b"%d" % i for i in range(16)]  # submission order


def _write_then_fail(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO meta (name, value) VALUES ('scratch', 1)")
    raise RuntimeError("boom")


def _scratch_rows(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT COUNT(*) FROM meta WHERE name = 'scratch'").fetchone()[0]


async def test_a_failing_operation_does_not_roll_back_its_neighbours(store: SqliteStore) -> None:
    await store.create_queue("q", QueueConfig())
    async with held_writer(store):
        commits = store.commit_count
        calls = [
            store.send("q", [NewMessage(b"before")]),
            run_on_writer(store, _write_then_fail),  # wrote a row, then raised
            store.send("missing", [NewMessage(b"x")]),  # a domain error
            store.create_queue("bad", QueueConfig(dead_letter_queue="nope")),
            store.send("q", [NewMessage(b"after")]),
        ]
        futures = [asyncio.ensure_future(call) for call in calls]
        await until(lambda: waiting_operations(store) == len(calls))
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert store.commit_count - commits == 2  # the parked group, then all five in one group

    assert len(results[0]) == 1 and len(results[4]) == 1
    assert isinstance(results[1], RuntimeError)
    assert isinstance(results[2], QueueNotFound)
    assert isinstance(results[3], InvalidArgument)
    assert await run_on_writer(store, _scratch_rows) == 0  # its own write was undone
    page = await store.peek("q", 10)
    assert [m.body for m in page.messages] == [b"before", b"after"]
    with pytest.raises(QueueNotFound):
        await store.get_queue("bad")


async def test_a_failing_first_operation_of_a_group_rolls_back_only_itself(
    store: SqliteStore,
) -> None:
    """The first operation of a group runs without a savepoint (writer._run_first): its
    failure undoes the transaction so far, which is its own work only, and the rest of the
    group runs in a new one."""
    await store.create_queue("q", QueueConfig())
    async with held_writer(store):
        commits = store.commit_count
        calls = [
            run_on_writer(store, _write_then_fail),  # first of the group: wrote, then raised
            store.send("q", [NewMessage(b"after")]),
            run_on_writer(store, _write_then_fail),  # not first: undone by its savepoint
            store.send("q", [NewMessage(b"last")]),
        ]
        futures = [asyncio.ensure_future(call) for call in calls]
        await until(lambda: waiting_operations(store) == len(calls))
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert store.commit_count - commits == 2  # the parked group, then these four in one
    assert isinstance(results[0], RuntimeError) and isinstance(results[2], RuntimeError)
    assert await run_on_writer(store, _scratch_rows) == 0
    page = await store.peek("q", 10)
    assert [m.body for m in page.messages] == [b"after", b"last"]
    # Alone in its group too: nothing of it stays, and the next operation works.
    with pytest.raises(RuntimeError):
        await run_on_writer(store, _write_then_fail)
    assert await run_on_writer(store, _scratch_rows) == 0
    assert len(await store.send("q", [NewMessage(b"more")])) == 1


async def test_a_caller_cancelled_before_its_turn_changes_nothing(store: SqliteStore) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(b"m")])
    async with held_writer(store):
        receive = asyncio.ensure_future(store.receive("q", 1, visibility_timeout=60.0))
        await until(lambda: waiting_operations(store) == 1)
        receive.cancel()
    with pytest.raises(asyncio.CancelledError):
        await receive
    # The receive never ran: no lease that nobody would ever see.
    stats = await store.stats("q")
    assert (stats.visible, stats.leased) == (1, 0)


def _pragmas(conn: sqlite3.Connection) -> tuple[str, int, int]:
    return (
        conn.execute("PRAGMA journal_mode").fetchone()[0],
        conn.execute("PRAGMA synchronous").fetchone()[0],
        conn.execute("PRAGMA foreign_keys").fetchone()[0],
    )


async def test_durable_settings(store: SqliteStore) -> None:
    # WAL, synchronous=FULL (2): a commit is on disk when it returns.
    assert await run_on_writer(store, _pragmas) == ("wal", 2, 1)


def _page_limit(pages_more: int | None):
    def set_limit(conn: sqlite3.Connection) -> int:
        current = conn.execute("PRAGMA page_count").fetchone()[0]
        limit = 2**31 - 2 if pages_more is None else current + pages_more
        return conn.execute(f"PRAGMA max_page_count = {limit}").fetchone()[0]

    return set_limit


async def test_a_full_database_fails_operations_and_then_recovers(store: SqliteStore) -> None:
    """SQLITE_FULL (a file that may not grow, like a full disk) fails the operation that hit it,
    leaves no partial write behind, and the store works again once there is room."""
    await store.create_queue("q", QueueConfig())
    await run_on_writer(store, _page_limit(2))
    big = [NewMessage(b"x" * 4096) for _ in range(100)]
    async with held_writer(store):
        futures = [
            asyncio.ensure_future(store.send("q", [NewMessage(b"small")])),
            asyncio.ensure_future(store.send("q", big)),
        ]
        await until(lambda: waiting_operations(store) == 2)
    small, failed = await asyncio.gather(*futures, return_exceptions=True)
    assert isinstance(failed, Unavailable)
    # Depending on how SQLite handled the error, the neighbour kept its work or heard that the
    # whole group was lost; either way what it was told is what the file holds.
    stats = await store.stats("q")
    assert stats.visible == (0 if isinstance(small, Exception) else 1)

    await run_on_writer(store, _page_limit(None))
    assert len(await store.send("q", big)) == 100
    assert (await store.stats("q")).visible == stats.visible + 100


async def test_a_writer_shortens_the_gil_switch_interval(tmp_path) -> None:
    """Opening the store lowers the interpreter's switch interval to writer.SWITCH_INTERVAL (so
    the writer's SQLite steps take the GIL back without waiting 5 ms behind the event loop), and
    never raises one that is already shorter."""
    import sys

    from leaseq.server.store.sqlite import writer

    previous = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        store = SqliteStore(tmp_path / "a.db")
        await store.open()
        await store.close()
        assert sys.getswitchinterval() == pytest.approx(writer.SWITCH_INTERVAL)
        sys.setswitchinterval(0.0001)
        store = SqliteStore(tmp_path / "b.db")
        await store.open()
        await store.close()
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    finally:
        sys.setswitchinterval(previous)
