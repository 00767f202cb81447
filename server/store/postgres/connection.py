"""Connections to PostgreSQL: the first check at open, the database's clock, and how failures
read (one line, no password)."""

from __future__ import annotations

import math
import time
from typing import Any

import psycopg

from ...errors import Unavailable
from .. import StoreOpenError
from .settings import OPEN_TIMEOUT

# --- the database's clock ---------------------------------------------------------------------


class DatabaseClock:
    """The database server's clock as seen from here: the local clock plus a measured offset.

    Operations take their instant from the database itself; this clock is for what the service
    reads outside an operation (server_time in responses, long-poll timers), so that it agrees
    with the database even when this machine's clock is off."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.uncertainty = math.inf  # half the round trip of the sample the offset came from

    def now(self) -> float:
        return time.time() + self.offset

    async def sync(self, conn: psycopg.AsyncConnection[Any], samples: int = 3) -> None:
        best: tuple[float, float] | None = None
        for _ in range(samples):
            before = time.time()
            cur = await conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
            row = await cur.fetchone()
            after = time.time()
            assert row is not None
            half = (after - before) / 2
            if best is None or half < best[1]:
                best = (row[0] - (before + half), half)
        assert best is not None
        self.offset, self.uncertainty = best


async def _check_connection(conninfo: str, kwargs: dict[str, Any]) -> None:
    """Connect once (bounded by OPEN_TIMEOUT unless the URL sets connect_timeout); StoreOpenError
    with libpq's reason when that fails."""
    if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(conninfo):
        kwargs = {**kwargs, "connect_timeout": int(OPEN_TIMEOUT)}
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
    except psycopg.Error as error:
        raise StoreOpenError(
            f"cannot connect to PostgreSQL ({_redacted(conninfo)}): {_one_line(error)}"
        ) from None
    await conn.close()


def _one_line(error: BaseException) -> str:
    """psycopg's message on one line: libpq writes a line per address tried, plus hints."""
    text = str(error).removeprefix("connection failed: ")
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return "; ".join(line for line in lines if line) or type(error).__name__


def _redacted(conninfo: str) -> str:
    """The connection string without its password (for messages and logs)."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<unparsable connection string>"
    params.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in params.items())


def _unavailable(error: BaseException) -> Unavailable:
    failure = Unavailable(f"PostgreSQL store unavailable: {type(error).__name__}: {error}".strip())
    failure.__cause__ = error
    return failure
