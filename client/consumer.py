"""``Consumer`` (threads) and ``AsyncConsumer`` (asyncio): handle a queue's messages with leases
that are extended while the handler works, and a clean shutdown.

Example::

    from leaseq.client import Consumer, QueueClient

    def handle(msg):
        resize(msg.body)            # returns: the message is deleted; raises: it is released

    with QueueClient() as client, Consumer(client, "jobs", handle, concurrency=4) as consumer:
        consumer.wait()             # until close() (e.g. from a signal handler) or a fatal error

A consumer runs one follow stream (``GetMessages`` with ``follow``) and a few small parts, one
per concern, as google-cloud-pubsub's subscriber does:

- the *subscription* reads the stream, holds each delivery in the lease table and hands it to
  the dispatcher; when the stream fails (the server restarts, drains, the network drops) it
  opens a new one with exponential backoff and jitter, for as long as the consumer runs;
- the *dispatcher* runs the handler on at most ``concurrency`` messages (or batches) at once;
- the *leaser* extends the leases of every held message, running or waiting, in one batched
  ``ChangeVisibility`` call at a jittered 0.85-0.9 of the lease (``leaseq.client._leases``), and
  stops extending a message ``max_lease_time`` after its delivery;
- the *settler* deletes the messages whose handler returned and releases those whose handler
  raised (the exception's text as the reason, stored as the message's ``last_error``; after
  ``release_delay``), batching what piles up into one call and retrying until it lands.

Flow control is the server's: the stream pauses while it holds ``max_outstanding`` unsettled
leases (a settle resumes it), so a consumer never holds more than that, except just after a
reconnect, when the leases of the old stream still count here but not on the server. A release
with a delay keeps the message leased (invisible) until the delay ends and so keeps its place
among the stream's ``max_outstanding`` until then.

``close(timeout)``: stop taking new messages, release at once what is held but not started,
let running handlers finish (their leases still extended) and settle, then return True. When
``timeout`` passes first, ``Consumer`` leaves the handlers still running to their threads
(threads cannot be interrupted): their leases are no longer extended and their results are not
acknowledged, so the messages come back after their leases end. ``AsyncConsumer`` cancels them
instead and releases their messages. Either returns False then.

Delivery is at least once: a handler may see a message again when its lease was lost (the
server was down for longer than the lease had left, or ``max_lease_time`` passed), or when a
batch the server sent was cut off with the stream (a server restart, or ``close()`` just as a
batch was on its way: that batch stays leased until its visibility timeout ends, then is
delivered again; nothing is lost).

Logs go to the ``leaseq.client.consumer`` logger: reconnects and retries at DEBUG, lost leases
and handler exceptions at WARNING.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar, Union

import grpc

from ._leases import (
    MAX_VISIBILITY,
    Backoff,
    Extension,
    Lease,
    LeaseTable,
    ReleaseDelay,
    reason_of,
    release_seconds,
)
from ._wire import MAX_BATCH, seconds
from .client import AsyncQueueClient, QueueClient
from .errors import DeadlineExceeded, LeaseqError, Unavailable
from .retry import RetryPolicy
from .types import DurationLike, LeaseResult, LeaseStatus, Message, VisibilityChange

__all__ = ["AsyncConsumer", "Backoff", "Consumer", "ConsumerStats"]

_log = logging.getLogger("leaseq.client.consumer")

ClientT = TypeVar("ClientT", QueueClient, AsyncQueueClient)

MessageHandler = Callable[[Message], object]
BatchHandler = Callable[[list[Message]], object]
Handler = Union[MessageHandler, BatchHandler]
AsyncMessageHandler = Callable[[Message], Awaitable[object]]
AsyncBatchHandler = Callable[[list[Message]], Awaitable[object]]
AsyncHandler = Union[AsyncMessageHandler, AsyncBatchHandler]

DEFAULT_RECONNECT = RetryPolicy(initial_backoff=0.1, max_backoff=5.0, jitter=0.2)
"""Pacing of stream reconnects and of settle/extension calls that failed even after the
client's own retries (``max_attempts`` does not apply: these loops never give up while the
consumer runs)."""

SETTLE_GRACE = 1.0
"""Seconds ``close`` still gives the last acknowledgements and releases when its timeout has
already passed, so that what is known to be done is not left to redelivery for a moment's
lack of time."""

# A follow stream ends with these when the server or the connection failed, or when the server
# drained: open a new one. Anything else (the queue was deleted, no permission, a bad argument)
# will not get better by trying again and stops the consumer.
_RECONNECT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)

# Settle and extension calls are retried by the client on these; when even that gave up, the
# consumer keeps trying (the server may be restarting) rather than drop what is known.
_TRANSIENT = (Unavailable, DeadlineExceeded)

Item = list[Lease]
"""What one handler call gets: one lease (per-message mode) or a stream batch's leases."""


