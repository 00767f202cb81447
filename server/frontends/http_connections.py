"""The connections of the HTTP ports: one cap for all of them, a deadline for each request's
headers, a bound on their bytes (http_limits.py says why and the defaults).

aiohttp offers no header deadline, no total header size and no connection cap, so its request
handler (`web.RequestHandler`, the asyncio protocol of one connection) is subclassed here:

- the cap is taken when the connection is accepted: a refused one is aborted (RST) at once,
  before it costs more than its file descriptor for a moment. Under TLS the count is taken by
  the TLS protocol that wraps the handler, so handshakes in progress count too;
- a connection is in its header phase from its start, and again from the first byte after a
  request's body once that request is answered, until aiohttp's parser has a whole request line
  and headers (its request count goes up). The bytes of that phase count against
  MAX_HEADER_BYTES, and it must end within header_timeout; else the connection is closed (a 431
  for too many bytes; nothing for a deadline: a client that sends nothing gets nothing).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import sslproto
from typing import Any, cast

from aiohttp import web

from .http_limits import MAX_HEADER_BYTES, REFUSAL_LOG_INTERVAL
from .throttled_log import ThrottledLog

log = logging.getLogger("leaseq.server.http")

_TOO_LARGE_TEXT = b"Request headers are too large.\r\n"
_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
    % (len(_TOO_LARGE_TEXT), _TOO_LARGE_TEXT)
)


class ConnectionGate:
    """Counts the open connections of every HTTP port of one server (one event loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.peak = 0
        self.refused = 0
        self._log = ThrottledLog(log, REFUSAL_LOG_INTERVAL)

    def admit(self) -> bool:
        if self.open >= self.limit:
            self.refused += 1
            self._log.warning(
                "HTTP connection refused: %d connections are open on the HTTP ports, the limit "
                "(--http-max-connections)",
                self.open,
            )
            return False
        self.open += 1
        self.peak = max(self.peak, self.open)
        return True

    def leave(self) -> None:
        self.open -= 1


class GuardedHandler(web.RequestHandler):
    """aiohttp's handler of one connection, with the cap and the header phase (module doc)."""

    def __init__(
        self,
        manager: web.Server,
        *,
        loop: asyncio.AbstractEventLoop,
        gate: ConnectionGate | None,
        header_timeout: float,
        **options: Any,
    ) -> None:
        super().__init__(manager, loop=loop, **options)
        self._gate = gate  # None: the TLS protocol around this handler counts
        self._admitted = False
        self._refused = False
        self._header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._in_requests = 0  # requests whose headers are in and whose answer is not out
        self._last_body: Any = None  # the payload of the last answered request

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._gate is not None:
            if not self._gate.admit():
                self._refused = True
                cast(asyncio.Transport, transport).abort()
                return
            self._admitted = True
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._refused:
            return
        self._disarm()
        if self._admitted:
            self._admitted = False
            assert self._gate is not None
            self._gate.leave()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        before = self._request_count
        super().data_received(data)
        if self._request_count > before:  # the parser has a whole request line and headers
            self._in_requests += self._request_count - before
            self._header_bytes = 0
            self._disarm()
            return
        if self._in_requests or not data:
            return  # a body's bytes
        if self._last_body is not None and not self._last_body.is_eof():
            return  # the rest of a body answered early (aiohttp reads and drops it)
        self._header_bytes += len(data)
        if self._header_bytes > MAX_HEADER_BYTES:
            self._close_now(_TOO_LARGE)
            return
        self._arm()

    def request_done(self, body: Any) -> None:
        """The site's middleware: a request's answer is out; the bytes after its body (the
        request's StreamReader) are the next request's headers."""
        self._in_requests = max(0, self._in_requests - 1)
        self._last_body = body

    def _arm(self) -> None:
        if self._header_timer is None and self.transport is not None:
            self._header_timer = self._loop.call_later(self._header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expired(self) -> None:
        self._header_timer = None
        if self._in_requests == 0:
            self._close_now(None)

    def _close_now(self, answer: bytes | None) -> None:
        self._disarm()
        transport = self.transport
        if transport is None:
            return
        if answer is not None:
            transport.write(answer)
            transport.close()  # after the answer is written
        else:
            transport.abort()
        self.force_close()


class CountedTLS(sslproto.SSLProtocol):
    """asyncio's TLS protocol around a connection's handler, taking the gate's count from the
    moment the connection is accepted (a handshake that never finishes counts, and ends at the
    handshake timeout)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        handler: GuardedHandler,
        context: ssl.SSLContext,
        gate: ConnectionGate,
        handshake_timeout: float,
    ) -> None:
        # No waiter (CPython's own server path passes one only to learn of the handshake's end),
        # and a float timeout, which CPython takes although the stubs say int.
        super().__init__(
            loop,
            handler,
            context,
            None,  # type: ignore[arg-type]
            server_side=True,
            ssl_handshake_timeout=handshake_timeout,  # type: ignore[arg-type]
        )
        self._gate = gate
        self._admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._gate.admit():
            cast(asyncio.Transport, transport).abort()
            return
        self._admitted = True
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._admitted:
            return
        self._admitted = False
        self._gate.leave()
        super().connection_lost(exc)
