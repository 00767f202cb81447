"""Serve an aiohttp application on the gRPC server's own event loop: the listener part shared by
the HTTP front ends (SQS, Azure, the web console).

Why one helper: each front end needs the same start/stop dance (an AppRunner without aiohttp's
access log, which could print request lines with tokens in query strings, and without its signal
handlers, which belong to `leaseq serve`; a listener that is cleaned up when binding fails; the
port actually bound, for ":0"), and the same limits (http_limits.py): the ports of one server
share one `HttpShared` (its connection cap, its body budget, its TLS context).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..addresses import parse_listen
from . import http_body
from .http_connections import ConnectionGate, CountedTLS, GuardedHandler
from .http_limits import MAX_FIELD_BYTES, MAX_HEADERS, HttpLimits

BACKLOG = 1024


class HttpShared:
    """What every HTTP port of one server shares."""

    def __init__(self, limits: HttpLimits | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.limits = limits or HttpLimits()
        self.tls = tls
        self.gate = ConnectionGate(self.limits.max_connections)
        self.bodies = http_body.BodyReader(self.limits)

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def handler_options(self) -> dict[str, Any]:
        return {
            "keepalive_timeout": self.limits.idle_timeout,
            "max_line_size": MAX_FIELD_BYTES,
            "max_field_size": MAX_FIELD_BYTES,
            "max_headers": MAX_HEADERS,
        }


@web.middleware
async def _request_bounds(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Outermost: when the answer is out, the body's budget goes back and the connection's next
    bytes are a new request's headers (http_connections.GuardedHandler)."""
    try:
        return await handler(request)
    finally:
        http_body.release(request)
        protocol = request.protocol
        if isinstance(protocol, GuardedHandler):
            protocol.request_done(request.content)


class _Site(web.BaseSite):
    """An aiohttp site whose connections are GuardedHandlers (wrapped in TLS when set)."""

    __slots__ = ("_host", "_port", "_reuse_port", "_shared")

    def __init__(
        self, runner: web.AppRunner, shared: HttpShared, host: str, port: int, reuse_port: bool
    ) -> None:
        super().__init__(runner, backlog=BACKLOG)
        self._shared = shared
        self._host, self._port, self._reuse_port = host, port, reuse_port

    @property
    def name(self) -> str:
        return f"{self._shared.scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        shared = self._shared
        server = self._runner.server
        assert server is not None
        # The runner's handler arguments, as aiohttp's own Server.__call__ passes them: the shared
        # limits (handler_options) and access_log=None (aiohttp's access log would print request
        # lines, with tokens in their query strings).
        options = server._kwargs
        header_timeout = shared.limits.header_timeout

        def connection() -> asyncio.BaseProtocol:
            counted = shared.tls is None
            handler = GuardedHandler(
                server,
                loop=loop,
                gate=shared.gate if counted else None,
                header_timeout=header_timeout,
                **options,
            )
            if counted:
                return handler
            assert shared.tls is not None
            return CountedTLS(loop, handler, shared.tls, shared.gate, header_timeout)

        self._server = await loop.create_server(
            connection,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_port=self._reuse_port or None,
        )


class HttpSite:
    """One aiohttp application listening on one address; `start` then `stop`."""

    def __init__(
        self,
        app: web.Application,
        *,
        shared: HttpShared | None = None,
        handler_cancellation: bool = True,
    ) -> None:
        # handler_cancellation: a client that hangs up cancels its handler (a long poll then
        # does not lease messages for nobody, as a cancelled gRPC call does not).
        self._app = app
        self._shared = shared or HttpShared()
        self._handler_cancellation = handler_cancellation
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, listen: str, default_port: int, reuse_port: bool = False) -> int:
        """Listen on "host:port" (port 0: a free one); OSError when the address is taken.
        reuse_port: the address is shared with the other workers of `serve --workers N`
        (server/workers.py); otherwise a busy address fails."""
        address = parse_listen(listen, default_port)
        self._app.middlewares.insert(0, _request_bounds)
        self._app[http_body.BODIES] = self._shared.bodies
        runner = web.AppRunner(
            self._app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=self._handler_cancellation,
            **self._shared.handler_options(),
        )
        await runner.setup()
        site = _Site(runner, self._shared, address.host, address.port, reuse_port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
