"""SQLite work never runs on the event loop: the loop keeps turning during a big batch."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

from leaseq.server.store.base import NewMessage, QueueConfig, VisibilityChange
from leaseq.server.store.sqlite import SqliteStore

from .conftest import run_on_writer

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


async def test_operations_run_on_the_writer_thread(store: SqliteStore) -> None:
    def thread_of(conn: sqlite3.Connection) -> int:
        return threading.get_ident()

    assert await run_on_writer(store, thread_of) != threading.get_ident()
