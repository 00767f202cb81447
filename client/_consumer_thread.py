"""``Consumer``: the blocking driver of a consumer (``leaseq.client.consumer`` tells how a
consumer works), over a ``QueueClient``: the subscription, leaser and settler each in a thread
of its own, the handlers in ``concurrency`` worker threads; every decision is the shared core's
(``_consumer_core``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any

from ._consumer_core import (
    SETTLE_GRACE,
    TRANSIENT,
    ConsumerStats,
    Core,
    Handler,
    Item,
    chunks,
    log,
    release_changes,
    split_rejects,
)
from ._leases import REJECT, Lease, Reject, ReleaseDelay
from ._wire import MAX_BATCH
from .client import QueueClient
from .errors import LeaseqError
from .retry import RetryPolicy
from .types import DurationLike, Message


class _Dispatcher:
    """Runs ``run(item)`` on at most ``concurrency`` items at once, in worker threads."""

    def __init__(self, concurrency: int, run: Callable[[Item], None]) -> None:
        self._run = run
        self._cond = threading.Condition()
        self._pending: deque[Item] = deque()
        self._closing = False
        self._running = 0
        self._threads = [
            threading.Thread(target=self._work, name=f"leaseq-consumer-worker-{i}", daemon=True)
            for i in range(concurrency)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, items: list[Item]) -> bool:
        """Queue items; False (nothing queued) once closing: the caller releases them."""
        with self._cond:
            if self._closing:
                return False
            self._pending.extend(items)
            self._cond.notify(len(items))
            return True

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return  # what is still pending was taken by close()
                item = self._pending.popleft()
                self._running += 1
            try:
                self._run(item)
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def close(self) -> list[Item]:
        """Start nothing more; returns the items never started."""
        with self._cond:
            self._closing = True
            items = list(self._pending)
            self._pending.clear()
            self._cond.notify_all()
            return items

    def join(self, timeout: float | None) -> bool:
        """Wait for the running items to finish; False if some still run after timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._running == 0, timeout)


