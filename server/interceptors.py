"""Observing every RPC from a grpc.aio server interceptor, so handlers never see it.

`observe(handler, start)` wraps the behaviour of a method handler of any of the four kinds:
`start(request, context)` is called when the call begins (request is None for client-streaming
methods) and returns an `Observation`, whose `response()` sees every response and whose
`end(code)` gets the call's final status code, however it ended (returned, aborted, cancelled,
raised). An observation may also hand the inner behaviour another context (`logs` does, to keep
its request id in the trailers of an aborted call).

A finished call's context must never be touched: grpc releases the call when the RPC's task
ends, and methods that reach into it (peer(), auth_context()) then dereference a freed pointer
and the process dies of SIGSEGV. So:
- an observation reads what it needs of the context in `start`, never in `end`;
- a response stream is served with the writer API (`await context.write(...)`) from a
  coroutine, not handed to grpc as an async generator. grpc drives a generator from outside:
  when a call ends while grpc waits in its write (a deadline or a cancel while the client does
  not read), the generator is left suspended and closed later by the garbage collector, after
  the call was released, so every `finally` of every layer ran on a dead call. The coroutine
  runs in the call's own task: a deadline or cancel raises in it, and every layer's cleanup and
  `end` run before grpc releases the call.

Used by `logs.RequestLogInterceptor` (request ids, access log) and `metrics.MetricsInterceptor`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from contextlib import aclosing
from typing import Any, cast

import grpc
import grpc.aio

log = logging.getLogger(__name__)


class Observation:
    """One call's hooks; the defaults do nothing."""

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self.context = context  # the context the inner behaviour gets

    def response(self, response: Any) -> None:
        pass

    def end(self, code: grpc.StatusCode) -> None:
        pass


Start = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Observation]


def split_method(full_method: str) -> tuple[str, str]:
    """ "/leaseq.v1.QueueService/SendMessages" -> ("leaseq.v1.QueueService", "SendMessages")."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service, method


class CallEnding:
    """What deciding a call's final status needs, read while the call runs: its deadline (on the
    monotonic clock) and later its status code (a plain attribute of grpc's call state)."""

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        remaining = context.time_remaining()
        self._deadline = None if remaining is None else time.monotonic() + remaining

    def expired(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _ended_early(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED if self.expired() else grpc.StatusCode.CANCELLED

    def code(
        self, context: grpc.aio.ServicerContext[Any, Any], error: BaseException | None
    ) -> grpc.StatusCode:
        """The status the call ended with. A handler that aborted set it on the context; one
        that was cancelled (client gone, deadline passed, shutdown grace over) did not. Called
        in the call's task, before grpc releases the call."""
        if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
            return self._ended_early()
        code = context.code()
        if isinstance(code, grpc.StatusCode):
            return code
        if isinstance(error, grpc.aio.BaseError):
            # grpc's own error from a write or abort (not an abort of ours: that set the code):
            # the call ended under the handler.
            return self._ended_early()
        if error is not None:
            return grpc.StatusCode.UNKNOWN  # grpc answers an escaped exception with UNKNOWN
        return grpc.StatusCode.OK


def _end(
    observation: Observation,
    ending: CallEnding,
    context: grpc.aio.ServicerContext[Any, Any],
    error: BaseException | None,
) -> None:
    try:
        observation.end(ending.code(context, error))
    except Exception:  # an observer's bug must never change the call's outcome
        log.exception("an RPC observer failed")


def _response(observation: Observation, response: Any) -> None:
    try:
        observation.response(response)
    except Exception:
        log.exception("an RPC observer failed")


def _unary_response(
    inner: Callable[..., Any], start: Start, streaming_request: bool
) -> Callable[..., Any]:
    async def behaviour(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        ending = CallEnding(context)
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
            _end(observation, ending, context, error)

    return behaviour


def _stream_response(
    inner: Callable[..., Any], start: Start, streaming_request: bool
) -> Callable[..., Any]:
    # A coroutine writing its responses, not a generator: see the module docstring.
    async def behaviour(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        ending = CallEnding(context)
        observation = start(None if streaming_request else request, context)
        error: BaseException | None = None
        try:
            # aclosing: an ended call closes the inner generators now, in the call's task.
            async with aclosing(inner(request, observation.context)) as responses:
                async for response in responses:
                    _response(observation, response)
                    await context.write(response)
        except BaseException as e:
            error = e
            raise
        finally:
            _end(observation, ending, context, error)

    return behaviour


def observe(
    handler: grpc.RpcMethodHandler[Any, Any] | None, start: Start
) -> grpc.RpcMethodHandler[Any, Any] | None:
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
        replaced: grpc.RpcMethodHandler[Any, Any] = cast(Any, handler)._replace(**{kind: wrapped})
        return replaced
    return handler


class ObservedHandlers:
    """observe() of each method's handler, made once per method instead of at every call.

    The handler a method resolves to is the same object at every call, unless an inner
    interceptor makes one per call (auth does): so the wrapped handler is kept per method and
    made again only when the handler it wraps changed. Only methods that resolve to a handler
    are kept, so the table is bounded by the server's methods. start_for(service, method) gives
    the `start` of that method's calls."""

    def __init__(self, start_for: Callable[[str, str], Start]) -> None:
        self._start_for = start_for
        self._made: dict[
            str, tuple[grpc.RpcMethodHandler[Any, Any], grpc.RpcMethodHandler[Any, Any] | None]
        ] = {}

    def get(
        self, full_method: str, handler: grpc.RpcMethodHandler[Any, Any] | None
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        if handler is None:
            return None
        made = self._made.get(full_method)
        if made is not None and made[0] is handler:
            return made[1]
        service, method = split_method(full_method)
        wrapped = observe(handler, self._start_for(service, method))
        self._made[full_method] = (handler, wrapped)
        return wrapped
