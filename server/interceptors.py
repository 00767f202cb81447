"""Observing every RPC from a grpc.aio server interceptor, so handlers never see it.

`observe(handler, start)` wraps the behaviour of a method handler of any of the four kinds:
`start(request, context)` is called when the call begins (request is None for client-streaming
methods) and returns an `Observation`, whose `response()` sees every response and whose
`end(code)` gets the call's final status code, however it ended (returned, aborted, cancelled,
raised). An observation may also hand the inner behaviour another context (`logs` does, to keep
its request id in the trailers of an aborted call).

Used by `logs.RequestLogInterceptor` (request ids, access log) and `metrics.MetricsInterceptor`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, cast

import grpc
import grpc.aio

log = logging.getLogger(__name__)


class Observation:
    """One call's hooks; the defaults do nothing."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self.context = context  # the context the inner behaviour gets

    def response(self, response: Any) -> None:
        pass

    def end(self, code: grpc.StatusCode) -> None:
        pass


Start = Callable[[Any, grpc.aio.ServicerContext], Observation]


def split_method(full_method: str) -> tuple[str, str]:
    """"/leaseq.v1.QueueService/SendMessages" -> ("leaseq.v1.QueueService", "SendMessages")."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service, method


def final_code(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    """The status a call ended with. A handler that aborted set it on the context; one that was
    cancelled (client gone, deadline passed, shutdown grace over) did not."""
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return grpc.StatusCode.DEADLINE_EXCEEDED
        return grpc.StatusCode.CANCELLED
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if error is not None:
        return grpc.StatusCode.UNKNOWN  # grpc answers an escaped exception with UNKNOWN
    return grpc.StatusCode.OK


def _end(observation: Observation, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
    try:
        observation.end(final_code(context, error))
    except Exception:  # an observer's bug must never change the call's outcome
        log.exception("an RPC observer failed")


def _response(observation: Observation, response: Any) -> None:
    try:
        observation.response(response)
    except Exception:
        log.exception("an RPC observer failed")


def _unary_response(inner: Callable[..., Any], start: Start, streaming_request: bool):
    async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
        observation = start(None if streaming_request else request, context)
        error: BaseException | None = None
        try:
            response = await inner(request, observation.context)
            if response is not None:
                _response(observation, response)
            return response
        except BaseException as e:
            error = e
            raise
        finally:
            _end(observation, context, error)

    return behaviour


def _stream_response(inner: Callable[..., Any], start: Start, streaming_request: bool):
    async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        observation = start(None if streaming_request else request, context)
        error: BaseException | None = None
        try:
            # aclosing: a cancelled call closes the inner generator at once (its cleanup runs now).
            async with aclosing(inner(request, observation.context)) as responses:
                async for response in responses:
                    _response(observation, response)
                    yield response
        except BaseException as e:
            error = e
            raise
        finally:
            _end(observation, context, error)

    return behaviour


def observe(handler: grpc.RpcMethodHandler | None, start: Start) -> grpc.RpcMethodHandler | None:
    """The handler with its behaviour wrapped (see the module docstring); None stays None
    (an unknown method: gRPC answers UNIMPLEMENTED)."""
    if handler is None:
        return None
    for kind, streaming_request in (
        ("unary_unary", False),
        ("unary_stream", False),
        ("stream_unary", True),
        ("stream_stream", True),
    ):
        inner = getattr(handler, kind)
        if inner is None:
            continue
        if inspect.isasyncgenfunction(inner):
            wrapped = _stream_response(inner, start, streaming_request)
        elif inspect.iscoroutinefunction(inner):
            # Includes streaming methods written with context.write() (the aio Health.Watch).
            wrapped = _unary_response(inner, start, streaming_request)
        else:
            return handler  # a synchronous behaviour (not used here): left as it is
        # grpc's handlers are namedtuples (RpcMethodHandler is only their abstract type).
        return cast(Any, handler)._replace(**{kind: wrapped})
    return handler
