"""Reading a request body within bounds: a size limit per request, a deadline that a stalled or
trickling body misses, and one byte budget for every body the HTTP ports hold at once
(http_limits.py says why and the defaults).

A body's reservation in the budget is held until its request is answered (`release`, called by
the site's middleware), because the handler keeps the bytes (and what it parses from them)
until then.
"""

from __future__ import annotations

import asyncio
from typing import cast

from aiohttp import web

from ..budget import ByteBudget, Reservation
from .http_limits import BODY_MIN_RATE, HttpLimits
from .http_refusal import BODY_TIMEOUT, BUSY, TOO_LARGE, HttpRefusal

BODY_LIMIT = "leaseq.body_limit"
"""A request's key for the most its body may hold, where a front end sets it per request."""
_RESERVATION = "leaseq.body_reservation"
_BODY = "leaseq.body"


class BodyReader:
    def __init__(self, limits: HttpLimits, min_rate: float = BODY_MIN_RATE) -> None:
        self.budget = ByteBudget(limits.body_bytes)
        self.grace = limits.body_timeout
        self.min_rate = min_rate

    async def read(self, request: web.Request, limit: int) -> bytes:
        """The whole body (decompressed, as aiohttp gives it), at most limit bytes; HttpRefusal
        when it is larger, too slow, or the budget stays full."""
        if _BODY in request:
            return cast(bytes, request[_BODY])
        too_large = HttpRefusal(TOO_LARGE, f"Request bodies are at most {limit} bytes.", limit)
        declared = request.content_length
        if declared is not None and declared > limit:
            raise too_large
        if declared == 0 or not request.body_exists:
            return b""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            reservation = await asyncio.wait_for(
                self.budget.reserve(declared if declared is not None else limit), self.grace
            )
        except TimeoutError:
            raise HttpRefusal(
                BUSY, "The server is reading too many request bodies at once: retry later."
            ) from None
        request[_RESERVATION] = reservation
        chunks: list[bytes] = []
        total = 0
        while True:
            # The first `grace` seconds are free, then the body must keep up with min_rate.
            wait = started + self.grace + total / self.min_rate - loop.time()
            try:
                chunk = await asyncio.wait_for(request.content.readany(), max(wait, 0.001))
            except TimeoutError:
                _drop_after_answer(request)
                raise HttpRefusal(
                    BODY_TIMEOUT,
                    f"The request body did not arrive in time ({total} bytes in "
                    f"{loop.time() - started:.0f} s).",
                ) from None
            if not chunk:
                break
            total += len(chunk)
            if total > limit:  # chunked, or a compressed body that grew
                raise too_large
            chunks.append(chunk)
        body = b"".join(chunks)
        reservation.resize(len(body))
        request[_BODY] = body
        return body


BODIES = web.AppKey("leaseq.http_bodies", BodyReader)


def _drop_after_answer(request: web.Request) -> None:
    """Close the connection once the answer is out, without reading the rest of the body first
    (aiohttp would read and drop it for up to 10 s, so that a client still sending sees the
    answer: right after an early 413, not for a body that stalled)."""
    request.content.feed_eof()  # nothing more is read into it
    request.protocol.close()  # no next request on this connection: it closes after the answer


def release(request: web.Request) -> None:
    """Give back what the request's body holds in the budget (its answer is out)."""
    reservation: Reservation | None = request.get(_RESERVATION)
    if reservation is not None:
        reservation.release()


async def read_body(request: web.Request, limit: int) -> bytes:
    """`BodyReader.read` with the reader of the request's site."""
    global _default
    reader = request.app.get(BODIES)
    if reader is None:  # an application served without HttpSite (unit use)
        reader = _default = _default or BodyReader(HttpLimits())
    return await reader.read(request, limit)


_default: BodyReader | None = None