@dataclass(frozen=True)
class ConsumerStats:
    """A consumer's counters at one moment (``Consumer.stats()``).

    Attributes:
        received: messages delivered to this consumer.
        succeeded: messages whose handler returned (deleted, or being deleted).
        failed: messages whose handler raised (released, or being released).
        unstarted_released: messages released by ``close`` before a handler saw them.
        extensions: lease extensions the server granted.
        extension_calls: ChangeVisibility calls that asked for them.
        lost_leases: leases the server no longer held for this consumer while it still held
            the message (expired or superseded; the message will be or was delivered again).
        ack_failures: deletes the server refused (e.g. ``RECEIPT_SUPERSEDED``: the message had
            been delivered again after its lease was lost).
        reconnects: follow streams opened again after an error or a server's drain.
        held: messages held now (delivered, not yet settled).
        running: handler calls running now.
    """

    received: int = 0
    succeeded: int = 0
    failed: int = 0
    unstarted_released: int = 0
    extensions: int = 0
    extension_calls: int = 0
    lost_leases: int = 0
    ack_failures: int = 0
    reconnects: int = 0
    held: int = 0
    running: int = 0


def _chunks(items: Sequence[Any], size: int = MAX_BATCH) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class _Core(Generic[ClientT]):
    """Settings, the lease table and the counters that both consumers share; every method is
    I/O-free and runs under ``lock`` (a sync consumer's threads share it; an async consumer
    never contends for it)."""

    def __init__(
        self,
        client: ClientT,
        queue: str,
        *,
        batch: bool,
        concurrency: int,
        max_outstanding: int,
        batch_size: int,
        visibility_timeout: DurationLike | None,
        max_lease_time: DurationLike | None,
        release_delay: ReleaseDelay,
        channel: str | None,
        reconnect: RetryPolicy | None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 1 <= max_outstanding <= 100_000:
            raise ValueError("max_outstanding must be between 1 and 100,000")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
        self.client: ClientT = client
        self.queue = queue
        self.batch = batch
        self.concurrency = concurrency
        self.max_outstanding = max_outstanding
        self.batch_size = min(batch_size, max_outstanding)
        self.lease_length: float | None = None
        if visibility_timeout is not None:
            self.lease_length = self._check_lease(seconds(visibility_timeout))
        self.max_lease = None if max_lease_time is None else seconds(max_lease_time)
        if self.max_lease is not None and self.max_lease <= 0:
            raise ValueError("max_lease_time must be positive (or None: no limit)")
        if not callable(release_delay):
            seconds(release_delay)  # a TypeError now rather than at the first failure
        self.release_delay = release_delay
        self.channel = channel
        self.reconnect = reconnect or DEFAULT_RECONNECT
        self.lock = threading.Lock()
        self.table = LeaseTable(self.lease_length or 30.0, self.max_lease)
        self.counts: dict[str, int] = dict.fromkeys(
            (
                "received",
                "succeeded",
                "failed",
                "unstarted_released",
                "extensions",
                "extension_calls",
                "lost_leases",
                "ack_failures",
                "reconnects",
            ),
            0,
        )
        self.running = 0
        self.error: LeaseqError | None = None
        self.wake_at: float | None = None  # when the leaser plans to look at the schedule

    @staticmethod
    def _check_lease(length: float) -> float:
        if not 0 < length <= MAX_VISIBILITY:
            raise ValueError("a consumer needs a visibility timeout above 0 s (at most 7 days)")
        return length

    def configure(self, queue_visibility_timeout: float | None) -> None:
        """Fix the lease length: the consumer's own, else the queue's (read at start)."""
        if self.lease_length is None:
            assert queue_visibility_timeout is not None
            self.lease_length = self._check_lease(queue_visibility_timeout)
        self.table = LeaseTable(self.lease_length, self.max_lease)

    def stream_options(self) -> dict[str, Any]:
        return {
            "max_messages": self.batch_size,
            "max_outstanding": self.max_outstanding,
            "visibility_timeout": self.lease_length,
            "channel": self.channel,
        }

    def stats(self) -> ConsumerStats:
        with self.lock:
            return ConsumerStats(**self.counts, held=len(self.table), running=self.running)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    # --- deliveries -------------------------------------------------------------------------

    def hold(self, messages: list[Message]) -> tuple[list[Item], bool]:
        """Hold a stream batch; returns the handler calls it makes, and whether the leaser
        must look at its schedule again (a new lease is due before it planned to wake)."""
        now = time.monotonic()
        with self.lock:
            leases = [self.table.add(m, now) for m in messages]
            self.counts["received"] += len(leases)
            earliest = min((lease.renew_at for lease in leases), default=None)
            wake = earliest is not None and (self.wake_at is None or earliest < self.wake_at)
            if wake:
                self.wake_at = earliest
        return ([leases] if self.batch else [[lease] for lease in leases]), wake

    def messages_of(self, item: Item) -> Any:
        messages = [lease.message for lease in item]
        return messages if self.batch else messages[0]

    def started(self, item: Item) -> None:
        with self.lock:
            self.running += 1
            for lease in item:
                lease.started = True

    def finished(self, item: Item, error: BaseException | None) -> list[tuple[Lease, float, str]]:
        """A handler call ended; returns the releases it needs (none on success)."""
        with self.lock:
            self.running -= 1
            self.counts["succeeded" if error is None else "failed"] += len(item)
            self.table.settling(item, renew=error is None)
        if error is None:
            return []
        reason = reason_of(error)
        return [
            (lease, self._release_delay(lease.message, error), reason) for lease in item
        ]

    def unstarted(self, items: list[Item]) -> list[tuple[Lease, float, str]]:
        """Closing: these were never started; release them now, without a reason (nothing
        failed)."""
        leases = [lease for item in items for lease in item]
        with self.lock:
            self.counts["unstarted_released"] += len(leases)
            self.table.settling(leases, renew=False)
        return [(lease, 0.0, "") for lease in leases]

    def abandoned(self, item: Item) -> list[tuple[Lease, float, str]]:
        """A handler call was cancelled (close ran out of time): release its messages now."""
        with self.lock:
            self.running -= 1
            self.table.settling(item, renew=False)
        return [(lease, 0.0, "") for lease in item]

    def _release_delay(self, message: Message, error: BaseException) -> float:
        try:
            return release_seconds(self.release_delay, message, error)
        except Exception:  # a broken release_delay must not lose the release itself
            _log.exception("release_delay failed; releasing message %s now", message.message_id)
            return 0.0

    # --- leases -----------------------------------------------------------------------------

    def due(self) -> tuple[list[Extension], float | None, float]:
        """(extensions to send now, when the next one is due, now)."""
        now = time.monotonic()
        with self.lock:
            extensions, gave_up = self.table.due(now)
            # Where the leaser will wake next (hold() pokes it only for an earlier lease).
            following = self.wake_at = self.table.next_renewal()
        for lease in gave_up:
            _log.warning(
                "message %s reached max_lease_time (%.0f s) with its handler %s; its lease is "
                "no longer extended and it will be delivered again when the lease ends",
                lease.message.message_id,
                self.max_lease or 0,
                "still running" if lease.started else "not started",
            )
        return extensions, following, now

    def extended(
        self, extensions: Sequence[Extension], results: Sequence[LeaseResult], sent_at: float
    ) -> None:
        lost: list[tuple[Lease, LeaseStatus]] = []
        with self.lock:
            self.counts["extension_calls"] += 1
            for extension, result in zip(extensions, results):
                if extension.lease not in self.table:
                    continue  # settled meanwhile: whatever the server said no longer matters
                held = self.table.extended(extension, result.status, sent_at)
                if result.status is LeaseStatus.OK:
                    self.counts["extensions"] += 1
                elif not held:
                    self.counts["lost_leases"] += 1
                    lost.append((extension.lease, result.status))
        for lease, status in lost:
            _log.warning(
                "lost the lease of message %s (%s) while %s: it may be handled twice",
                lease.message.message_id,
                status.name,
                "its handler runs" if lease.started else "waiting for a handler",
            )

    def postpone(self, extensions: Sequence[Extension], failures: int, error: Exception) -> None:
        if isinstance(error, LeaseqError):
            delay = self.reconnect.backoff(failures, error)
            _log.debug(
                "extending %d leases failed with %s; trying again in %.3f s",
                len(extensions),
                error.code.name,
                delay,
            )
        else:  # a bug, or the client was closed under us: keep the leaser alive, say why
            delay = self.reconnect.backoff(failures)
            _log.error("extending %d leases failed", len(extensions), exc_info=error)
        with self.lock:
            self.table.postpone(extensions, time.monotonic() + delay)

    # --- settling ---------------------------------------------------------------------------

    def deleted(self, leases: Sequence[Lease], results: Sequence[LeaseResult]) -> None:
        refused = []
        with self.lock:
            for lease in leases:
                self.table.remove(lease)
            for lease, result in zip(leases, results):
                if result.status not in (LeaseStatus.OK, LeaseStatus.ALREADY_DELETED):
                    self.counts["ack_failures"] += 1
                    refused.append((lease, result.status))
        for lease, status in refused:
            _log.warning(
                "deleting message %s after its handler succeeded was refused (%s): it was or "
                "will be delivered again",
                lease.message.message_id,
                status.name,
            )

    def released(self, leases: Sequence[Lease]) -> None:
        with self.lock:
            for lease in leases:
                self.table.remove(lease)

    def dropped(self, leases: Sequence[Lease], what: str, error: LeaseqError) -> None:
        """A settle failed for good (not a transient error): forget the leases; the messages
        come back when the leases end."""
        _log.warning("%s of %d messages failed (%s); they will be delivered again", what,
                     len(leases), error)
        self.released(leases)

    def reconnectable(self, error: LeaseqError) -> bool:
        return error.code in _RECONNECT_CODES


def _release_changes(releases: Sequence[tuple[Lease, float, str]]) -> list[VisibilityChange]:
    return [VisibilityChange(lease.receipt, delay, reason) for lease, delay, reason in releases]


# --- the blocking consumer -------------------------------------------------------------------


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

    def __init__(self, core: _Core[QueueClient]) -> None:
        self._core = core
        self._cond = threading.Condition()
        self._deletes: list[Lease] = []
        self._releases: list[tuple[Lease, float, str]] = []
        self._busy = False
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="leaseq-consumer-settler", daemon=True)

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
                _log.exception("settling %d messages failed", len(deletes) + len(releases))
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
            _log.debug("settling failed with %s; trying again in %.3f s", error.code.name, delay)
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
            except _TRANSIENT as error:
                failed = error
                with self._cond:
                    self._deletes[:0] = deletes
            except LeaseqError as error:
                core.dropped(deletes, "deleting", error)
        if releases:
            try:
                client.change_visibility(core.queue, _release_changes(releases))
                core.released([lease for lease, _, _ in releases])
            except _TRANSIENT as error:
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

    def __init__(self, core: _Core[QueueClient]) -> None:
        self._core = core
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="leaseq-consumer-leaser", daemon=True)

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
            for chunk in _chunks(extensions):
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
                _log.debug("extended %d leases by %.3f s", len(chunk), chunk[0].seconds)


