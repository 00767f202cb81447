"""What every HTTP dialect's front end (SQS, Azure) has in common: the core it calls, the auth
policy, the metrics, one catch-all aiohttp handler, the checks of the shared HTTP layer (Host
and cross-site: http_origin.py; bodies within bounds: http_body.py), and its listener's start
and stop."""

from __future__ import annotations

from aiohttp import web

from ..auth import FixedPolicy, PolicyFile
from ..core import QueueCore
from ..metrics import Metrics
from . import http_origin
from .http_body import read_body
from .http_site import HttpShared, HttpSite


class DialectFrontend:
    """Subclasses set DEFAULT_PORT and MAX_REQUEST_BYTES, implement `handle`, and make their own
    state in `_setup`."""

    DEFAULT_PORT = 0
    MAX_REQUEST_BYTES = 10 * 1024 * 1024

    def __init__(
        self,
        core: QueueCore,
        policy: PolicyFile | FixedPolicy | None = None,
        *,
        max_request_bytes: int | None = None,
        metrics: Metrics | None = None,
        http: HttpShared | None = None,
    ) -> None:
        self.core = core
        self.http = http or HttpShared()
        self.policy = policy
        self.metrics = metrics
        self.max_request_bytes = max_request_bytes or self.MAX_REQUEST_BYTES
        self.port = 0
        self._site: HttpSite | None = None
        self._setup()

    def _setup(self) -> None:
        """The dialect's own state (subclasses)."""

    async def handle(self, request: web.Request) -> web.Response:
        raise NotImplementedError

    def check_origin(self, request: web.Request) -> None:
        """HttpRefusal for a cross-site request or (no policy) a Host this server does not
        answer to; every method counts as unsafe (http_origin.py says why)."""
        http_origin.check(
            request,
            open_access=self.policy is None,
            allowed_hosts=self.http.limits.allowed_hosts,
        )

    async def read_body(self, request: web.Request) -> bytes:
        """The body within the shared bounds; HttpRefusal when over them (http_body.py)."""
        return await read_body(request, self.max_request_bytes)

    def application(self) -> web.Application:
        # client_max_size one byte above our limit: the handler reads the body itself and
        # answers an oversized one in its dialect's shape (aiohttp's own 413 would be plain text).
        app = web.Application(client_max_size=self.max_request_bytes + 1)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def start(self, listen: str, reuse_port: bool = False) -> int:
        """Listen on "host:port" (port 0: a free one); OSError when the address is taken.
        reuse_port: shared with the other workers of `serve --workers N` (server/workers.py)."""
        self._site = HttpSite(self.application(), shared=self.http)
        self.port = await self._site.start(listen, self.DEFAULT_PORT, reuse_port=reuse_port)
        return self.port

    async def stop(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None
