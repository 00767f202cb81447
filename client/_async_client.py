"""``AsyncQueueClient``, the asyncio client (``leaseq.client.client`` tells what both clients do),
and its follow stream ``AsyncMessageStream``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
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


class AsyncMessageStream:
    """Batches of messages from a follow stream (``AsyncQueueClient.stream``).

    ``async for batch in stream`` gives ``list[Message]`` batches. ``cancel()`` or leaving its
    ``async with`` block ends it; iteration then simply stops.
    """

    def __init__(self, call: Any) -> None:
        self._call = call
        self._cancelled = False

    def __aiter__(self) -> AsyncMessageStream:
        return self

    async def __anext__(self) -> list[Message]:
        while True:
            try:
                response = await self._call.read()
            except asyncio.CancelledError:
                # grpc.aio reports a cancelled call as CancelledError. If we cancelled the call
                # the stream is simply over; if our task is being cancelled, let that through.
                task = asyncio.current_task()
                cancelling = task.cancelling() if task and hasattr(task, "cancelling") else 0
                if self._cancelled and not cancelling:
                    raise StopAsyncIteration from None
                raise
            except grpc.RpcError as e:
                if self._cancelled and e.code() == grpc.StatusCode.CANCELLED:
                    raise StopAsyncIteration from None
                raise from_rpc_error(e) from e
            if response is grpc.aio.EOF:
                raise StopAsyncIteration
            batch = _wire.messages_of(response)
            if batch:
                return batch

    def cancel(self) -> None:
        """End the stream. The leases of messages already handed out stay as they are."""
        self._cancelled = True
        self._call.cancel()

    async def __aenter__(self) -> AsyncMessageStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()


class AsyncQueueClient:
    """The asyncio twin of ``QueueClient``: same arguments, same methods as coroutines.

    The channel is opened on first use, inside the running event loop, so the client may be
    constructed anywhere; use it from one event loop.

    Example::

        async with AsyncQueueClient("127.0.0.1:50051") as client:
            await client.send("jobs", "hello")
            async with client.stream("jobs") as batches:
                async for batch in batches:
                    ...
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
        self._settings = Settings(target, token, tls, retry, timeout, options)
        self._channel: grpc.aio.Channel | None = None
        self._stub_: pb_grpc.QueueServiceStub | None = None
        self._raw_methods: dict[tuple[str, bool], Any] = {}  # Call.raw: bytes in and out

    @property
    def target(self) -> str:
        return self._settings.target

    @property
    def _stub(self) -> pb_grpc.QueueServiceStub:
        if self._stub_ is None:
            s = self._settings
            if s.credentials is not None:
                self._channel = grpc.aio.secure_channel(
                    s.target, s.credentials, options=s.channel_options
                )
            else:
                self._channel = grpc.aio.insecure_channel(s.target, options=s.channel_options)
            self._stub_ = pb_grpc.QueueServiceStub(self._channel)
        return self._stub_

    async def close(self) -> None:
        """Close the channel; ongoing calls are cancelled."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stub_ = None
            self._raw_methods = {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- driver -----------------------------------------------------------------------------

    async def _run(self, plan: Plan[T]) -> T:
        # As QueueClient._run: a failed call is thrown into the plan.
        response: Any = None
        error: LeaseqError | None = None
        while True:
            try:
                call = plan.send(response) if error is None else plan.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            response, error = None, None
            try:
                response = await self._invoke(call)
            except LeaseqError as e:
                error = e

    def _method(self, call: Call) -> Any:
        stub = self._stub  # makes the channel on first use
        if not call.raw:
            return getattr(stub, call.method)
        key = (call.method, call.streaming)
        method = self._raw_methods.get(key)
        if method is None:
            method = self._raw_methods[key] = _wire.raw_method(self._channel, call)
        return method

    async def _invoke(self, call: Call) -> Any:
        s = self._settings
        method = self._method(call)
        timeout = s.timeout_for(call)
        attempts = 0
        while True:
            attempts += 1
            try:
                if call.streaming:
                    responses = method(call.request, timeout=timeout, metadata=s.metadata)
                    return [response async for response in responses]
                return await method(call.request, timeout=timeout, metadata=s.metadata)
            except grpc.RpcError as e:
                error = from_rpc_error(e)
                delay = s.delay_before_retry(call, attempts, error)
                if delay is None:
                    raise error from e
            await asyncio.sleep(delay)

    # -- queues (see QueueClient for the documentation of each method) ---------------------

    async def create_queue(self, name: str, **config: Unpack[QueueConfigOptions]) -> Queue:
        """See ``QueueClient.create_queue``."""
        return await self._run(_wire.create_queue(name, config))

    async def get_queue(self, name: str) -> Queue:
        """See ``QueueClient.get_queue``."""
        return await self._run(_wire.get_queue(name))

    async def list_queues(self, prefix: str = "", *, page_size: int = 100) -> list[Queue]:
        """See ``QueueClient.list_queues``."""
        return await self._run(_wire.list_queues(prefix, page_size))

    async def update_queue(self, name: str, **config: Unpack[QueueConfigOptions]) -> Queue:
        """See ``QueueClient.update_queue``."""
        return await self._run(_wire.update_queue(name, config))

    async def delete_queue(self, name: str) -> None:
        """See ``QueueClient.delete_queue``."""
        await self._run(_wire.delete_queue(name))

    async def purge_queue(self, name: str) -> int:
        """See ``QueueClient.purge_queue``."""
        return await self._run(_wire.purge_queue(name))

    async def stats(self, name: str) -> QueueStats:
        """See ``QueueClient.stats``."""
        return await self._run(_wire.stats(name))

    # -- messages ---------------------------------------------------------------------------

    async def send(self, queue: str, body: Body, **options: Unpack[SendOptions]) -> str:
        """See ``QueueClient.send``."""
        return await self._run(_wire.send(queue, body, options))

    async def send_batch(self, queue: str, entries: Iterable[SendEntry | Body]) -> list[SendResult]:
        """See ``QueueClient.send_batch``."""
        return await self._run(_wire.send_batch(queue, entries))

    async def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        visibility_timeout: DurationLike | None = None,
        wait_time: DurationLike | None = None,
        channel: str | None = None,
        attempt_id: str | None = None,
    ) -> list[Message]:
        """See ``QueueClient.receive``."""
        return await self._run(
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
    ) -> AsyncMessageStream:
        """See ``QueueClient.stream``; returns an async iterator of batches (call it inside
        the event loop, without ``await``)."""
        request = _wire.receive_request(
            queue,
            max_messages,
            visibility_timeout=visibility_timeout,
            channel=channel,
            follow=True,
            max_outstanding=max_outstanding,
        )
        log.debug("opening a follow stream on %r", queue)
        return AsyncMessageStream(self._stub.GetMessages(request, metadata=self._settings.metadata))

    async def peek(
        self,
        queue: str,
        max_messages: int = 10,
        *,
        include_leased: bool = False,
        include_delayed: bool = False,
        channel: str | None = None,
    ) -> list[PeekedMessage]:
        """See ``QueueClient.peek``."""
        return await self._run(
            _wire.peek(
                queue,
                max_messages,
                include_leased=include_leased,
                include_delayed=include_delayed,
                channel=channel,
            )
        )

    async def change_visibility(self, queue: str, entries: VisibilityEntries) -> list[LeaseResult]:
        """See ``QueueClient.change_visibility``."""
        return await self._run(_wire.change_visibility(queue, entries))

    async def extend(
        self, queue: str, receipt: str | Message, seconds: DurationLike
    ) -> LeaseResult:
        """See ``QueueClient.extend``."""
        return await self._run(_wire.change_one(queue, receipt, seconds, None))

    async def release(
        self,
        queue: str,
        receipt: str | Message,
        *,
        delay: DurationLike = 0,
        reason: str | None = None,
    ) -> LeaseResult:
        """See ``QueueClient.release``."""
        return await self._run(_wire.change_one(queue, receipt, delay, reason))

    async def delete(
        self, queue: str, receipts: ReceiptsLike, *, attempt_ids: Iterable[str] = ()
    ) -> DeleteResults:
        """See ``QueueClient.delete``."""
        return await self._run(_wire.delete(queue, receipts, attempt_ids))

    async def dead_letter(
        self, queue: str, receipts: ReceiptsLike, reason: str = ""
    ) -> list[LeaseResult]:
        """See ``QueueClient.dead_letter``."""
        return await self._run(_wire.dead_letter(queue, receipts, reason))

    async def update_message(
        self,
        queue: str,
        receipt: str | Message,
        *,
        body: Body | None = None,
        attributes: Mapping[str, str] | None = None,
        visibility_timeout: DurationLike | None = None,
    ) -> UpdateResult:
        """See ``QueueClient.update_message``."""
        return await self._run(
            _wire.update_message(
                queue,
                receipt,
                body=body,
                attributes=attributes,
                visibility_timeout=visibility_timeout,
            )
        )

    async def redrive(
        self,
        queue: str,
        *,
        destination: str | None = None,
        max_messages: int = 0,
        channel: str | None = None,
    ) -> int:
        """See ``QueueClient.redrive``."""
        return await self._run(
            _wire.redrive(
                queue, destination=destination, max_messages=max_messages, channel=channel
            )
        )

    # -- Arrow bulk path --------------------------------------------------------------------

    async def send_arrow(
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
        """See ``QueueClient.send_arrow``."""
        from . import arrow

        return await self._run(
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

    async def receive_arrow(
        self,
        queue: str,
        max_messages: int,
        *,
        visibility_timeout: DurationLike | None = None,
        wait_time: DurationLike | None = None,
        channel: str | None = None,
        attempt_id: str | None = None,
    ) -> pa.Table:
        """See ``QueueClient.receive_arrow``."""
        from . import arrow

        return await self._run(
            arrow.receive_arrow(
                queue,
                max_messages,
                visibility_timeout=visibility_timeout,
                wait_time=wait_time,
                channel=channel,
                attempt_id=attempt_id,
            )
        )

    async def ack_arrow(
        self,
        queue: str,
        receipts: ReceiptColumn,
        *,
        max_batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> pa.Table:
        """See ``QueueClient.ack_arrow``."""
        from . import arrow

        return await self._run(arrow.ack_arrow(queue, receipts, max_batch_bytes=max_batch_bytes))