class _Settler:
    """Deletes and releases, batched into as few calls as what has piled up allows, retried
    until they land (or fail for a reason retrying cannot fix)."""

    def __init__(self, core: Core[QueueClient]) -> None:
        self._core = core
        self._cond = threading.Condition()
        self._deletes: list[Lease] = []
        self._releases: list[tuple[Lease, float, str]] = []
        self._busy = False
        self._stopped = False
        self._thread = threading.Thread(
            target=self._loop, name="leaseq-consumer-settler", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def delete(self, leases: list[Lease]) -> None:
        with self._cond:
            self._deletes.extend(leases)
            self._cond.notify_all()

    def release(self, releases: list[tuple[Lease, float, str]]) -> None:
        if releases:
            with self._cond:
                self._releases.extend(releases)
                self._cond.notify_all()

    def _loop(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while not (self._deletes or self._releases) and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                deletes, self._deletes = self._deletes[:MAX_BATCH], self._deletes[MAX_BATCH:]
                releases = self._releases[:MAX_BATCH]
                self._releases = self._releases[MAX_BATCH:]
                self._busy = True
            try:
                error = self._settle(deletes, releases)
            except Exception:  # a bug, or the client was closed under us: never die silently
                log.exception("settling %d messages failed", len(deletes) + len(releases))
                self._core.released(deletes + [lease for lease, _, _ in releases])
                error = None
            with self._cond:
                self._busy = False
                self._cond.notify_all()
            if error is None:
                failures = 0
                continue
            failures += 1
            delay = self._core.reconnect.backoff(failures, error)
            log.debug("settling failed with %s; trying again in %.3f s", error.code.name, delay)
            with self._cond:
                self._cond.wait_for(lambda: self._stopped, delay)

    def _settle(
        self, deletes: list[Lease], releases: list[tuple[Lease, float, str]]
    ) -> LeaseqError | None:
        """One delete call and one release call; what failed transiently goes back to the
        front of the line, and that error is returned."""
        core, client = self._core, self._core.client
        failed: LeaseqError | None = None
        if deletes:
            try:
                results = client.delete(core.queue, [lease.receipt for lease in deletes])
                core.deleted(deletes, results.results)
            except TRANSIENT as error:
                failed = error
                with self._cond:
                    self._deletes[:0] = deletes
            except LeaseqError as error:
                core.dropped(deletes, "deleting", error)
        releases, rejects = split_rejects(releases)
        for reason, leases in rejects.items():
            try:
                receipts = [lease.receipt for lease in leases]
                core.dead_lettered(leases, client.dead_letter(core.queue, receipts, reason))
            except TRANSIENT as error:
                failed = error
                with self._cond:
                    self._releases[:0] = [(lease, REJECT, reason) for lease in leases]
            except LeaseqError as error:
                core.dropped(leases, "moving to the dead letter queue", error)
        if releases:
            try:
                client.change_visibility(core.queue, release_changes(releases))
                core.released([lease for lease, _, _ in releases])
            except TRANSIENT as error:
                failed = error
                with self._cond:
                    self._releases[:0] = releases
            except LeaseqError as error:
                core.dropped([lease for lease, _, _ in releases], "releasing", error)
        return failed

    def flush(self, timeout: float | None) -> bool:
        """Wait until everything handed in so far has been settled (or dropped)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not (self._deletes or self._releases or self._busy), timeout
            )

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


class _Leaser:
    """Extends the held leases when they are due, in one batched call."""

    def __init__(self, core: Core[QueueClient]) -> None:
        self._core = core
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._loop, name="leaseq-consumer-leaser", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """New leases arrived: look at the schedule again."""
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _loop(self) -> None:
        core = self._core
        failures = 0
        while not self._stopped:
            self._wake.clear()  # before reading the schedule: a poke from now on is kept
            extensions, following, now = core.due()
            if not extensions:
                self._wake.wait(None if following is None else max(0.0, following - now))
                continue
            for chunk in chunks(extensions):
                sent_at = time.monotonic()
                changes = [(x.lease.receipt, x.seconds) for x in chunk]
                try:
                    results = core.client.change_visibility(core.queue, changes)
                except Exception as error:
                    failures += 1
                    core.postpone(chunk, failures, error)
                    continue
                failures = 0
                core.extended(chunk, results, sent_at)
                log.debug("extended %d leases by %.3f s", len(chunk), chunk[0].seconds)


class _Subscription:
    """Reads the follow stream and opens it again when it fails, until closed."""

    def __init__(
        self,
        core: Core[QueueClient],
        on_batch: Callable[[list[Message]], None],
        on_fatal: Callable[[LeaseqError], None],
    ) -> None:
        self._core = core
        self._on_batch = on_batch
        self._on_fatal = on_fatal
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._stream: Any = None
        self.thread = threading.Thread(
            target=self._loop, name="leaseq-consumer-stream", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            if self._stream is not None:
                self._stream.cancel()

    def _loop(self) -> None:
        core = self._core
        failures = 0
        while not self._closed.is_set():
            try:
                stream = core.client.stream(core.queue, **core.stream_options())
            except Exception as e:  # the client was closed under us
                self._on_fatal(LeaseqError(f"the consumer's stream failed: {e!r}"))
                return
            with self._lock:
                if self._closed.is_set():
                    stream.cancel()
                    return
                self._stream = stream
            error: LeaseqError | None = None
            try:
                for batch in stream:
                    failures = 0
                    self._on_batch(batch)
            except LeaseqError as e:
                error = e
            except Exception as e:  # a bug, or the client was closed under us: stop, say why
                log.exception("the consumer's stream on %r failed", core.queue)
                self._on_fatal(LeaseqError(f"the consumer's stream failed: {e!r}"))
                return
            finally:
                with self._lock:
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
            self._closed.wait(delay)


class Consumer:
    """Handle a queue's messages in threads, extending leases while handlers run.

    Args:
        client: the ``QueueClient`` to use (the consumer does not close it).
        queue: the queue's name.
        handler: called with each ``Message`` (or, with ``batch=True``, with a
            ``list[Message]`` of up to ``batch_size``). Returning deletes the message(s);
            raising releases them with the exception's text as the reason.
        batch: call the handler per stream batch instead of per message.
        concurrency: handler calls running at once (worker threads).
        max_outstanding: most messages held at once (delivered, not settled); the follow
            stream's flow control.
        batch_size: most messages per stream delivery, and so per batch handler call.
        visibility_timeout: lease length in seconds, asked for at delivery and at every
            extension; None: the queue's (read at ``start``).
        max_lease_time: stop extending a message this long after its delivery (None: never).
        release_delay: how long a failed message stays invisible: seconds, or a function of
            the message and the exception (see ``Backoff``). 0 releases it at once.
        channel: consume one channel, or a prefix ending in ``*``.
        reconnect: backoff of stream reconnects and of settle/extension retries beyond the
            client's own (``max_attempts`` is ignored: they never give up).

    Example::

        def handle(msg: Message) -> None:
            print(msg.text)

        consumer = Consumer(client, "jobs", handle, concurrency=8, visibility_timeout=30,
                            release_delay=Backoff(initial=1, maximum=60)).start()
        ...
        consumer.close(timeout=30)   # True: every handler finished and was settled
    """

    def __init__(
        self,
        client: QueueClient,
        queue: str,
        handler: Handler,
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
        self._handler: Callable[[Any], object] = handler
        self._settler = _Settler(self._core)
        self._leaser = _Leaser(self._core)
        self._dispatcher = _Dispatcher(concurrency, self._handle)
        self._subscription = _Subscription(self._core, self._on_batch, self._on_fatal)
        self._state = threading.Lock()
        self._started = False
        self._closing = False
        self._stopped = threading.Event()
        self._clean: bool | None = None

    @property
    def queue(self) -> str:
        return self._core.queue

    @property
    def error(self) -> LeaseqError | None:
        """The error that stopped the consumer (e.g. ``QueueNotFound``), if one did."""
        return self._core.error

    def stats(self) -> ConsumerStats:
        """The consumer's counters now."""
        return self._core.stats()

    def start(self) -> Consumer:
        """Start consuming (idempotent); returns the consumer. Reads the queue's visibility
        timeout first when none was given, so a missing queue raises ``QueueNotFound`` here."""
        with self._state:
            if self._started:
                return self
            if self._closing:
                raise RuntimeError("a closed consumer cannot start again")
            core = self._core
            queue_timeout = None
            if core.lease_length is None:
                config = core.client.get_queue(core.queue).config
                queue_timeout = config.visibility_timeout.total_seconds()
            core.configure(queue_timeout)
            self._settler.start()
            self._leaser.start()
            self._dispatcher.start()
            self._subscription.start()
            self._started = True
            return self

    def _on_batch(self, messages: list[Message]) -> None:
        items, wake = self._core.hold(messages)
        if wake:
            self._leaser.poke()
        if not self._dispatcher.submit(items):
            # Closing: this batch arrived after close() took what was pending.
            self._release_unstarted(items)

    def _release_unstarted(self, items: list[Item]) -> None:
        self._settler.release(self._core.unstarted(items))

    def _handle(self, item: Item) -> None:
        core = self._core
        core.started(item)
        if core.in_order(item):
            self._handle_in_order(item)
            return
        try:
            self._handler(core.messages_of(item))
        except Reject as reject:
            done, rejects = core.rejected(item, reject)
            self._settler.release(rejects)
            if done:
                self._settler.delete(done)
        except Exception as error:
            log.warning(
                "the handler failed on %d message(s) of %r", len(item), core.queue, exc_info=True
            )
            self._settler.release(core.finished(item, error))
        except BaseException as error:  # SystemExit, KeyboardInterrupt in the handler
            self._settler.release(core.finished(item, error))
            raise
        else:
            core.finished(item, None)
            self._settler.delete(item)

    def _handle_in_order(self, item: Item) -> None:
        core, done = self._core, 0
        try:
            for lease in item:
                self._handler(lease.message)
                done += 1
        except Exception as error:
            log.warning("the handler failed on a message of %r", core.queue, exc_info=True)
            releases = core.finished_in_order(item, done, error)
        except BaseException as error:
            self._settler.release(core.finished_in_order(item, done, error))
            self._settler.delete(item[:done])
            raise
        else:
            releases = core.finished_in_order(item, done, None)
        if done:
            self._settler.delete(item[:done])
        if releases:
            self._settler.release(releases)

    def _on_fatal(self, error: LeaseqError) -> None:
        log.error("consumer of %r stopped: %s", self._core.queue, error)
        self._core.error = error
        threading.Thread(target=self.close, name="leaseq-consumer-close", daemon=True).start()

    def close(self, timeout: float | None = None) -> bool:
        """Stop: take no new messages, release at once those held but not started, wait up to
        ``timeout`` seconds (None: as long as it takes) for running handlers to finish, settle
        their messages, and stop. True when all of that finished in time. Idempotent; a second
        call waits for the first. A handler that wants to stop the consumer calls it from
        another thread (``threading.Thread(target=consumer.close).start()``): close waits for
        the running handlers, the caller's own too.

        Example::

            signal.signal(signal.SIGTERM, lambda *_: consumer.close(timeout=25))
        """
        with self._state:
            first = not self._closing
            self._closing = True
        if not first:
            self._stopped.wait()
            return bool(self._clean)
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        if not self._started:
            self._clean = True
            self._stopped.set()
            return True
        try:
            self._subscription.close()
            self._release_unstarted(self._dispatcher.close())
            if threading.current_thread() is not self._subscription.thread:
                self._subscription.thread.join(left())
            finished = self._dispatcher.join(left())
            grace = left()
            settled = self._settler.flush(None if grace is None else max(grace, SETTLE_GRACE))
            self._clean = finished and settled
            if not finished:
                log.warning(
                    "consumer of %r closed with %d handler call(s) still running: their "
                    "leases are no longer extended and their messages will be delivered again",
                    self._core.queue,
                    self._core.stats().running,
                )
            return self._clean
        finally:
            self._leaser.stop()
            self._settler.stop()
            self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the consumer has stopped (``close`` or a fatal error); False if it still
        runs after ``timeout`` seconds. Raises the fatal error if one stopped it."""
        stopped = self._stopped.wait(timeout)
        if stopped and self._core.error is not None:
            raise self._core.error
        return stopped

    def __enter__(self) -> Consumer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
