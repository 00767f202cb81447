"""``AsyncConsumer``: the asyncio driver of a consumer (``leaseq.client.consumer`` tells how a
consumer works), over an ``AsyncQueueClient``: the subscription, leaser and settler each in a
task of its own, the handlers in ``concurrency`` worker tasks; every decision is the shared
core's (``_consumer_core``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from ._consumer_core import (
    SETTLE_GRACE,
    TRANSIENT,
    AsyncHandler,
    ConsumerStats,
    Core,
    Item,
    chunks,
    log,
    release_changes,
    split_rejects,
)
from ._leases import REJECT, Lease, Reject, ReleaseDelay
from ._wire import MAX_BATCH
from .client import AsyncQueueClient
from .errors import LeaseqError
from .retry import RetryPolicy
from .types import DurationLike, Message


class _AsyncDispatcher:
    """Runs ``run(item)`` on at most ``concurrency`` items at once, in worker tasks."""

    def __init__(self, concurrency: int, run: Callable[[Item], Awaitable[None]]) -> None:
        self._concurrency = concurrency
        self._run = run
        self._pending: deque[Item] = deque()
        self._closing = False
        self._running = 0
        self._work = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._worker(), name=f"leaseq-consumer-worker-{i}")
            for i in range(self._concurrency)
        ]

    def submit(self, items: list[Item]) -> bool:
        if self._closing:
            return False
        self._pending.extend(items)
        self._work.set()
        return True

    async def _worker(self) -> None:
        while True:
            while not self._pending and not self._closing:
                self._work.clear()
                await self._work.wait()
            if self._closing:
                return
            item = self._pending.popleft()
            self._running += 1
            self._idle.clear()
            try:
                await self._run(item)
            finally:
                self._running -= 1
                if self._running == 0:
                    self._idle.set()

    def close(self) -> list[Item]:
        self._closing = True
        items = list(self._pending)
        self._pending.clear()
        self._work.set()
        return items

    async def join(self, timeout: float | None) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def cancel(self) -> None:
        """Cancel the handlers still running (their wrappers release their messages)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class _AsyncSettler:
    """As ``_Settler``, in a task."""

    def __init__(self, core: Core[AsyncQueueClient]) -> None:
        self._core = core
        self._deletes: list[Lease] = []
        self._releases: list[tuple[Lease, float, str]] = []
        self._busy = False
        self._work = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="leaseq-consumer-settler")

    def _changed(self) -> None:
        if self._deletes or self._releases or self._busy:
            self._idle.clear()
        else:
            self._idle.set()

    def delete(self, leases: list[Lease]) -> None:
        self._deletes.extend(leases)
        self._work.set()
        self._changed()

    def release(self, releases: list[tuple[Lease, float, str]]) -> None:
        if releases:
            self._releases.extend(releases)
            self._work.set()
            self._changed()

    async def _loop(self) -> None:
        failures = 0
        while True:
            while not (self._deletes or self._releases):
                self._work.clear()
                await self._work.wait()
            deletes, self._deletes = self._deletes[:MAX_BATCH], self._deletes[MAX_BATCH:]
            releases, self._releases = self._releases[:MAX_BATCH], self._releases[MAX_BATCH:]
            self._busy = True
            try:
                error = await self._settle(deletes, releases)
            except Exception:  # a bug, or the client was closed under us: never die silently
                log.exception("settling %d messages failed", len(deletes) + len(releases))
                self._core.released(deletes + [lease for lease, _, _ in releases])
                error = None
            finally:
                self._busy = False
                self._changed()
            if error is None:
                failures = 0
                continue
            failures += 1
            delay = self._core.reconnect.backoff(failures, error)
            log.debug("settling failed with %s; trying again in %.3f s", error.code.name, delay)
            await asyncio.sleep(delay)

    async def _settle(
        self, deletes: list[Lease], releases: list[tuple[Lease, float, str]]
    ) -> LeaseqError | None:
        core, client = self._core, self._core.client
        failed: LeaseqError | None = None
        if deletes:
            try:
                results = await client.delete(core.queue, [lease.receipt for lease in deletes])
                core.deleted(deletes, results.results)
            except TRANSIENT as error:
                failed = error
                self._deletes[:0] = deletes
            except LeaseqError as error:
                core.dropped(deletes, "deleting", error)
        releases, rejects = split_rejects(releases)
        for reason, leases in rejects.items():
            try:
                receipts = [lease.receipt for lease in leases]
                core.dead_lettered(leases, await client.dead_letter(core.queue, receipts, reason))
            except TRANSIENT as error:
                failed = error
                self._releases[:0] = [(lease, REJECT, reason) for lease in leases]
            except LeaseqError as error:
                core.dropped(leases, "moving to the dead letter queue", error)
        if releases:
            try:
                await client.change_visibility(core.queue, release_changes(releases))
                core.released([lease for lease, _, _ in releases])
            except TRANSIENT as error:
                failed = error
                self._releases[:0] = releases
            except LeaseqError as error:
                core.dropped([lease for lease, _, _ in releases], "releasing", error)
        return failed

    async def flush(self, timeout: float | None) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class _AsyncLeaser:
    """As ``_Leaser``, in a task."""

    def __init__(self, core: Core[AsyncQueueClient]) -> None:
        self._core = core
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="leaseq-consumer-leaser")

    def poke(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        core = self._core
        failures = 0
        while True:
            self._wake.clear()
            extensions, following, now = core.due()
            if not extensions:
                timeout = None if following is None else max(0.0, following - now)
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except TimeoutError:
                    pass
                continue
            for chunk in chunks(extensions):
                sent_at = time.monotonic()
                changes = [(x.lease.receipt, x.seconds) for x in chunk]
                try:
                    results = await core.client.change_visibility(core.queue, changes)
                except Exception as error:
                    failures += 1
                    core.postpone(chunk, failures, error)
                    continue
                failures = 0
                core.extended(chunk, results, sent_at)
                log.debug("extended %d leases by %.3f s", len(chunk), chunk[0].seconds)


class _AsyncSubscription:
    """As ``_Subscription``, in a task."""

    def __init__(
        self,
        core: Core[AsyncQueueClient],
        on_batch: Callable[[list[Message]], None],
        on_fatal: Callable[[LeaseqError], None],
    ) -> None:
        self._core = core
        self._on_batch = on_batch
        self._on_fatal = on_fatal
        self._closed = asyncio.Event()
        self._stream: Any = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="leaseq-consumer-stream")

    async def close(self) -> None:
        self._closed.set()
        if self._stream is not None:
            self._stream.cancel()
        if self._task is not None and self._task is not asyncio.current_task():
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        core = self._core
        failures = 0
        while not self._closed.is_set():
            try:
                stream = self._stream = core.client.stream(core.queue, **core.stream_options())
            except Exception as e:  # the client was closed under us
                self._on_fatal(LeaseqError(f"the consumer's stream failed: {e!r}"))
                return
            error: LeaseqError | None = None
            try:
                async for batch in stream:
                    failures = 0
                    self._on_batch(batch)
            except LeaseqError as e:
                error = e
            except Exception as e:  # a bug, or the client was closed under us: stop, say why
                log.exception("the consumer's stream on %r failed", core.queue)
                self._on_fatal(LeaseqError(f"the consumer's stream failed: {e!r}"))
                return
            finally:
                self._stream = None
                stream.cancel()
            if self._closed.is_set():
                return
            if error is not None and not core.reconnectable(error):
                self._on_fatal(error)
                return
            failures += 1
            core.count("reconnects")
            delay = core.reconnect.backoff(failures, error)
            log.debug(
                "the follow stream on %r ended (%s); opening a new one in %.3f s",
                core.queue,
                error.code.name if error else "closed by the server",
                delay,
            )
            try:
                await asyncio.wait_for(self._closed.wait(), delay)
            except TimeoutError:
                pass


