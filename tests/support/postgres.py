"""PostgreSQL for tests: the server named by LEASEQ_TEST_POSTGRES_DSN, one schema per test.

When the server cannot be reached the test is skipped with the reason, except where
LEASEQ_REQUIRE_POSTGRES=1 (CI), where that is a failure. Each test gets its own schema (a random
name), dropped afterwards, so runs that share the database never see each other.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def dsn() -> str:
    return os.environ.get("LEASEQ_TEST_POSTGRES_DSN") or DEFAULT_DSN


def required() -> bool:
    return os.environ.get("LEASEQ_REQUIRE_POSTGRES") == "1"


@lru_cache(maxsize=1)
def _unreachable_reason() -> str | None:
    try:
        import psycopg
    except ImportError as error:
        return f"psycopg is not installed (pip install 'leaseq[postgres]'): {error}"
    try:
        with psycopg.connect(dsn(), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as error:  # any reason at all: say it
        return f"PostgreSQL at {dsn()} is not reachable: {' '.join(str(error).split())}"
    return None


def require_postgres() -> str:
    """The DSN, or skip (fail under LEASEQ_REQUIRE_POSTGRES=1) when it cannot be reached."""
    reason = _unreachable_reason()
    if reason is not None:
        if required():
            pytest.fail(f"{reason} (LEASEQ_REQUIRE_POSTGRES=1: PostgreSQL tests must run)")
        pytest.skip(reason)
    return dsn()


def new_schema() -> str:
    return "t_" + secrets.token_hex(8)


def store_url(schema: str, **params: object) -> str:
    """The test DSN as a store URL for schema, with extra query parameters."""
    parts = urlsplit(dsn())
    query = parse_qsl(parts.query, keep_blank_values=True)
    query += [("schema", schema)] + [(k, str(v)) for k, v in params.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn(), autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A schema name for this test (created by the store on open), dropped afterwards."""
    require_postgres()
    schema = new_schema()
    try:
        yield schema
    finally:
        drop_schema(schema)


def connect(**kwargs: object):
    """A plain psycopg connection to the test database (autocommit)."""
    import psycopg

    return psycopg.connect(dsn(), autocommit=True, **kwargs)


def channel_counters(schema: str) -> dict[tuple[int, str], int]:
    """The PostgreSQL store's channel_counters, slots summed: (queue id, channel) -> messages."""
    with connect() as conn:
        rows = conn.execute(
            f'SELECT queue, channel, sum(total) FROM "{schema}".channel_counters'
            " GROUP BY queue, channel HAVING sum(total) <> 0"
        ).fetchall()
    return {(queue, channel): int(total) for queue, channel, total in rows}


def channel_rows(schema: str) -> dict[tuple[int, str], int]:
    """What channel_counters should say: the messages rows counted, (queue id, channel) -> n."""
    with connect() as conn:
        rows = conn.execute(
            f'SELECT queue, channel, count(*) FROM "{schema}".messages GROUP BY queue, channel'
        ).fetchall()
    return {(queue, channel): total for queue, channel, total in rows}
