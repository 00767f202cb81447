"""QueueService: the RPC handlers. Each one validates its protobuf request, calls the core
shared with the other front ends (core.py: the store, the long-poll waits and wake-ups) and
converts the answer; nothing else lives here.

Error handling is one wrapper around every handler: a domain error (`LeaseqError`) becomes its
gRPC status with google.rpc details (`errors.to_rpc_status`); anything unexpected is logged and
answered INTERNAL without details, so a bug never crashes the server or leaks internals. Bad
input is always caught by validation first and never reaches INTERNAL; that includes bytes that
do not parse as the request message (see `add_to_server`).

GetMessages sends, when not following, one response: the batch, or zero messages after wait_time
(at once when wait_time is 0), so every caller gets server_time. A batch of more than
`budget.CALL_BYTES` (8 MiB) of messages comes in several responses of the same stream, one per
chunk that the store read (and leased) only after the previous one was sent, so a client reads the
stream to its end (see `LongPoll.receive` and `budget`: what one call and the server hold in
memory is bounded). PeekMessages likewise reads at most one chunk: a page ends early, with a
next_page_token, after CALL_BYTES.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from contextlib import aclosing
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from grpc_status import rpc_status

from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc

from . import convert, validation
from .budget import CALL_BYTES, SERVER_BYTES
from .core import QueueCore, Store
from .domain import rules
from .domain.commands import PeekParams
from .domain.types import BodyBatch, DeliveredMessage, PeekPage, SendOutcome, SentBatch
from .errors import InvalidArgument, LeaseqError, Unavailable, to_rpc_status

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
"""What gRPC passes each handler beside its request."""

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["QueueService"].full_name

MAX_GRPC_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest gRPC message the server sends or accepts (gRPC's default is 4 MiB). A message may be
8 MiB (max_message_bytes' maximum), and batches of up to 10,000 entries should fit whole in
common cases. Clients should raise their own limits to match."""

RESPONSE_BUDGET = MAX_GRPC_MESSAGE_BYTES - 8 * 1024 * 1024
"""Bytes of messages put into one GetMessages/PeekMessages response; the margin covers framing
and one more message of the largest size, so a response never exceeds the limit. A store chunk
(CALL_BYTES plus one message) is well under it, so this split is only a safety net."""

DRAIN_RETRY_AFTER = 1.0

Request = TypeVar("Request", bound=Message)


def _check_parsed(request: object) -> None:
    if isinstance(request, _Unparsable):
        raise InvalidArgument("", f"the request is not a valid {request.type_name} message")


async def _abort(context: Context, error: LeaseqError) -> None:
    await context.abort_with_status(rpc_status.to_status(to_rpc_status(error)))


async def _abort_internal(context: Context, rpc: str) -> None:
    log.exception("unexpected error in %s", rpc)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error")


