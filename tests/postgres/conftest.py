"""Fixtures for the PostgreSQL store's own tests: a schema of the test's own in the database of
LEASEQ_TEST_POSTGRES_DSN (skipped when unreachable, a failure under LEASEQ_REQUIRE_POSTGRES=1),
dropped afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.store.postgres import PostgresStore, Tuning
from tests.support.postgres import fresh_schema, store_url


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


@pytest.fixture
def url(schema: str) -> str:
    return store_url(schema, pool_min=1, pool_max=4)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def tuning() -> Tuning:
    """The store's constants (a test parametrizes `tuning` to shorten them)."""
    return Tuning()


@pytest.fixture
async def store(url: str, clock: FakeClock, tuning: Tuning) -> AsyncIterator[PostgresStore]:
    """A store on a fake clock (time passed to every statement)."""
    opened = PostgresStore.from_url(url, clock=clock, tuning=tuning)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def db_store(url: str) -> AsyncIterator[PostgresStore]:
    """A store on the database's clock, as in production."""
    opened = PostgresStore.from_url(url)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