class _Subscription:
    """Reads the follow stream and opens it again when it fails, until closed."""

    def __init__(
        self,
        core: _Core[QueueClient],
        on_batch: Callable[[list[Message]], None],
        on_fatal: Callable[[LeaseqError], None],
    ) -> None:
        self._core = core
        self._on_batch = on_batch
        self._on_fatal = on_fatal
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._stream: Any = None
        self.thread = threading.Thread(target=self._loop, name="leaseq-consumer-stream", daemon=True)

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
                _log.exception("the consumer's stream on %r failed", core.queue)
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
            _log.debug(
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
        self._core = _Core(
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
        try:
            self._handler(core.messages_of(item))
        except Exception as error:
            _log.warning("the handler failed on %d message(s) of %r", len(item), core.queue,
                         exc_info=True)
            self._settler.release(core.finished(item, error))
        except BaseException as error:  # SystemExit, KeyboardInterrupt in the handler
            self._settler.release(core.finished(item, error))
            raise
        else:
            core.finished(item, None)
            self._settler.delete(item)

    def _on_fatal(self, error: LeaseqError) -> None:
        _log.error("consumer of %r stopped: %s", self._core.queue, error)
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
                _log.warning(
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


# --- the asyncio consumer --------------------------------------------------------------------


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
        except asyncio.TimeoutError:
            return False

    async def cancel(self) -> None:
        """Cancel the handlers still running (their wrappers release their messages)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class _AsyncSettler:
    """As ``_Settler``, in a task."""

    def __init__(self, core: _Core[AsyncQueueClient]) -> None:
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
                _log.exception("settling %d messages failed", len(deletes) + len(releases))
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
            _log.debug("settling failed with %s; trying again in %.3f s", error.code.name, delay)
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
            except _TRANSIENT as error:
                failed = error
                self._deletes[:0] = deletes
            except LeaseqError as error:
                core.dropped(deletes, "deleting", error)
        if releases:
            try:
                await client.change_visibility(core.queue, _release_changes(releases))
                core.released([lease for lease, _, _ in releases])
            except _TRANSIENT as error:
                failed = error
                self._releases[:0] = releases
            except LeaseqError as error:
                core.dropped([lease for lease, _, _ in releases], "releasing", error)
        return failed

    async def flush(self, timeout: float | None) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class _AsyncLeaser:
    """As ``_Leaser``, in a task."""

    def __init__(self, core: _Core[AsyncQueueClient]) -> None:
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
                except asyncio.TimeoutError:
                    pass
                continue
            for chunk in _chunks(extensions):
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
                _log.debug("extended %d leases by %.3f s", len(chunk), chunk[0].seconds)


class _AsyncSubscription:
    """As ``_Subscription``, in a task."""

    def __init__(
        self,
        core: _Core[AsyncQueueClient],
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
                _log.exception("the consumer's stream on %r failed", core.queue)
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
            _log.debug(
                "the follow stream on %r ended (%s); opening a new one in %.3f s",
                core.queue,
                error.code.name if error else "closed by the server",
                delay,
            )
            try:
                await asyncio.wait_for(self._closed.wait(), delay)
            except asyncio.TimeoutError:
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
        self._core = _Core(
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
        try:
            await self._handler(core.messages_of(item))
        except asyncio.CancelledError:
            # close() ran out of time: give the messages back now rather than at lease end.
            self._settler.release(core.abandoned(item))
            raise
        except Exception as error:
            _log.warning("the handler failed on %d message(s) of %r", len(item), core.queue,
                         exc_info=True)
            self._settler.release(core.finished(item, error))
        else:
            core.finished(item, None)
            self._settler.delete(item)

    def _on_fatal(self, error: LeaseqError) -> None:
        _log.error("consumer of %r stopped: %s", self._core.queue, error)
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
                _log.warning(
                    "consumer of %r: cancelling %d handler call(s) still running at close",
                    self._core.queue,
                    self._core.stats().running,
                )
            await self._dispatcher.cancel()
            grace = left()
            settled = await self._settler.flush(
                None if grace is None else max(grace, SETTLE_GRACE)
            )
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
        except asyncio.TimeoutError:
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
