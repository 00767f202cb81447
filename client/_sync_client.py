"""``QueueClient``, the blocking client (``leaseq.client.client`` tells what both clients do), and
its follow stream ``MessageStream``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from ..v1 import queue_service_pb2_grpc as pb_grpc
from . import _wire
from ._settings import (
    DEFAULT_TARGET,
    ChannelOptions,
    Settings,
    T,
    TLSLike,
    VisibilityEntries,
    log,
)
from ._wire import Call, Plan, ReceiptsLike
from .batching import DEFAULT_BATCH_BYTES
from .errors import LeaseqError, from_rpc_error
from .retry import RetryPolicy
from .types import (
    Body,
    DeleteResults,
    DurationLike,
    LeaseResult,
    Message,
    PeekedMessage,
    Queue,
    QueueStats,
    SendEntry,
    SendResult,
    UpdateResult,
)

if TYPE_CHECKING:
    from typing import Self

    import pyarrow as pa
    from typing_extensions import Unpack

    from .arrow import ReceiptColumn
    from .types import QueueConfigOptions, SendOptions

# pyarrow is imported by the Arrow methods on first use (``leaseq.client.arrow``): it takes a
# quarter of a second, which every other user of the client (the CLI) need not pay.


class MessageStream:
    """Batches of messages from a follow stream (``QueueClient.stream``).

    Iterate it for ``list[Message]`` batches, as the server sends them. ``cancel()`` (safe from
    any thread) or leaving its ``with`` block ends it; iteration then simply stops. Errors are
    raised as ``LeaseqError`` s.
    """

    def __init__(self, call: Any) -> None:
        self._call = call
        self._cancelled = False

    def __iter__(self) -> Iterator[list[Message]]:
        return self

    def __next__(self) -> list[Message]:
        while True:
            try:
                response = next(self._call)
            except grpc.RpcError as e:
                if self._cancelled and e.code() == grpc.StatusCode.CANCELLED:
                    raise StopIteration from None
                raise from_rpc_error(e) from e
            batch = _wire.messages_of(response)
            if batch:  # an empty batch carries only the server's time: nothing to hand over
                return batch

    def cancel(self) -> None:
        """End the stream. The leases of messages already handed out stay as they are."""
        self._cancelled = True
        self._call.cancel()

    def __enter__(self) -> MessageStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class QueueClient:
    """A blocking leaseq client over one gRPC channel.

    Args:
        target: ``host:port`` of the server; a host alone means port 50051
            (``leaseq.client.target.parse_target``: ``ValueError`` for an empty target or a
            port outside 1..65535).
        token: a bearer token, sent as ``authorization: Bearer <token>``.
        tls: None/False for plaintext, True for TLS with the system's roots, or a ``TLSConfig``.
        retry: how to retry safe calls after UNAVAILABLE or DEADLINE_EXCEEDED; None disables
            retries.
        timeout: deadline in seconds of each attempt of a unary call (a receive gets its wait
            time on top); None for no deadline. Follow streams have none.
        options: extra gRPC channel options (they override the client's own).

    The client is thread-safe; use it as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: str | None = None,
        tls: TLSLike = None,
        retry: RetryPolicy | None = RetryPolicy(),
        timeout: float | None = 30.0,
        options: ChannelOptions = (),
    ) -> None:
        self._settings = s = Settings(target, token, tls, retry, timeout, options)
        if s.credentials is not None:
            self._channel = grpc.secure_channel(s.target, s.credentials, options=s.channel_options)
        else:
            self._channel = grpc.insecure_channel(s.target, options=s.channel_options)
        self._stub = pb_grpc.QueueServiceStub(self._channel)
        self._raw_methods: dict[tuple[str, bool], Any] = {}  # Call.raw: bytes in and out

    @property
    def target(self) -> str:
        return self._settings.target

    def close(self) -> None:
        """Close the channel; ongoing calls are cancelled."""
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- driver -----------------------------------------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        # A failed call is thrown into the plan: most plans let it through, a bulk plan may
        # report the rows it concerns and return what earlier calls achieved.
        response: Any = None
        error: LeaseqError | None = None
        while True:
            try:
                call = plan.send(response) if error is None else plan.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            response, error = None, None
            try:
                response = self._invoke(call)
            except LeaseqError as e:
                error = e

    def _method(self, call: Call) -> Any:
        if not call.raw:
            return getattr(self._stub, call.method)
        key = (call.method, call.streaming)
        method = self._raw_methods.get(key)
        if method is None:
            method = self._raw_methods[key] = _wire.raw_method(self._channel, call)
        return method

    def _invoke(self, call: Call) -> Any:
        s = self._settings
        method = self._method(call)
        timeout = s.timeout_for(call)
        attempts = 0
        while True:
            attempts += 1
            try:
                if call.streaming:
                    responses = method(call.request, timeout=timeout, metadata=s.metadata)
                    return list(responses)
                return method(call.request, timeout=timeout, metadata=s.metadata)
            except grpc.RpcError as e:
                error = from_rpc_error(e)
                delay = s.delay_before_retry(call, attempts, error)
                if delay is None:
                    raise error from e
            time.sleep(delay)

    # -- queues -----------------------------------------------------------------------------

    def create_queue(self, name: str, **config: Unpack[QueueConfigOptions]) -> Queue:
        """Create a queue (or return it, if it exists with the same configuration).

        Options are ``QueueConfig``'s fields; durations in seconds or ``timedelta``. Raises
        ``QueueAlreadyExists`` when the queue exists with another configuration.

        Example::

            client.create_queue("jobs", visibility_timeout=60, dead_letter_queue="jobs-dlq",
                                max_delivery_count=5)
        """
        return self._run(_wire.create_queue(name, config))

    def get_queue(self, name: str) -> Queue:
        """The queue's effective configuration. Raises ``QueueNotFound``."""
        return self._run(_wire.get_queue(name))

    def list_queues(self, prefix: str = "", *, page_size: int = 100) -> list[Queue]:
        """Every queue whose name starts with ``prefix``, in name order (all pages).

        ``page_size`` only sets how many queues each round trip fetches.
        """
        return self._run(_wire.list_queues(prefix, page_size))

    def update_queue(self, name: str, **config: Unpack[QueueConfigOptions]) -> Queue:
        """Change the given configuration fields only; a field given as None returns to its
        default.

        Example::

            client.update_queue("jobs", visibility_timeout=120, dead_letter_queue=None)
        """
        return self._run(_wire.update_queue(name, config))

    def delete_queue(self, name: str) -> None:
        """Delete a queue and its messages. Raises ``QueueNotFound``, or ``FailedPrecondition``
        while it is another queue's dead letter queue."""
        self._run(_wire.delete_queue(name))

    def purge_queue(self, name: str) -> int:
        """Delete every message of the queue (all states); returns how many."""
        return self._run(_wire.purge_queue(name))

    def stats(self, name: str) -> QueueStats:
        """Exact counts of the queue's messages by state, and its lifetime counters."""
        return self._run(_wire.stats(name))

    # -- messages ---------------------------------------------------------------------------

    def send(self, queue: str, body: Body, **options: Unpack[SendOptions]) -> str:
        """Send one message; returns its message_id (the original one for a duplicate).

        Options: ``attributes``, ``channel``, ``delay``, ``ttl``, ``dedup_id``, ``group`` (see
        ``SendEntry``). Raises the entry's error (e.g. ``InvalidArgument`` for a body that is
        too large).

        Example::

            message_id = client.send("jobs", b"payload", attributes={"kind": "resize"}, delay=5)
        """
        return self._run(_wire.send(queue, body, options))

    def send_batch(self, queue: str, entries: Iterable[SendEntry | Body]) -> list[SendResult]:
        """Send 1..10,000 messages in one call; one ``SendResult`` per entry, in order.

        An entry that fails does not fail the batch: check each result's ``ok``/``error``.

        Example::

            results = client.send_batch("jobs", ["a", "b", SendEntry("c", channel="eu")])
            assert all(r.ok for r in results)
        """
        return self._run(_wire.send_batch(queue, entries))

    def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        visibility_timeout: DurationLike | None = None,
        wait_time: DurationLike | None = None,
        channel: str | None = None,
        attempt_id: str | None = None,
    ) -> list[Message]:
        """Lease and return up to ``max_messages`` messages, waiting up to ``wait_time`` for
        the first (long poll); an empty list when none came.

        Args:
            visibility_timeout: lease length; None: the queue's. 0 delivers without a lease.
            wait_time: None: the queue's receive_wait_time; 0 answers at once.
            channel: an exact channel, or a prefix ending in ``*``.
            attempt_id: repeating a receive with the same id while its leases are live returns
                the same messages and receipts (safe retries, exact re-reads).

        Example::

            for msg in client.receive("jobs", 10, visibility_timeout=60, wait_time=5):
                handle(msg.body)
                client.delete("jobs", msg)
        """
        return self._run(
            _wire.receive(
                queue,
                max_messages,
                visibility_timeout=visibility_timeout,
                wait_time=wait_time,
                channel=channel,
                attempt_id=attempt_id,
            )
        )

    def stream(
        self,
        queue: str,
        *,
        max_messages: int = 100,
        max_outstanding: int = 1000,
        visibility_timeout: DurationLike | None = None,
        channel: str | None = None,
    ) -> MessageStream:
        """Subscribe: batches of leased messages as they become visible, until cancelled.

        The server pauses the stream while it holds ``max_outstanding`` unsettled leases
        (settle them with ``delete``/``release``, or let them expire). The stream is not
        retried or resumed after an error.

        Example::

            with client.stream("jobs", max_outstanding=100) as batches:
                for batch in batches:
                    for msg in batch:
                        handle(msg)
                    client.delete("jobs", batch)
        """
        request = _wire.receive_request(
            queue,
            max_messages,
            visibility_timeout=visibility_timeout,
            channel=channel,
            follow=True,
            max_outstanding=max_outstanding,
        )
        log.debug("opening a follow stream on %r", queue)
        return MessageStream(self._stub.GetMessages(request, metadata=self._settings.metadata))

    def peek(
        self,
        queue: str,
        max_messages: int = 10,
        *,
        include_leased: bool = False,
        include_delayed: bool = False,
        channel: str | None = None,
    ) -> list[PeekedMessage]:
        """Up to ``max_messages`` messages in delivery order, without leasing them or counting
        a delivery. Visible ones only, unless leased/delayed ones are asked for too."""
        return self._run(
            _wire.peek(
                queue,
                max_messages,
                include_leased=include_leased,
                include_delayed=include_delayed,
                channel=channel,
            )
        )

    def change_visibility(self, queue: str, entries: VisibilityEntries) -> list[LeaseResult]:
        """Change 1..10,000 leases: each ends ``visibility_timeout`` after this call (0
        releases). Entries are ``VisibilityChange`` s or ``(receipt, timeout[, reason])``
        tuples; one ``LeaseResult`` per entry, in order.

        Example::

            client.change_visibility("jobs", [(m.receipt, 60) for m in batch])
        """
        return self._run(_wire.change_visibility(queue, entries))

    def extend(self, queue: str, receipt: str | Message, seconds: DurationLike) -> LeaseResult:
        """Make the lease end ``seconds`` from now. Check the result's ``ok``: a lease that
        already ended gives ``LeaseStatus.LEASE_EXPIRED``."""
        return self._run(_wire.change_one(queue, receipt, seconds, None))

    def release(
        self,
        queue: str,
        receipt: str | Message,
        *,
        delay: DurationLike = 0,
        reason: str | None = None,
    ) -> LeaseResult:
        """Give the message back: visible again after ``delay`` (0: now; until then it stays
        leased, as with SQS's ChangeMessageVisibility). ``reason`` is stored as the message's
        ``last_error``."""
        return self._run(_wire.change_one(queue, receipt, delay, reason))

    def delete(
        self, queue: str, receipts: ReceiptsLike, *, attempt_ids: Iterable[str] = ()
    ) -> DeleteResults:
        """Acknowledge messages: by receipt (a str, a ``Message``, or an iterable of them),
        and/or every message still leased under the given receive ``attempt_ids``.

        Example::

            results = client.delete("jobs", msgs)
            assert results.ok
        """
        return self._run(_wire.delete(queue, receipts, attempt_ids))

    def dead_letter(
        self, queue: str, receipts: ReceiptsLike, reason: str = ""
    ) -> list[LeaseResult]:
        """Move leased messages to the queue's dead letter queue now, instead of letting them
        be retried: ``reason`` becomes each one's ``last_error`` (delivery count and enqueue
        time are kept). One ``LeaseResult`` per receipt, with the status a ``delete`` would
        give it (``MESSAGE_NOT_FOUND`` for one already moved). Raises ``FailedPrecondition``
        (reason ``NO_DEAD_LETTER_QUEUE``) when the queue has no dead letter queue.

        Example::

            client.dead_letter("jobs", msg, "cannot parse the body")
        """
        return self._run(_wire.dead_letter(queue, receipts, reason))

    def update_message(
        self,
        queue: str,
        receipt: str | Message,
        *,
        body: Body | None = None,
        attributes: Mapping[str, str] | None = None,
        visibility_timeout: DurationLike | None = None,
    ) -> UpdateResult:
        """Replace the body and/or attributes of a leased message and/or set when its lease
        ends. Returns the new receipt: the old one no longer works. Raises
        ``FailedPrecondition`` (reason ``LEASE_EXPIRED``/``RECEIPT_SUPERSEDED``) or
        ``NotFound`` when the receipt does not hold a live lease."""
        return self._run(
            _wire.update_message(
                queue,
                receipt,
                body=body,
                attributes=attributes,
                visibility_timeout=visibility_timeout,
            )
        )

    def redrive(
        self,
        queue: str,
        *,
        destination: str | None = None,
        max_messages: int = 0,
        channel: str | None = None,
    ) -> int:
        """Move messages from dead letter queue ``queue`` back to their source queue (or to
        ``destination``); up to ``max_messages`` (0: all). Returns how many moved."""
        return self._run(
            _wire.redrive(
                queue, destination=destination, max_messages=max_messages, channel=channel
            )
        )

    # -- Arrow bulk path (see leaseq.client.arrow) ------------------------------------------

    def send_arrow(
        self,
        queue: str,
        table: pa.Table,
        *,
        body_column: str = "body",
        attributes_column: str | None = "attributes",
        channel_column: str | None = "channel",
        delay_column: str | None = "delay",
        ttl_column: str | None = "ttl",
        dedup_id_column: str | None = "dedup_id",
        id_column: str | None = "id",
        max_batch_bytes: int = DEFAULT_BATCH_BYTES,
        group_column: str | None = "group",
    ) -> pa.Table:
        """Send every row of ``table`` as a message; returns one row per input row, in order
        (``SEND_RESULT_SCHEMA``: id, message_id, duplicate, error_code, error_message).

        ``body_column`` (binary or string) is required. The other columns are used when the
        table has them under their default names (or the names given; None ignores one):
        ``attributes`` (map<string, string> or a struct of strings), ``channel``,
        ``delay``/``ttl`` (duration, or numbers of seconds), ``dedup_id``, ``group``, and ``id`` (echoed
        in the result instead of the row's position). Requests are cut at 10,000 rows or
        ``max_batch_bytes``. A row that fails validation fails alone (its ``error_code``).
        If the first request fails as a whole the error is raised; if a later one does, its
        rows and the rest are reported as errors (``"outcome unknown"``/``"not sent"``) so the
        rows already enqueued are not lost from the result. Requests are retried after
        UNAVAILABLE only when every row carries a ``dedup_id``.

        Example::

            table = pa.table({"body": [b"a", b"b"], "dedup_id": ["order-1", "order-2"]})
            results = client.send_arrow("jobs", table)
            failed = results.filter(pc.is_valid(results["error_code"]))
        """
        from . import arrow

        return self._run(
            arrow.send_arrow(
                queue,
                table,
                body_column=body_column,
                attributes_column=attributes_column,
                channel_column=channel_column,
                delay_column=delay_column,
                ttl_column=ttl_column,
                dedup_id_column=dedup_id_column,
                id_column=id_column,
                max_batch_bytes=max_batch_bytes,
                group_column=group_column,
            )
        )

    def receive_arrow(
        self,
        queue: str,
        max_messages: int,
        *,
        visibility_timeout: DurationLike | None = None,
        wait_time: DurationLike | None = None,
        channel: str | None = None,
        attempt_id: str | None = None,
    ) -> pa.Table:
        """Lease up to ``max_messages`` messages (any number: 10,000 per request) as a table
        of ``MESSAGE_SCHEMA``. The first request waits up to ``wait_time`` for messages; the
        next ones take only what is visible at once, and the receive stops at the first
        request that comes back short. ``attempt_id`` (safe retries, exact re-reads, see
        ``receive``) needs ``max_messages <= 10,000``. If a follow-up request fails, the
        messages received so far are returned (they are leased to the caller).

        Example::

            table = client.receive_arrow("jobs", 50_000, visibility_timeout=300, wait_time=5)
            process(table.column("body"))
            client.ack_arrow("jobs", table)
        """
        from . import arrow

        return self._run(
            arrow.receive_arrow(
                queue,
                max_messages,
                visibility_timeout=visibility_timeout,
                wait_time=wait_time,
                channel=channel,
                attempt_id=attempt_id,
            )
        )

    def ack_arrow(
        self,
        queue: str,
        receipts: ReceiptColumn,
        *,
        max_batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> pa.Table:
        """Delete messages by receipt: a string array, a table with a ``receipt`` column
        (e.g. ``receive_arrow``'s) or an iterable of strings. Returns (receipt, status) per
        receipt (``ACK_RESULT_SCHEMA``; status ``"OK"``, ``"ALREADY_DELETED"``, ...). Requests
        are cut at 10,000 receipts or ``max_batch_bytes`` and retried; an error is raised as a
        whole (acking the same receipts again is harmless).

        Example::

            acked = client.ack_arrow("jobs", table.column("receipt"))
            assert set(acked.column("status").to_pylist()) <= {"OK", "ALREADY_DELETED"}
        """
        from . import arrow

        return self._run(arrow.ack_arrow(queue, receipts, max_batch_bytes=max_batch_bytes))
