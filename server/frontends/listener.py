"""Serving an aiohttp application on the server's own event loop: what every HTTP front end
(SQS, Azure, the console) needs to start and stop its listener, written once."""

from __future__ import annotations

from aiohttp import web

from ..addresses import parse_listen


class HttpListener:
    """One aiohttp application on one "host:port"; `start` then `stop`."""

    def __init__(self) -> None:
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self, app: web.Application, listen: str, default_port: int) -> int:
        """Listen on "host:port" (port 0: a free one); OSError when the address is taken."""
        address = parse_listen(listen, default_port)
        # handler_cancellation: a client that hangs up during a long poll cancels it (as a
        # cancelled gRPC call does), so it does not lease messages for nobody when one arrives.
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, address.host, address.port, backlog=1024)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            self._runner = None
            raise
        self.port = self._runner.addresses[0][1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
