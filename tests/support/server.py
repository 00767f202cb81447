"""A real leaseq gRPC server on a free 127.0.0.1 port, in a background thread with its own event
loop, so any test can talk to it over loopback: sync tests with grpc channels, async tests with
grpc.aio channels on their own loop.

    with running_server() as server:            # or: async with running_server() as server:
        channel = grpc.insecure_channel(server.target)

`server.store` is the store the server uses; it belongs to the server's loop, so touch it only
through `server.call(lambda: server.store.stats("q"))`. With a FakeClock, `server.advance(s)`
moves time and wakes every waiting stream (the server cannot see a fake clock move by itself).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from leaseq.server.app import LeaseqServer, build
from leaseq.server.clock import Clock, FakeClock
from leaseq.server.store import open_store
from leaseq.server.store.base import Store

T = TypeVar("T")

START_TIMEOUT = 30.0


class RunningServer:
    """Start on enter, stop (drain, grace, close the store) on exit."""

    def __init__(
        self,
        store_url: str = "memory://",
        clock: Clock | None = None,
        grace: float = 1.0,
        **build_options: Any,
    ):
        self.store_url = store_url
        self.clock = clock
        self.grace = grace
        self.build_options = build_options  # app.build's keywords: security=, limits=
        self.store: Store | None = None
        self.port = 0
        self.target = ""
        self._app: LeaseqServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, name="leaseq-test-server", daemon=True)

    # --- the server thread ------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self.store = open_store(self.store_url, clock=self.clock)
            await self.store.open()
            self._app = build(self.store, "127.0.0.1:0", **self.build_options)
            await self._app.start()
            self.port = self._app.port
            self.target = f"127.0.0.1:{self.port}"
        except BaseException as error:  # reported to the thread that waits in start()
            self._started.set_exception(error)
            if self.store is not None:
                await self.store.close()
            return
        self._started.set_result(None)
        try:
            await self._stop.wait()
            await self._app.shutdown(self.grace)
        finally:
            await self.store.close()

    # --- the test's side --------------------------------------------------------------------

    def start(self) -> RunningServer:
        self._thread.start()
        self._started.result(timeout=START_TIMEOUT)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=START_TIMEOUT)

    def call(self, make: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
        """Run make() on the server's loop (e.g. a store call) and return its result."""

        async def run() -> T:
            return await make()

        assert self._loop is not None, "not started"
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    @property
    def app(self) -> LeaseqServer:
        """The built server (service, health); use its objects only on the server's loop."""
        assert self._app is not None, "not started"
        return self._app

    def sleeping(self, queue: str) -> int:
        """How many GetMessages streams of queue are parked waiting for an event."""

        async def count() -> int:
            return self.app.service.longpoll.sleeping(queue)

        return self.call(count)

    def parks(self, queue: str) -> int:
        """How many times the live streams of queue have parked (see LongPoll.parks)."""

        async def count() -> int:
            return self.app.service.longpoll.parks(queue)

        return self.call(count)

    def drain(self) -> None:
        """Begin the shutdown without stopping: health NOT_SERVING, new RPCs UNAVAILABLE, follow
        streams end. The server stops for good on exit."""
        self.call(self.app.drain)

    def advance(self, seconds: float) -> None:
        """Move the FakeClock and let every waiting stream look again."""
        clock = self.clock
        if not isinstance(clock, FakeClock):
            raise TypeError("advance needs running_server(clock=FakeClock())")

        async def move() -> None:
            clock.advance(seconds)
            self.app.service.longpoll.wake_all()

        self.call(move)

    def __enter__(self) -> RunningServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> RunningServer:
        # Starting blocks for a moment: keep the test's own loop running meanwhile.
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)


def running_server(
    store_url: str = "memory://",
    clock: Clock | None = None,
    *,
    grace: float = 1.0,
    **build_options: Any,
) -> RunningServer:
    """A context manager (sync `with` or `async with`) yielding the running server.
    build_options go to app.build (security=, limits=)."""
    return RunningServer(store_url, clock, grace, **build_options)
