"""The contract suite: the same tests against every store backend.

A backend joins by adding a factory to STORE_FACTORIES: an async context manager that yields an
opened store driven by the given clock and closes it afterwards (a PostgreSQL factory would also
create and drop its own schema, or skip when no server is reachable).

Time moves only through `clock.advance`, never by sleeping, so every boundary is exact.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import (
    DeliveredMessage,
    LeaseStatus,
    NewMessage,
    PeekedMessage,
    QueueConfig,
    VisibilityChange,
)
from leaseq.server.store.base import Store

StoreFactory = Callable[[Path, FakeClock], AbstractAsyncContextManager[Store]]


@asynccontextmanager
async def _opened(store: Store) -> AsyncIterator[Store]:
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def memory_store(tmp_path: Path, clock: FakeClock) -> AbstractAsyncContextManager[Store]:
    from leaseq.server.store.memory import MemoryStore

    return _opened(MemoryStore(clock=clock))


def sqlite_store(tmp_path: Path, clock: FakeClock) -> AbstractAsyncContextManager[Store]:
    from leaseq.server.store.sqlite import SqliteStore

    return _opened(SqliteStore(tmp_path / "q.db", clock=clock))


@asynccontextmanager
async def postgres_store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Store]:
    """A schema of its own in the test database (skips when PostgreSQL is unreachable, unless
    LEASEQ_REQUIRE_POSTGRES=1), dropped afterwards. The FakeClock's time is passed to every
    statement, so time moves here exactly as in the other stores."""
    from leaseq.server.store.postgres import PostgresStore
    from tests.support.postgres import fresh_schema, store_url

    with fresh_schema() as schema:
        store = PostgresStore.from_url(store_url(schema, pool_min=1, pool_max=4), clock=clock)
        async with _opened(store) as opened:
            yield opened


STORE_FACTORIES: dict[str, StoreFactory] = {
    "memory": memory_store,
    "sqlite": sqlite_store,
    "postgres": postgres_store,
}


@pytest.fixture
async def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=list(STORE_FACTORIES), ids=list(STORE_FACTORIES))
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Store]:
    async with STORE_FACTORIES[request.param](tmp_path, clock) as opened:
        yield opened


# --- helpers shared by the topic files ---------------------------------------------------------

Q = "work"  # the queue most tests use
DLQ = "dead"


def at(when: float) -> object:
    """A time as a store reports it: backends may keep times to the microsecond only."""
    return pytest.approx(when, abs=1e-3)


async def make_queue(store: Store, name: str = Q, **config: object) -> str:
    await store.create_queue(name, QueueConfig(**config))
    return name


async def send(store: Store, queue: str, *bodies: bytes | str, **options: object) -> list[str]:
    """Send one message per body (same options for each); returns the message ids."""
    entries = [NewMessage(body=b.encode() if isinstance(b, str) else b, **options) for b in bodies]
    outcomes = await store.send(queue, entries)
    return [o.message_id for o in outcomes]


async def receive(
    store: Store, queue: str, n: int = 1, vt: float | None = 30.0, **options: object
) -> list[DeliveredMessage]:
    outcome = await store.receive(queue, n, visibility_timeout=vt, **options)
    return outcome.messages


async def receive_one(
    store: Store, queue: str, vt: float | None = 30.0, **options: object
) -> DeliveredMessage:
    messages = await receive(store, queue, 1, vt, **options)
    assert len(messages) == 1, f"expected one message, got {messages}"
    return messages[0]


async def delete_status(store: Store, queue: str, receipt: str) -> LeaseStatus:
    outcome = await store.delete(queue, [receipt])
    return outcome.results[0].status


async def change(
    store: Store, queue: str, receipt: str, vt: float, reason: str = ""
) -> tuple[LeaseStatus, float | None]:
    [result] = await store.change_visibility(queue, [VisibilityChange(receipt, vt, reason)])
    return result.status, result.visible_at


async def peek_all(store: Store, queue: str, **options: object) -> list[PeekedMessage]:
    """Every peekable message (leased and delayed too, unless options say otherwise)."""
    options = {"include_leased": True, "include_delayed": True, **options}
    page = await store.peek(queue, 10_000, **options)
    return page.messages


async def peek_one(store: Store, queue: str) -> PeekedMessage:
    [message] = await peek_all(store, queue)
    return message


def bodies(messages: list[DeliveredMessage] | list[PeekedMessage]) -> list[bytes]:
    return [m.body for m in messages]
