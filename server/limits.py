"""Limits that protect the server before any work is done (the ones not already in validation).

- Request size: gRPC refuses a request over `MAX_GRPC_MESSAGE_BYTES` (64 MiB) with
  RESOURCE_EXHAUSTED before it is parsed. That is far above the largest single entry
  (`LARGEST_ENTRY_BYTES`: an 8 MiB message plus its id, channel and dedup id), so any one message
  the queues accept can be sent and updated; a batch is limited by the sum (and 10,000 entries).
- Connections: at most `max_connections` client connections are open at once on the gRPC port
  (`grpc.max_allowed_incoming_connections`): the next one is closed as soon as it is accepted, so
  a flood of idle connections cannot take every file descriptor and starve new clients. The
  health port (`--health-listen`) is a server of its own with its own small cap
  (HEALTH_MAX_CONNECTIONS): probes keep their answer while the gRPC port is full. A connection
  with no call for `max_connection_idle` seconds is closed (GOAWAY; a client reconnects on its
  next call; a connection with a long poll or follow stream running is never idle), and one that
  has not finished its handshake (HTTP/2 preface, TLS) within HANDSHAKE_TIMEOUT is closed.
  `fit_to_fd_limit` keeps the cap below the process's file-descriptor limit.
- Streams per connection: HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS (`grpc.max_concurrent_streams`,
  default 256): a client's further calls on that connection wait for a free stream.
- Receive streams in total: at most `max_receive_streams` GetMessages calls (long polls and follow
  streams) run at once in this server; the next one is refused with RESOURCE_EXHAUSTED (ErrorInfo
  TOO_MANY_STREAMS, RetryInfo) at once, before it touches the store. A stream frees its slot the
  moment it ends, is cancelled, or its deadline passes (gRPC cancels the handler then).
- Memory of responses (`budget`): one store read of a receive or peek takes at most `call_bytes`
  (8 MiB) plus one message, and is sent before the next one is read; across all calls at most
  `response_bytes` (256 MiB, `leaseq serve --max-response-mib`) of messages are read and not yet
  sent: a call waits for room before it reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, cast

import grpc
import grpc.aio
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from .budget import CALL_BYTES, SERVER_BYTES
from .domain.limits import LARGEST_MESSAGE_BYTES, MAX_ATTEMPT_ID, MAX_CHANNEL, MAX_DEDUP_ID
from .errors import ERROR_DOMAIN
from .service import MAX_GRPC_MESSAGE_BYTES, SERVICE_NAME

LARGEST_ENTRY_BYTES = LARGEST_MESSAGE_BYTES + MAX_CHANNEL + MAX_DEDUP_ID + MAX_ATTEMPT_ID + 4096
"""An upper bound of one SendEntry / UpdateMessage request at the largest message size (framing
and the entry id included, for ids up to a few KiB)."""

assert MAX_GRPC_MESSAGE_BYTES >= LARGEST_ENTRY_BYTES, "one largest message must fit a request"

GET_MESSAGES = f"/{SERVICE_NAME}/GetMessages"
RETRY_AFTER = 1.0

MAX_CONNECTIONS = 10_000
MAX_CONNECTION_IDLE = 300.0
HANDSHAKE_TIMEOUT = 20.0
"""Seconds for a new connection's handshake (gRPC's default is 120)."""
HEALTH_MAX_CONNECTIONS = 256
"""Connections on the health port: probes open one at a time, or hold one each."""
RESERVED_FDS = 1024
"""File descriptors kept for everything but the gRPC port's connections: the store (a SQLite
file and its WAL, or a PostgreSQL pool), the health and metrics ports and their connections."""


@dataclass(frozen=True)
class Limits:
    max_receive_streams: int = 10_000
    """GetMessages calls running at once in this server."""
    max_streams_per_connection: int = 256
    """Concurrent calls on one client connection (HTTP/2 streams)."""
    max_connections: int = MAX_CONNECTIONS
    """Client connections open at once on the gRPC port; more are closed when accepted."""
    max_connection_idle: float | None = MAX_CONNECTION_IDLE
    """Seconds without a call after which a connection is closed; None or 0: never."""
    call_bytes: int = CALL_BYTES
    """Bytes of messages one store read of a receive or peek takes (plus one message)."""
    response_bytes: int = SERVER_BYTES
    """Bytes of messages read and not yet sent, across all calls; a call waits for room."""

    def server_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_concurrent_streams", self.max_streams_per_connection),
            *connection_limits(self.max_connections, self.max_connection_idle),
        ]

    def health_server_options(self) -> list[tuple[str, int]]:
        return connection_limits(HEALTH_MAX_CONNECTIONS, self.max_connection_idle)


def connection_limits(max_connections: int, idle: float | None) -> list[tuple[str, int]]:
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    options = [
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.server_handshake_timeout_ms", int(HANDSHAKE_TIMEOUT * 1000)),
    ]
    if idle:
        options.append(("grpc.max_connection_idle_ms", max(1, int(idle * 1000))))
    return options


def fit_to_fd_limit(limits: Limits, http_connections: int = 0) -> tuple[Limits, int, str | None]:
    """(limits, http_connections, note): the gRPC port's max_connections and the HTTP ports'
    cap together fitted under RLIMIT_NOFILE (less RESERVED_FDS), and a note for the log when
    they had to change. The soft limit is raised towards the hard one first (as the Go runtime
    does for every program): caps above the limit would let a flood of connections on one port
    take the descriptors the store, the health port and the other ports need. When they must
    shrink, both shrink in proportion."""
    try:
        import resource
    except ImportError:  # not Unix
        return limits, http_connections, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = limits.max_connections + http_connections + RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return limits, http_connections, None
    reserved = min(RESERVED_FDS, soft // 2)
    room = max(2, soft - reserved)
    grpc_share = limits.max_connections / (limits.max_connections + http_connections)
    fitted = max(1, int(room * grpc_share))
    fitted_http = max(1, room - fitted) if http_connections else 0
    note = (
        f"max connections lowered from {limits.max_connections} to {fitted}"
        + (f" (HTTP ports: from {http_connections} to {fitted_http})" if http_connections else "")
        + f": the file descriptor limit is {soft} (ulimit -n), {reserved} of them kept for the rest"
    )
    return replace(limits, max_connections=fitted), fitted_http, note


def _too_many(limit: int) -> status_pb2.Status:
    details = []
    for detail in (
        error_details_pb2.ErrorInfo(
            reason="TOO_MANY_STREAMS", domain=ERROR_DOMAIN, metadata={"limit": str(limit)}
        ),
        error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=int(RETRY_AFTER))),
    ):
        packed = any_pb2.Any()
        packed.Pack(detail)
        details.append(packed)
    return status_pb2.Status(
        code=code_pb2.RESOURCE_EXHAUSTED,
        message=f"the server runs {limit} receive streams, its limit: retry later",
        details=details,
    )


class StreamLimiter(grpc.aio.ServerInterceptor):
    """Counts running GetMessages calls and refuses those over the limit (module docstring).
    Lives on the server's event loop."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("max_receive_streams must be at least 1")
        self.limit = limit
        self.active = 0
        self.peak = 0  # the most that ran at once
        self.started = 0
        self.refused = 0
        self._changed: asyncio.Event | None = None
        self._limited: (
            tuple[grpc.RpcMethodHandler[Any, Any], grpc.RpcMethodHandler[Any, Any]] | None
        ) = None

    def _set(self, active: int) -> None:
        self.active = active
        self.peak = max(self.peak, active)
        if self._changed is not None:  # made only while someone waits: not at every call
            self._changed.set()
            self._changed = None

    async def wait_until(self, predicate: Callable[[int], bool]) -> int:
        """Until predicate(active) holds (tests wait for a cancelled stream's slot this way)."""
        while not predicate(self.active):
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()
        return self.active

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler: grpc.RpcMethodHandler[Any, Any] | None = await continuation(details)
        if details.method != GET_MESSAGES or handler is None or handler.unary_stream is None:
            return handler
        # The same handler at every call unless an inner interceptor makes one per call (auth):
        # its limited twin is made once, not at every call.
        made = self._limited
        if made is not None and made[0] is handler:
            return made[1]
        limited = self._limit(handler)
        self._limited = (handler, limited)
        return limited

    def _limit(self, handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
        behaviour = cast("Callable[..., AsyncGenerator[Any, None]]", handler.unary_stream)

        async def limited(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            if self.active >= self.limit:
                self.refused += 1
                await context.abort_with_status(rpc_status.to_status(_too_many(self.limit)))
            self.started += 1
            self._set(self.active + 1)
            try:
                async with aclosing(behaviour(request, context)) as responses:
                    async for response in responses:
                        yield response
            finally:
                self._set(self.active - 1)

        return grpc.unary_stream_rpc_method_handler(
            limited,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
