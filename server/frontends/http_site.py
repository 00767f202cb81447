"""Serve an aiohttp application on the gRPC server's own event loop: the listener part shared by
the HTTP front ends (SQS, Azure, the web console).

Why one helper: each front end needs the same start/stop dance (an AppRunner without aiohttp's
access log, which could print request lines with tokens in query strings, and without its signal
handlers, which belong to `leaseq serve`; a listener that is cleaned up when binding fails; the
port actually bound, for ":0").
"""

from __future__ import annotations

from aiohttp import web

from ..addresses import parse_listen


class HttpSite:
    """One aiohttp application listening on one address; `start` then `stop`."""

    def __init__(self, app: web.Application, *, handler_cancellation: bool = True) -> None:
        # handler_cancellation: a client that hangs up cancels its handler (a long poll then
        # does not lease messages for nobody, as a cancelled gRPC call does not).
        self._app = app
        self._handler_cancellation = handler_cancellation
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, listen: str, default_port: int, reuse_port: bool = False) -> int:
        """Listen on "host:port" (port 0: a free one); OSError when the address is taken.
        reuse_port: the address is shared with the other workers of `serve --workers N`
        (server/workers.py); otherwise a busy address fails."""
        address = parse_listen(listen, default_port)
        runner = web.AppRunner(
            self._app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=self._handler_cancellation,
        )
        await runner.setup()
        site = web.TCPSite(
            runner, address.host, address.port, backlog=1024, reuse_port=reuse_port or None
        )
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