class AsyncConsumer:
    """The asyncio twin of ``Consumer``: the same arguments, with an ``AsyncQueueClient`` and a
    coroutine handler; ``start``, ``close`` and ``wait`` are coroutines. Handlers run as tasks
    of the running loop, at most ``concurrency`` at once. When ``close``'s timeout passes, the
    handlers still running are cancelled and their messages released.

    Example::

        async def handle(msg: Message) -> None:
            await resize(msg.body)

        async with AsyncQueueClient() as client:
            async with AsyncConsumer(client, "jobs", handle, concurrency=16) as consumer:
                await consumer.wait()
    """

    def __init__(
        self,
        client: AsyncQueueClient,
        queue: str,
        handler: AsyncHandler,
        *,
        batch: bool = False,
        concurrency: int = 1,
        max_outstanding: int = 100,
        batch_size: int = 100,
        visibility_timeout: DurationLike | None = None,
        max_lease_time: DurationLike | None = 3600,
        release_delay: ReleaseDelay = 0,
        channel: str | None = None,
        reconnect: RetryPolicy | None = None,
    ) -> None:
        self._core = Core(
            client,
            queue,
            batch=batch,
            concurrency=concurrency,
            max_outstanding=max_outstanding,
            batch_size=batch_size,
            visibility_timeout=visibility_timeout,
            max_lease_time=max_lease_time,
            release_delay=release_delay,
            channel=channel,
            reconnect=reconnect,
        )
        self._handler: Callable[[Any], Awaitable[object]] = handler
        # The parts own asyncio objects: made in start(), inside the running loop.
        self._settler: _AsyncSettler | None = None
        self._leaser: _AsyncLeaser | None = None
        self._dispatcher: _AsyncDispatcher | None = None
        self._subscription: _AsyncSubscription | None = None
        self._started = False
        self._closing = False
        self._stopped: asyncio.Event | None = None
        self._clean: bool | None = None
        self._closer: asyncio.Task[bool] | None = None

    @property
    def queue(self) -> str:
        return self._core.queue

    @property
    def error(self) -> LeaseqError | None:
        """See ``Consumer.error``."""
        return self._core.error

    def stats(self) -> ConsumerStats:
        """See ``Consumer.stats``."""
        return self._core.stats()

    async def start(self) -> AsyncConsumer:
        """See ``Consumer.start``."""
        if self._started:
            return self
        if self._closing:
            raise RuntimeError("a closed consumer cannot start again")
        core = self._core
        queue_timeout = None
        if core.lease_length is None:
            config = (await core.client.get_queue(core.queue)).config
            queue_timeout = config.visibility_timeout.total_seconds()
        core.configure(queue_timeout)
        self._stopped = asyncio.Event()
        self._settler = _AsyncSettler(core)
        self._leaser = _AsyncLeaser(core)
        self._dispatcher = _AsyncDispatcher(core.concurrency, self._handle)
        self._subscription = _AsyncSubscription(core, self._on_batch, self._on_fatal)
        self._settler.start()
        self._leaser.start()
        self._dispatcher.start()
        self._subscription.start()
        self._started = True
        return self

    def _on_batch(self, messages: list[Message]) -> None:
        assert self._dispatcher is not None and self._leaser is not None
        items, wake = self._core.hold(messages)
        if wake:
            self._leaser.poke()
        if not self._dispatcher.submit(items):
            self._release_unstarted(items)

    def _release_unstarted(self, items: list[Item]) -> None:
        assert self._settler is not None
        self._settler.release(self._core.unstarted(items))

    async def _handle(self, item: Item) -> None:
        assert self._settler is not None
        core = self._core
        core.started(item)
        if core.in_order(item):
            await self._handle_in_order(item)
            return
        try:
            await self._handler(core.messages_of(item))
        except Reject as reject:
            done, rejects = core.rejected(item, reject)
            self._settler.release(rejects)
            if done:
                self._settler.delete(done)
        except asyncio.CancelledError:
            # close() ran out of time: give the messages back now rather than at lease end.
            self._settler.release(core.abandoned(item))
            raise
        except Exception as error:
            log.warning(
                "the handler failed on %d message(s) of %r", len(item), core.queue, exc_info=True
            )
            self._settler.release(core.finished(item, error))
        else:
            core.finished(item, None)
            self._settler.delete(item)

    async def _handle_in_order(self, item: Item) -> None:
        assert self._settler is not None
        core, done = self._core, 0
        try:
            for lease in item:
                await self._handler(lease.message)
                done += 1
        except asyncio.CancelledError:
            self._settler.delete(item[:done])
            self._settler.release(core.abandoned(item[done:]))
            raise
        except Exception as error:
            log.warning("the handler failed on a message of %r", core.queue, exc_info=True)
            releases = core.finished_in_order(item, done, error)
        else:
            releases = core.finished_in_order(item, done, None)
        if done:
            self._settler.delete(item[:done])
        if releases:
            self._settler.release(releases)

    def _on_fatal(self, error: LeaseqError) -> None:
        log.error("consumer of %r stopped: %s", self._core.queue, error)
        self._core.error = error
        self._closer = asyncio.create_task(self.close())

    async def close(self, timeout: float | None = None) -> bool:
        """See ``Consumer.close``; handlers still running at the timeout are cancelled and
        their messages released. From a handler, schedule it instead of awaiting it
        (``asyncio.create_task(consumer.close())``): close waits for the running handlers."""
        if self._closing:
            if self._stopped is not None:
                await self._stopped.wait()
            return bool(self._clean)
        self._closing = True
        if not self._started:
            self._clean = True
            return True
        assert self._subscription and self._dispatcher and self._settler and self._leaser
        assert self._stopped is not None
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - loop.time())

        try:
            self._release_unstarted(self._dispatcher.close())
            await self._subscription.close()
            finished = await self._dispatcher.join(left())
            if not finished:
                log.warning(
                    "consumer of %r: cancelling %d handler call(s) still running at close",
                    self._core.queue,
                    self._core.stats().running,
                )
            await self._dispatcher.cancel()
            grace = left()
            settled = await self._settler.flush(None if grace is None else max(grace, SETTLE_GRACE))
            self._clean = finished and settled
            return self._clean
        finally:
            await self._leaser.stop()
            await self._settler.stop()
            self._stopped.set()

    async def wait(self, timeout: float | None = None) -> bool:
        """See ``Consumer.wait``."""
        if self._stopped is None:
            raise RuntimeError("the consumer was not started")
        try:
            await asyncio.wait_for(self._stopped.wait(), timeout)
        except TimeoutError:
            return False
        if self._core.error is not None:
            raise self._core.error
        return True

    async def __aenter__(self) -> AsyncConsumer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
