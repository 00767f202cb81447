"""The change feed of the PostgreSQL store: NOTIFY after commits, one LISTEN connection per
server (see the package docstring, Notifications). The store owns one Notifier."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from .queue_infos import CONFIG_ORIGIN, QueueInfos
from .settings import FALLBACK_WAKE_SECONDS, LISTEN_BACKOFF_MAX, NOTIFY_GAP_SECONDS

log = logging.getLogger(__name__)


Listener = Callable[[str | None], None]


class Notifier:
    """A store's side of the change feed: what it publishes (NOTIFY, coalesced, after commit)
    and what it hears (LISTEN), told to its subscribers. The store gives it its pool (None
    while closed), a way to check the pool after a failure, and the queue configurations it
    keeps (queue_infos.py), which the listener keeps honest."""

    def __init__(
        self,
        channel: str,
        queue_infos: QueueInfos,
        pool: Callable[[], AsyncConnectionPool | None],
        check_pool: Callable[[], Awaitable[None]],
        conninfo: str,
    ) -> None:
        self.channel = channel
        self._conninfo = conninfo
        self._origin = secrets.token_hex(8)  # this replica's mark on its own notifications
        self._queue_infos = queue_infos
        self._pool_of = pool
        self._check_pool = check_pool
        self._listeners: list[Listener] = []
        self._pending: set[str] = set()
        self._pending_event = asyncio.Event()
        self._closing = False
        self.listening = asyncio.Event()  # set while the LISTEN connection is up

    @property
    def _pool(self) -> AsyncConnectionPool | None:
        return self._pool_of()

    def start(self, connect_kwargs: dict[str, Any]) -> list[asyncio.Task[None]]:
        """The listener and the publisher, as tasks of the running loop (the store's)."""
        self._closing = False
        self._pending_event = asyncio.Event()
        self.listening = asyncio.Event()
        return [
            asyncio.create_task(self._listen(connect_kwargs), name="leaseq-pg-listen"),
            asyncio.create_task(self._publish_loop(), name="leaseq-pg-notify"),
        ]

    def closing(self) -> None:
        """The store closes: the listener stops; what is pending is still published."""
        self._closing = True
        self._pending_event.set()

    # -- the change feed ---------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call listener(queue) when another replica changed queue in a way that may let a
        waiting receiver make progress; listener(None) when changes may have been missed.
        Called on the event loop that opened the store. Returns the unsubscribe function."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def fire(self, queue: str | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(queue)
            except Exception:
                log.exception("a store change listener failed")

    def config_notify_sql(self, name: str) -> tuple[str, tuple[str, str]]:
        """The statement that tells every replica, when the transaction running it commits, that
        the queue's row changed (queue_infos.py). Inside the transaction: it cannot be lost
        while a replica listens, and a rollback takes it back. (Queue changes are rare: the
        notify lock that sends and acks avoid does not matter here.)"""
        return "SELECT pg_notify(%s, %s)", (self.channel, f"{CONFIG_ORIGIN} {self._origin} {name}")

    def publish(self, queues: Iterable[str]) -> None:
        queues = [q for q in queues if q]
        if queues and self._pool is not None:
            self._pending.update(queues)
            self._pending_event.set()

    async def _publish_loop(self) -> None:
        """NOTIFY the queues that changed, coalescing what piles up during one round trip and
        NOTIFY_GAP_SECONDS after it: the first change after a quiet spell is told at once, the
        next at most that much later (see NOTIFY_GAP_SECONDS)."""
        while True:
            await self._pending_event.wait()
            self._pending_event.clear()
            queues, self._pending = sorted(self._pending), set()
            if queues:
                await self._notify(queues)
            if self._closing and not self._pending:
                return
            if queues and not self._closing:
                await asyncio.sleep(NOTIFY_GAP_SECONDS)

    async def _notify(self, queues: list[str]) -> None:
        pool = self._pool
        if pool is None:
            return
        payloads = [f"{self._origin} {q}" for q in queues]
        for attempt in range(2):  # a second time on a checked pool (e.g. after a restart)
            try:
                async with pool.connection() as conn:
                    # Only a wake-up hint: no need to wait for the WAL flush. Autocommitted: one
                    # round trip (the setting is local to the statement's own transaction).
                    await conn.execute(
                        "SELECT set_config('synchronous_commit', 'off', true),"
                        " (SELECT count(pg_notify(%s, p)) FROM unnest(%s::text[]) AS p)",
                        (self.channel, payloads),
                    )
                return
            except (psycopg.OperationalError, psycopg.InterfaceError) as error:
                if attempt == 0 and not isinstance(error, PoolTimeout):
                    await self._check_pool()
                    continue
                # Lost: the other replicas' safety wake-up (FALLBACK_WAKE_SECONDS) covers it.
                log.warning("could not notify other replicas: %s", error)
            except Exception as error:
                log.warning("could not notify other replicas: %s", error)
                return

    async def _listen(self, kwargs: dict[str, Any]) -> None:
        backoff = 0.05
        while not self._closing:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, **kwargs
                )
            except Exception as error:
                log.warning("LISTEN connection failed (retrying in %.1fs): %s", backoff, error)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, LISTEN_BACKOFF_MAX)
                continue
            try:
                async with conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    # From here on every change of a queue's row is heard (queue_infos.py).
                    self._queue_infos.set_enabled(True)
                    self.listening.set()
                    backoff = 0.05
                    # Anything may have happened while nobody listened.
                    self.fire(None)
                    while True:
                        async for notify in conn.notifies(timeout=FALLBACK_WAKE_SECONDS):
                            origin, _, queue = notify.payload.partition(" ")
                            if origin == CONFIG_ORIGIN:
                                origin, _, queue = queue.partition(" ")
                                if origin != self._origin:  # this one forgot at its commit
                                    self._queue_infos.forget(queue)
                            elif origin != self._origin:
                                self.fire(queue)
                        self.fire(None)  # the slow safety net (see the module docstring)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("LISTEN connection lost: %s", error)
            finally:
                self._queue_infos.set_enabled(False)
                self.listening.clear()
            if not self._closing:
                self.fire(None)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, LISTEN_BACKOFF_MAX)
