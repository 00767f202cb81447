"""get_queue from memory (queue_infos.py): a replica keeps its answers only while its listener
hears of changes, drops one when a change of the queue's row commits anywhere (the notification
inside that transaction), at once for its own changes, after QUEUE_INFO_SECONDS in any case,
and keeps none that may predate a change.

The rows are also changed behind the stores' backs (plain SQL, no notification): an answer that
still shows the old row proves it came from memory."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import QueueConfig, QueueInfo
from leaseq.server.errors import QueueInUse, QueueNotFound
from leaseq.server.store.postgres import PostgresStore
from leaseq.server.store.postgres.queue_infos import QueueInfos
from leaseq.server.store.postgres.settings import QUEUE_INFO_SECONDS
from tests.support.postgres import connect

SAFETY_TIMEOUT = 10.0  # a change never heard fails instead of hanging


@pytest.fixture
async def replicas(url: str) -> AsyncIterator[list[PostgresStore]]:
    """Two stores over one schema, listening, their memories on clocks that stand still (so an
    answer changes only because a change was heard, never because it aged)."""
    stores = [PostgresStore.from_url(url) for _ in range(2)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        for s in stores:
            s._queue_infos.clock = FakeClock().now
            await asyncio.wait_for(s.listening.wait(), SAFETY_TIMEOUT)
        yield stores
    finally:
        await asyncio.gather(*(s.close() for s in stores))


def _behind_the_back(schema: str, max_message_bytes: int) -> None:
    """Change the queue's row without telling anyone."""
    with connect() as conn:
        conn.execute(
            f"UPDATE {schema}.queues SET max_message_bytes = %s WHERE name = 'q'",
            (max_message_bytes,),
        )


async def _until(condition, what: str) -> None:
    async def wait() -> None:
        while not await condition():
            await asyncio.sleep(0.005)

    try:
        await asyncio.wait_for(wait(), SAFETY_TIMEOUT)
    except TimeoutError:
        pytest.fail(f"never: {what}")


async def _heard(store: PostgresStore, change) -> None:
    """Run change (through another store) and wait until store hears of it."""
    generation = store._queue_infos.generation
    await change

    async def heard() -> bool:
        return store._queue_infos.generation != generation

    await _until(heard, "the change is heard")


async def test_a_replica_answers_from_memory_until_it_hears_of_a_change(
    replicas, schema: str
) -> None:
    a, b = replicas
    await _heard(b, a.create_queue("q", QueueConfig()))
    first = await b.get_queue("q")
    _behind_the_back(schema, 1234)
    assert await b.get_queue("q") == first  # from memory
    changed = dataclasses.replace(QueueConfig(), max_message_bytes=4321)
    await a.update_queue("q", changed)

    async def heard() -> bool:
        return (await b.get_queue("q")).config == changed

    await _until(heard, "b hears of a's update")


async def test_a_replica_forgets_at_once_what_it_changed_itself(replicas) -> None:
    a, b = replicas
    await _heard(b, a.create_queue("q", QueueConfig()))
    await a.get_queue("q")
    changed = dataclasses.replace(QueueConfig(), visibility_timeout=7.0)
    await _heard(b, a.update_queue("q", changed))
    assert (await a.get_queue("q")).config == changed
    await b.get_queue("q")
    await a.delete_queue("q")
    with pytest.raises(QueueNotFound):
        await a.get_queue("q")

    async def gone() -> bool:
        try:
            await b.get_queue("q")
        except QueueNotFound:
            return True
        return False

    await _until(gone, "b hears that a deleted the queue")
    # Made again under the same name, with another configuration: heard as well.
    await b.create_queue("q", changed)
    assert (await a.get_queue("q")).config == changed


async def test_a_rolled_back_change_tells_nobody(replicas, schema: str) -> None:
    a, b = replicas
    await _heard(b, a.create_queue("q", QueueConfig()))
    await _heard(b, a.create_queue("dlq", QueueConfig()))
    with_dlq = dataclasses.replace(QueueConfig(), dead_letter_queue="dlq")
    await _heard(b, a.update_queue("q", with_dlq))
    generation = b._queue_infos.generation
    with pytest.raises(QueueInUse):
        await a.delete_queue("dlq")  # rolled back, its notification with it
    # A change after it is heard; the rolled-back one never was.
    await _heard(b, a.update_queue("q", QueueConfig()))
    assert b._queue_infos.generation == generation + 1


async def test_nothing_from_memory_survives_the_listener_going_down(
    db_store: PostgresStore, schema: str
) -> None:
    store = db_store
    store._queue_infos.clock = FakeClock().now
    await asyncio.wait_for(store.listening.wait(), SAFETY_TIMEOUT)
    await store.create_queue("q", QueueConfig())
    await store.get_queue("q")
    generation = store._queue_infos.generation
    with connect() as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = %s",
            (f'LISTEN "leaseq.{schema}"',),
        ).fetchone()
    assert killed == (1,)

    async def down() -> bool:
        return store._queue_infos.generation != generation

    await _until(down, "the store notices its listener is gone")
    # A change it could not hear (as if the notification were lost while nobody listened).
    _behind_the_back(schema, 1234)
    await asyncio.wait_for(store.listening.wait(), SAFETY_TIMEOUT)
    assert (await store.get_queue("q")).config.max_message_bytes == 1234


async def test_an_answer_is_read_again_after_queue_info_seconds(
    db_store: PostgresStore, schema: str
) -> None:
    store = db_store
    clock = FakeClock()
    store._queue_infos.clock = clock.now
    await asyncio.wait_for(store.listening.wait(), SAFETY_TIMEOUT)
    await store.create_queue("q", QueueConfig())
    first = await store.get_queue("q")
    _behind_the_back(schema, 1234)
    clock.advance(QUEUE_INFO_SECONDS * 0.99)
    assert await store.get_queue("q") == first
    clock.advance(QUEUE_INFO_SECONDS * 0.01)
    assert (await store.get_queue("q")).config.max_message_bytes == 1234


def test_an_answer_read_across_a_change_is_not_kept() -> None:
    infos = QueueInfos(max_age=QUEUE_INFO_SECONDS, clock=FakeClock().now)
    infos.set_enabled(True)
    old = QueueInfo("q", QueueConfig(), 0.0)
    started = infos.start_read()
    infos.forget("q")  # heard while the read was on its way: it may show the row before
    infos.keep(old, started)
    assert infos.get("q") is None
    infos.keep(old, infos.start_read())
    assert infos.get("q") is old
    infos.set_enabled(False)
    assert infos.get("q") is None
    infos.set_enabled(True)
    assert infos.get("q") is None  # nothing from before the listener went down
