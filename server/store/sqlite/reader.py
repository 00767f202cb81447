"""The store's read connection: one thread of its own with a read-only connection, for the
queries that read a whole queue (stats). In WAL mode a reader sees the last commit and neither
waits for the writer nor makes it wait, so such a scan no longer holds up sends and acks on the
writer thread (the Spark streaming source asks for stats at every trigger)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class _Reader:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._local = threading.local()  # the connection, on the reader's one thread
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="leaseq-sqlite-reader"
        )
        self._connections: list[sqlite3.Connection] = []

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # Opened on first use, after the writer created the file and its schema. mode=ro:
            # this connection can never write; query_only says so to SQLite too.
            # isolation_level=None: no implicit transactions; stats_scan opens its own read
            # transaction (one snapshot for its queries).
            conn = sqlite3.connect(
                f"{self._path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None
            )
            conn.execute("PRAGMA query_only = ON")
            conn.execute("PRAGMA busy_timeout = 5000")
            self._local.conn = conn
            self._connections.append(conn)
        return conn

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(self._connection()))

    def close(self) -> None:
        """Wait for the query in progress, then close the connection on its own thread."""

        def close_connections() -> None:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
            self._local.conn = None

        self._executor.submit(close_connections).result()
        self._executor.shutdown(wait=True)