def _unary(
    handler: Callable[[QueueService, Any, Context], Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(handler)
    async def wrapper(self: QueueService, request: Any, context: Context) -> Any:
        try:
            _check_parsed(request)
            self._refuse_if_draining()
            return await handler(self, request, context)
        except grpc.aio.AbortError:
            raise  # the handler aborted on purpose: the status is already set
        except LeaseqError as error:
            await _abort(context, error)
        except Exception:
            await _abort_internal(context, handler.__name__)

    return wrapper


def _streaming(
    handler: Callable[[QueueService, Any, Context], AsyncGenerator[Any, None]],
) -> Callable[..., AsyncIterator[Any]]:
    @functools.wraps(handler)
    async def wrapper(self: QueueService, request: Any, context: Context) -> AsyncIterator[Any]:
        try:
            _check_parsed(request)
            self._refuse_if_draining()
            # aclosing: a cancelled stream closes the inner generator at once, which unsubscribes
            # its waiter and drops its lease tracking (instead of waiting for garbage collection).
            async with aclosing(handler(self, request, context)) as responses:
                async for response in responses:
                    yield response
        except grpc.aio.AbortError:
            raise
        except LeaseqError as error:
            await _abort(context, error)
        except Exception:
            await _abort_internal(context, handler.__name__)

    return wrapper


class QueueService(pb_grpc.QueueServiceServicer):
    def __init__(
        self,
        store: Store,
        *,
        call_bytes: int = CALL_BYTES,
        server_bytes: int = SERVER_BYTES,
    ) -> None:
        """call_bytes: max_bytes of each store read of a receive or peek; server_bytes: the
        budget of messages read but not yet sent, across all calls (`budget`)."""
        # Handlers go through the core shared with the other front ends (core.py): the store
        # calls, the long-poll waits and wake-ups, the byte budget and the page tokens live
        # there once. No principal is passed: the auth interceptor has checked the call before
        # the handler runs.
        self.core = QueueCore.serving(store, call_bytes=call_bytes, server_bytes=server_bytes)
        self._clock = store.clock

    @property
    def longpoll(self) -> Any:
        """The core's long-poll machinery (the server wires the store's change feed to it)."""
        return self.core.longpoll

    @property
    def budget(self) -> Any:
        return self.core.longpoll.budget

    # --- lifecycle --------------------------------------------------------------------------

    def drain(self) -> None:
        """New RPCs get UNAVAILABLE; follow streams end; waiting long polls answer now."""
        self.core.drain()

    async def settle(self) -> None:
        """Until the leases that ended streams took but did not send are released: the server's
        shutdown awaits this after its calls ended, before the store closes."""
        await self.core.settle()

    @property
    def draining(self) -> bool:
        return self.core.draining

    def _refuse_if_draining(self) -> None:
        if self.core.draining:
            raise Unavailable("the server is shutting down", retry_after=DRAIN_RETRY_AFTER)

    def _now(self) -> Any:
        return convert.seconds_to_timestamp(self._clock.now())

    def _time_field(self, tag: bytes) -> bytes:
        """server_time (field `tag`) as wire bytes, for responses sent as convert.Wire."""
        return convert.timestamp_field(tag, self._clock.now())

    # --- queues -----------------------------------------------------------------------------

    @_unary
    async def CreateQueue(
        self, request: pb.CreateQueueRequest, context: Context
    ) -> pb.CreateQueueResponse:
        name, config = validation.create_queue(request)
        info = await self.core.create_queue(None, name, config)
        return pb.CreateQueueResponse(queue=convert.queue_to_proto(info))

    @_unary
    async def GetQueue(self, request: pb.GetQueueRequest, context: Context) -> pb.GetQueueResponse:
        info = await self.core.get_queue(None, rules.queue_name(request.name))
        return pb.GetQueueResponse(queue=convert.queue_to_proto(info))

    @_unary
    async def ListQueues(
        self, request: pb.ListQueuesRequest, context: Context
    ) -> pb.ListQueuesResponse:
        params = validation.list_queues(request, self.core.tokens)
        page = await self.core.list_queues(None, params.prefix, params.after, params.limit)
        token = ""
        if page.more:
            token = self.core.tokens.encode_list(params.prefix, page.queues[-1].name)
        return pb.ListQueuesResponse(
            queues=[convert.queue_to_proto(i) for i in page.queues], next_page_token=token
        )

    @_unary
    async def UpdateQueue(
        self, request: pb.UpdateQueueRequest, context: Context
    ) -> pb.UpdateQueueResponse:
        name = rules.queue_name(request.name)
        validation.update_mask_paths(request)  # a bad mask is INVALID_ARGUMENT, before NOT_FOUND
        current = await self.core.get_queue(None, name)
        # Read-merge-write: two concurrent updates of different fields may lose one (last
        # writer wins), which is UpdateQueue's usual contract without an etag.
        config = validation.update_queue(request, current.config)
        # Field by field: asdict would turn the retry policy into a dict.
        changes = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        info = await self.core.update_queue(None, name, changes)
        return pb.UpdateQueueResponse(queue=convert.queue_to_proto(info))

    @_unary
    async def DeleteQueue(
        self, request: pb.DeleteQueueRequest, context: Context
    ) -> pb.DeleteQueueResponse:
        await self.core.delete_queue(None, rules.queue_name(request.name))
        return pb.DeleteQueueResponse()

    @_unary
    async def PurgeQueue(
        self, request: pb.PurgeQueueRequest, context: Context
    ) -> pb.PurgeQueueResponse:
        count = await self.core.purge_queue(None, rules.queue_name(request.name))
        return pb.PurgeQueueResponse(purged_count=count)

    @_unary
    async def GetQueueStats(
        self, request: pb.GetQueueStatsRequest, context: Context
    ) -> pb.GetQueueStatsResponse:
        stats = await self.core.stats(None, rules.queue_name(request.name))
        return pb.GetQueueStatsResponse(stats=convert.stats_to_proto(stats))

    # --- messages ---------------------------------------------------------------------------

    @_unary
    async def SendMessages(
        self, request: pb.SendMessagesRequest, context: Context
    ) -> pb.SendMessagesResponse | convert.Wire:
        name = rules.queue_name(request.queue, "queue")
        plain = convert.plain_entries(request, with_dedup=True)
        if plain is not None:
            # Every entry is only an id, a body and perhaps a dedup id (the usual batch, and
            # write_queue's): one column-wise batch, no Python object per message.
            ids, bodies, dedup_ids = plain  # type: ignore[misc]  # with_dedup: three parts
            rules.batch_size(len(bodies), "entries")
            named = [entry_id for entry_id in ids if entry_id]
            if len(set(named)) != len(named):
                validation.send_request(request)  # raises: a repeated id, named with its index
            sent = await self.core.send(None, name, BodyBatch(bodies, dedup_ids))
            if isinstance(sent, SentBatch):
                # SendMessagesResponse: results (1), server_time (2).
                return convert.Wire(
                    convert.sent_wire(ids, sent.message_ids, sent.duplicates)
                    + self._time_field(b"\x12"),
                    len(sent.message_ids) - len(sent.duplicates),  # metrics: new messages only
                )
            return self._send_response(request.entries, sent)
        validation.send_request(request)
        read = [validation.send_entry(entry, index) for index, entry in enumerate(request.entries)]
        return self._send_response(request.entries, await self.core.send(None, name, read))

    def _send_response(
        self, entries: Any, results: list[SendOutcome | InvalidArgument]
    ) -> pb.SendMessagesResponse:
        if not any(isinstance(r, InvalidArgument) for r in results):
            response = convert.send_results_response(entries, results)  # type: ignore[arg-type]  # no InvalidArgument: checked
        else:
            response = pb.SendMessagesResponse()
            for entry, result in zip(entries, results):
                if isinstance(result, InvalidArgument):
                    convert.add_send_error(response.results, entry.id, result)
                else:
                    response.results.add(
                        id=entry.id, message_id=result.message_id, duplicate=result.duplicate
                    )
        response.server_time.CopyFrom(self._now())
        return response

    @_streaming
    async def GetMessages(
        self, request: pb.GetMessagesRequest, context: Context
    ) -> AsyncGenerator[convert.Wire, None]:
        params = validation.get_messages(request)
        async with aclosing(self.core.get_messages(None, params)) as chunks:
            async for response in self._responses(chunks, always=not params.follow):
                yield response

    async def _responses(
        self, chunks: AsyncIterator[list[DeliveredMessage]], *, always: bool
    ) -> AsyncGenerator[convert.Wire, None]:
        """The responses of each chunk; a chunk and its responses are dropped once sent, before
        the next chunk is read (budget.py: one call holds one chunk)."""
        async for messages in chunks:
            responses = self._batches(messages, always=always)
            messages = None  # type: ignore[assignment]  # _batches holds it while it converts
            for response in responses:
                yield response
                response = None  # type: ignore[assignment]
            responses = None  # type: ignore[assignment]

    def _batches(self, messages: list[DeliveredMessage], *, always: bool) -> Iterable[convert.Wire]:
        """Responses of at most RESPONSE_BUDGET bytes of messages; one empty response when
        always and no message."""
        encoded_messages = convert.encode_received(messages)
        if sum(map(len, encoded_messages)) <= RESPONSE_BUDGET:  # the usual case: one response
            if encoded_messages or always:
                yield self._received(encoded_messages)
            return
        parts: list[bytes] = []
        size = 0
        for encoded in encoded_messages:
            if size and size + len(encoded) > RESPONSE_BUDGET:
                yield self._received(parts)
                parts, size = [], 0
            parts.append(encoded)
            size += len(encoded)
        if size or (always and not messages):
            yield self._received(parts)

    def _received(self, parts: list[bytes]) -> convert.Wire:
        # GetMessagesResponse: messages (1), server_time (2).
        return convert.Wire(b"".join(parts) + self._time_field(b"\x12"), len(parts))

    @_unary
    async def PeekMessages(
        self, request: pb.PeekMessagesRequest, context: Context
    ) -> pb.PeekMessagesResponse:
        params = validation.peek_messages(request, self.core.tokens)
        return await self.core.peek(  # type: ignore[no-any-return]  # present's answer
            None,
            params.queue,
            params.max_messages,
            params.channel_filter,
            params.include_leased,
            params.include_delayed,
            params.after,
            present=lambda page: self._peek_response(params, page),
        )

    def _peek_response(self, params: PeekParams, page: PeekPage) -> pb.PeekMessagesResponse:
        messages: list[pb.PeekedMessage] = []
        cursor, size = page.next_cursor, 0
        for index, message in enumerate(page.messages):
            converted = convert.peeked_to_proto(message)
            cost = converted.ByteSize()
            if messages and size + cost > RESPONSE_BUDGET:
                # Too big for one response: end the page early; the next one starts here.
                last = page.messages[index - 1]
                cursor = (last.visible_at, last.key)
                break
            messages.append(converted)
            size += cost
        token = ""
        if cursor is not None:
            token = self.core.tokens.encode_peek(
                params.queue,
                cursor,
                params.channel_filter,
                params.include_leased,
                params.include_delayed,
            )
        return pb.PeekMessagesResponse(
            messages=messages, next_page_token=token, server_time=self._now()
        )

    @_unary
    async def ChangeVisibility(
        self, request: pb.ChangeVisibilityRequest, context: Context
    ) -> pb.ChangeVisibilityResponse:
        name, changes = validation.change_visibility(request)
        results = await self.core.change_visibility(None, name, changes)
        return pb.ChangeVisibilityResponse(
            results=[
                pb.ChangeVisibilityResult(
                    receipt=r.receipt,
                    status=convert.lease_status_to_proto(r.status),  # type: ignore[arg-type]
                    visible_at=convert.seconds_to_timestamp(r.visible_at)
                    if r.visible_at is not None
                    else None,
                )
                for r in results
            ],
            server_time=self._now(),
        )

    @_unary
    async def DeleteMessages(
        self, request: pb.DeleteMessagesRequest, context: Context
    ) -> pb.DeleteMessagesResponse | convert.Wire:
        name, receipts, attempt_ids = validation.delete_messages(request)
        outcome = await self.core.delete(None, name, receipts, attempt_ids)
        if not outcome.attempt_counts:
            # DeleteMessagesResponse: results (1), attempt_results (2, none), server_time (3).
            results, acked = convert.delete_results_wire(outcome.results)
            return convert.Wire(results + self._time_field(b"\x1a"), acked)
        response = convert.delete_results_response(outcome.results)
        for attempt, count in outcome.attempt_counts:
            response.attempt_results.add(receive_attempt_id=attempt, deleted_count=count)
        response.server_time.CopyFrom(self._now())
        return response

    @_unary
    async def UpdateMessage(
        self, request: pb.UpdateMessageRequest, context: Context
    ) -> pb.UpdateMessageResponse:
        params = validation.update_message(request)
        updated = await self.core.update_message(
            None,
            params.queue,
            params.receipt,
            body=params.body,
            attributes=params.attributes,
            visibility_timeout=params.visibility_timeout,
        )
        return pb.UpdateMessageResponse(
            receipt=updated.receipt,
            visible_at=convert.seconds_to_timestamp(updated.visible_at),
            server_time=self._now(),
        )

    @_unary
    async def DeadLetterMessages(
        self, request: pb.DeadLetterMessagesRequest, context: Context
    ) -> pb.DeadLetterMessagesResponse:
        name, receipts, reason = validation.dead_letter_messages(request)
        outcome = await self.core.dead_letter(None, name, receipts, reason)
        return pb.DeadLetterMessagesResponse(
            results=[
                pb.DeadLetterResult(
                    receipt=r.receipt,
                    status=convert.lease_status_to_proto(r.status),  # type: ignore[arg-type]
                )
                for r in outcome.results
            ]
        )

    @_unary
    async def RedriveMessages(
        self, request: pb.RedriveMessagesRequest, context: Context
    ) -> pb.RedriveMessagesResponse:
        params = validation.redrive_messages(request)
        moved = await self.core.redrive(
            None, params.queue, params.destination, params.max_messages, params.channel_filter
        )
        return pb.RedriveMessagesResponse(moved_count=moved)


# --- registration -----------------------------------------------------------------------------


class _Unparsable:
    """Stands for request bytes that do not parse: gRPC itself would answer a deserializer's
    exception with UNKNOWN, but bad input is INVALID_ARGUMENT (API.md)."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def _lenient_parser(message_class: type[Message]) -> Callable[[bytes], Any]:
    def parse(raw: bytes) -> Any:
        try:
            return message_class.FromString(raw)
        except DecodeError:
            return _Unparsable(message_class.DESCRIPTOR.full_name)

    return parse


class GenericOnly:
    """A server as generated add_*_to_server functions see it: their handlers are added as
    generic handlers only, not also as "registered methods".

    Why: grpc.aio keeps one pending request per registered method and, at every incoming call,
    waits on all of them at once (`asyncio.wait`, which adds and removes a callback on each), so
    each registered method costs every call of the server. With the 19 methods of leaseq, health
    and reflection registered, a call cost a fifth more server CPU than generic only
    (docs/performance.md, "Figures behind the code"). A generic handler is one dict lookup."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        pass  # the same handlers were just added as a generic handler


def add_to_server(service: QueueService, server: grpc.aio.Server) -> None:
    """Register the service like the generated add_QueueServiceServicer_to_server, with
    deserializers that turn unparsable bytes into INVALID_ARGUMENT; as a generic handler only
    (see `GenericOnly` for why)."""
    handlers = {}
    for method in pb.DESCRIPTOR.services_by_name["QueueService"].methods:
        request_class = getattr(pb, method.input_type.name)
        factory = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = factory(
            getattr(service, method.name),
            request_deserializer=_lenient_parser(request_class),
            response_serializer=convert.serialize,  # a message, or a convert.Wire as it is
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
