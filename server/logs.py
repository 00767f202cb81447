"""Request ids, the access log, and the log format of `leaseq serve`.

The library only logs (module loggers under "leaseq."); it never configures logging. The
application does: `leaseq serve` calls `configure_logging`, which writes one JSON object per line
to stderr when stderr is not a terminal (a container, a service manager, a file) and readable
text when it is.

Request ids: every RPC gets one, the caller's `x-request-id` metadata when it is a sane token
(printable ASCII, no spaces, at most 128 characters), else a new random one. It is sent back in
the call's trailing metadata (also when the call fails) and is in every log record written while
the call runs (`request_id`), so one id ties a client's error to the server's lines.

What is logged of an RPC (logger "leaseq.access", one record when it ends): the method, status
code, duration, peer address, queue name and request id. Never message bodies, attributes,
receipts, metadata or tokens, and not the status details (they may echo request values).
Levels: OK and CANCELLED at DEBUG, server faults (INTERNAL, UNKNOWN, DATA_LOSS) at WARNING,
other codes at INFO.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import os
import re
import secrets
import sys
import time
from typing import IO, Any, cast

import grpc
import grpc.aio

from .errors import clip
from .interceptors import Observation, ObservedHandlers, Start

REQUEST_ID_KEY = "x-request-id"
_VALID_REQUEST_ID = re.compile(r"^[!-~]{1,128}$")  # printable ASCII, no space

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "leaseq_request_id", default=None
)

access_log = logging.getLogger("leaseq.access")

_SERVER_FAULTS = frozenset(
    {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS}
)
_QUIET = frozenset({grpc.StatusCode.OK, grpc.StatusCode.CANCELLED})


def current_request_id() -> str | None:
    """The request id of the RPC this code runs in, if any."""
    return request_id_var.get()


def request_id_from(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == REQUEST_ID_KEY and isinstance(value, str) and _VALID_REQUEST_ID.match(value):
            return value
    return new_request_id()


class _RequestIds:
    """New request ids: 32 hex digits, a random half per process and a counter, so that a call
    costs no system call for randomness (an id must be unique, not secret). A forked worker
    draws its own random half."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._prefix = secrets.token_hex(8)
        self._count = itertools.count(secrets.randbits(32))

    def new(self) -> str:
        return f"{self._prefix}{next(self._count) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


_request_ids = _RequestIds()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_request_ids.reset)


def new_request_id() -> str:
    return _request_ids.new()


# --- the interceptor ----------------------------------------------------------------------------


class _TaggedContext:
    """The call's context with the request id kept in the trailers of an abort too: grpc's abort
    with trailing metadata (abort_with_status carries google.rpc details that way) replaces the
    trailers set before."""

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any], request_id: str) -> None:
        self._context = context
        self._tag = ((REQUEST_ID_KEY, request_id),)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def set_trailing_metadata(self, metadata: Any) -> None:
        self._context.set_trailing_metadata(tuple(metadata) + self._tag)

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()
    ) -> None:
        await self._context.abort(code, details, tuple(trailing_metadata) + self._tag)

    async def abort_with_status(self, status: Any) -> None:
        await self.abort(status.code, status.details, status.trailing_metadata)


class _Access(Observation):
    def __init__(
        self, context: grpc.aio.ServicerContext[Any, Any], service: str, method: str, request: Any
    ) -> None:
        self.request_id = request_id_from(context.invocation_metadata())
        self._token = request_id_var.set(self.request_id)
        context.set_trailing_metadata(((REQUEST_ID_KEY, self.request_id),))
        super().__init__(
            cast("grpc.aio.ServicerContext[Any, Any]", _TaggedContext(context, self.request_id))
        )
        # Read now: `end` may run when grpc is about to release the call, and the context's
        # peer() of a released call reads freed memory (interceptors' module docstring).
        self.peer = context.peer()
        self.service = service
        self.method = method
        self.queue = clip(_queue_of(request))  # not checked yet: any length
        self.started = time.perf_counter()

    def end(self, code: grpc.StatusCode) -> None:
        try:
            if code in _QUIET:
                level = logging.DEBUG
            elif code in _SERVER_FAULTS:
                level = logging.WARNING
            else:
                level = logging.INFO
            if access_log.isEnabledFor(level):
                duration_ms = round((time.perf_counter() - self.started) * 1000, 3)
                fields: dict[str, Any] = {
                    "rpc_service": self.service,
                    "rpc_method": self.method,
                    "rpc_code": code.name,
                    "duration_ms": duration_ms,
                    "peer": self.peer,
                }
                if self.queue:
                    fields["queue"] = self.queue
                access_log.log(
                    level, "%s %s %.1fms", self.method, code.name, duration_ms, extra=fields
                )
        finally:
            try:
                request_id_var.reset(self._token)
            except (ValueError, RuntimeError):  # ended in another context: nothing to restore
                pass


def _queue_of(request: Any) -> str:
    """The queue a QueueService request names (`queue`, or `name` for queue RPCs)."""
    for field in ("queue", "name"):
        value = getattr(request, field, None)
        if isinstance(value, str):
            return value
    return ""


class RequestLogInterceptor(grpc.aio.ServerInterceptor):
    """Request ids and the access log for every RPC (see the module docstring). Put it first
    (outermost), so the id is set before any other interceptor or the handler logs."""

    def __init__(self) -> None:
        self._observed = ObservedHandlers(self._start_for)

    @staticmethod
    def _start_for(service: str, method: str) -> Start:
        def start(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Observation:
            return _Access(context, service, method, request)

        return start

    async def intercept_service(
        self,
        continuation: Any,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        return self._observed.get(handler_call_details.method, handler)


# --- formats (for the application: `leaseq serve`) ----------------------------------------------

# Attributes every LogRecord has; anything else was passed with extra= and goes into the JSON.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)


class RequestIdFilter(logging.Filter):
    """Adds `request_id` (the current RPC's, or None) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True


def _timestamp(created: float) -> str:
    seconds = time.gmtime(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", seconds) + f".{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC), level, logger, message, request_id when in an
    RPC, the record's extra fields, and the traceback as `exception`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            entry["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key != "request_id" and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """For a terminal: `time LEVEL logger: message [request_id=...]`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        request_id = getattr(record, "request_id", None)
        if request_id:
            first, newline, rest = text.partition("\n")
            text = f"{first} [request_id={request_id}]{newline}{rest}"
        return text


def configure_logging(
    level: str = "info", fmt: str = "auto", stream: IO[str] | None = None
) -> None:
    """Route every log record to stream (stderr) in fmt: "json", "text", or "auto" (JSON unless
    the stream is a terminal). For applications only; replaces the root logger's handlers."""
    stream = stream if stream is not None else sys.stderr
    if fmt == "auto":
        isatty = getattr(stream, "isatty", None)
        fmt = "text" if isatty is not None and isatty() else "json"
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric)
    # debug is for leaseq's own records: grpc and asyncio would add a line per event loop step.
    for noisy in ("grpc", "asyncio"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.INFO))
    logging.captureWarnings(True)
