"""Where the SQLite work runs (writer.py): light operations on the event loop, heavy ones on the
writer's thread while the loop keeps turning, and a file locked by another process is waited for
on that thread, never on the loop."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import NewMessage, QueueConfig, VisibilityChange
from leaseq.server.errors import Unavailable
from leaseq.server.store.sqlite import SqliteStore, writer

from .conftest import held_writer, run_on_writer, until, waiting_operations

BATCH = 10_000


async def _turns_while_pending(work: asyncio.Future[object]) -> int:
    """How many times the event loop got round to this coroutine before `work` finished. A store
    that blocked the loop would finish inside one turn."""
    turns = 0
    while not work.done():
        await asyncio.sleep(0)  # a yield to the loop, not a wait
        turns += 1
    return turns


async def test_the_loop_turns_during_a_big_batch(store: SqliteStore) -> None:
    await store.create_queue("q", QueueConfig())
    body = b"x" * 1024
    send = asyncio.ensure_future(store.send("q", [NewMessage(body) for _ in range(BATCH)]))
    assert await _turns_while_pending(send) > 10
    assert len(send.result()) == BATCH

    receive = asyncio.ensure_future(store.receive("q", BATCH, visibility_timeout=60.0))
    assert await _turns_while_pending(receive) > 10
    messages = receive.result().messages
    assert len(messages) == BATCH

    changes = [VisibilityChange(m.receipt, 0.0) for m in messages]
    release = asyncio.ensure_future(store.change_visibility("q", changes))
    assert await _turns_while_pending(release) > 10
    assert len(release.result()) == BATCH


def _thread_of(conn: sqlite3.Connection) -> int:
    return threading.get_ident()


async def test_light_operations_run_on_the_loop_and_heavy_ones_on_the_writer_thread(
    store: SqliteStore,
) -> None:
    loop_thread = threading.get_ident()
    assert await run_on_writer(store, _thread_of, writer.INLINE_WEIGHT) == loop_thread
    assert await run_on_writer(store, _thread_of, writer.INLINE_WEIGHT + 1) != loop_thread


async def test_a_send_of_a_few_big_messages_runs_off_the_loop(store: SqliteStore) -> None:
    """A send weighs its bytes too (store.BYTES_PER_WEIGHT): eight 4 MiB bodies are as heavy as
    thousands of small ones."""
    await store.create_queue("q", QueueConfig(max_message_bytes=4 << 20))
    send = asyncio.ensure_future(store.send_bodies("q", [b"x" * (4 << 20)] * 8))
    assert await _turns_while_pending(send) > 10
    assert len(send.result()) == 8


async def test_a_purge_runs_off_the_loop(store: SqliteStore) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(b"x") for _ in range(BATCH)])
    purge = asyncio.ensure_future(store.purge_queue("q"))
    assert await _turns_while_pending(purge) > 10
    assert purge.result() == BATCH


def _moved_off_the_loop(store: SqliteStore) -> int:
    assert store._writer is not None
    return store._writer.moved_off_the_loop


async def _expired_backlog(store: SqliteStore, clock: FakeClock, name: str) -> int:
    """A queue whose whole backlog expired at once."""
    await store.create_queue(name, QueueConfig(message_retention=60.0))
    for _ in range(2):
        await store.send_bodies(name, [b"x"] * writer.INLINE_WEIGHT)
    clock.advance(61.0)
    return 2 * writer.INLINE_WEIGHT


async def test_a_group_past_its_time_on_the_loop_runs_again_on_the_thread(
    store: SqliteStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The expiry sweep before a light operation can find a big backlog to remove: SQLite
    interrupts it at MAX_LOOP_SECONDS (0 here: at its first look at the clock) and the group is
    done on the thread instead, whole."""
    expired = await _expired_backlog(store, clock, "q")
    assert _moved_off_the_loop(store) == 0  # light groups in their time stay on the loop
    monkeypatch.setattr(writer, "MAX_LOOP_SECONDS", 0.0)
    assert len(await store.send_bodies("q", [b"after"])) == 1
    assert _moved_off_the_loop(store) == 1
    stats = await store.stats("q")
    assert (stats.visible, stats.expired_total) == (1, expired)
    assert [m.body for m in (await store.peek("q", 10)).messages] == [b"after"]
    # A light operation with little to do stays on the loop.
    assert await run_on_writer(store, _thread_of) == threading.get_ident()
    assert _moved_off_the_loop(store) == 1


async def test_a_group_moved_off_the_loop_runs_each_operation_once(
    store: SqliteStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operations of the group before the interrupted one had run on the loop: all of that
    is undone and the whole group runs again on the thread, so each takes effect once."""
    await store.create_queue("other", QueueConfig())
    await _expired_backlog(store, clock, "q")
    monkeypatch.setattr(writer, "MAX_LOOP_SECONDS", 0.0)
    async with held_writer(store):
        first = asyncio.ensure_future(store.send_bodies("other", [b"once"]))
        second = asyncio.ensure_future(store.send_bodies("q", [b"after"]))
        await until(lambda: waiting_operations(store) == 2)
    assert (len(await first), len(await second)) == (1, 1)
    assert _moved_off_the_loop(store) == 1
    assert [m.body for m in (await store.peek("other", 10)).messages] == [b"once"]
    assert [m.body for m in (await store.peek("q", 10)).messages] == [b"after"]
    assert (await store.stats("other")).visible == 1


async def test_a_receive_that_scans_a_long_queue_in_vain_leaves_the_loop(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A channel prefix that none of a long queue's messages match reads the whole queue."""
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(b"a", channel="orders") for _ in range(writer.INLINE_WEIGHT)])
    monkeypatch.setattr(writer, "MAX_LOOP_SECONDS", 0.0)
    outcome = await store.receive("q", 10, visibility_timeout=30.0, channel_filter="refunds*")
    assert outcome.messages == []
    assert _moved_off_the_loop(store) == 1
    outcome = await store.receive("q", 10, visibility_timeout=30.0, channel_filter="ord*")
    assert [m.body for m in outcome.messages] == [b"a"] * 10


async def test_a_file_locked_by_another_process_is_waited_for_off_the_loop(
    store: SqliteStore, db_path: Path
) -> None:
    await store.create_queue("q", QueueConfig())
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # holds the write lock, as a backup or the CLI may
        send = asyncio.ensure_future(store.send("q", [NewMessage(b"waited")]))
        # The loop keeps turning while the send waits for the lock (on the writer's thread).
        await until(lambda: _on_thread(store))
        assert not send.done()
        other.execute("COMMIT")
    finally:
        other.close()
    assert len(await send) == 1
    # And the next light operation runs on the loop again.
    assert await run_on_writer(store, _thread_of) == threading.get_ident()
    assert [m.body for m in (await store.peek("q", 10)).messages] == [b"waited"]


async def test_a_lock_held_past_the_wait_fails_the_operation_and_changes_nothing(
    store: SqliteStore, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "BUSY_TIMEOUT_MS", 50)
    await store.create_queue("q", QueueConfig())
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(Unavailable, match="locked"):
            await store.send("q", [NewMessage(b"refused")])
        other.execute("COMMIT")
    finally:
        other.close()
    # Nothing of it was written, and the writer works on as before (on the loop again).
    assert (await store.peek("q", 10)).messages == []
    assert len(await store.send("q", [NewMessage(b"after")])) == 1
    assert await run_on_writer(store, _thread_of) == threading.get_ident()


def _on_thread(store: SqliteStore) -> bool:
    """Whether a group is running on the writer's thread now."""
    assert store._writer is not None
    return store._writer.on_thread()
