"""Network faults between a store and PostgreSQL, for the resilience tests: a TCP proxy that can
cut every connection and refuse new ones (the database "goes away" and comes back), and a way to
kill a store's backends from the server side (pg_terminate_backend)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from tests.support.postgres import connect, dsn


class TcpProxy:
    """Forwards 127.0.0.1:<port> to the test database's host and port, on the running loop."""

    def __init__(self) -> None:
        target = urlsplit(dsn())
        self.target = (target.hostname or "127.0.0.1", target.port or 5432)
        self.port = 0
        self.up = True
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut(self) -> None:
        """The database is gone: every connection drops, new ones are closed at once."""
        self.up = False
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    def restore(self) -> None:
        self.up = True

    def url(self, schema: str, **params: object) -> str:
        """The test DSN's URL through this proxy, for schema."""
        from tests.support.postgres import store_url

        parts = urlsplit(store_url(schema, **params))
        netloc = parts.netloc.rpartition("@")
        host = f"127.0.0.1:{self.port}"
        return parts._replace(netloc=f"{netloc[0]}@{host}" if netloc[1] else host).geturl()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.accepted += 1
        self._links.update((writer, up_writer))
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            self._links.discard(writer)
            writer.transport.abort()


def terminate_backends(application_name: str) -> int:
    """pg_terminate_backend every connection of that application_name; how many."""
    with connect() as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    return sum(1 for (done,) in rows if done)


def backends(application_name: str, **where: str) -> list[tuple[int, str | None, str | None]]:
    """(pid, wait_event_type, state) of that application's connections."""
    clauses = "".join(f" AND {column} = %({column})s" for column in where)
    with connect() as conn:
        return conn.execute(
            "SELECT pid, wait_event_type, state FROM pg_stat_activity"
            f" WHERE application_name = %(app)s{clauses}",
            {"app": application_name, **where},
        ).fetchall()
