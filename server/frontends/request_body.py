"""Reading a request's body when its Content-Encoding (gzip, deflate, br) does not decode.

aiohttp decompresses a body as it arrives; garbage under `Content-Encoding: gzip` makes
`request.read()` raise RequestPayloadError, which a front end must answer as bad input (a 400 in
its own error shape), not as a server fault. One more step is needed for that to stay quiet: the
parser stops at the bad bytes, so the payload never ends, and after the answer aiohttp would try
to drain it and log the same error again as an unhandled exception. `read` therefore ends the
payload and has the connection closed once the answer is sent (its remaining bytes are not HTTP
this server can parse); the front end passes its answer through `close_if_needed`, which says so
in the answer (Connection: close), so that a client does not send its next request into it."""

from __future__ import annotations

from typing import TypeVar

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from .http_body import read_body

Response = TypeVar("Response", bound=web.StreamResponse)

_CLOSE = "leaseq.close_connection"


class UndecodableBody(Exception):
    """The body does not decode as its Content-Encoding says."""


async def read(request: web.Request, limit: int) -> bytes:
    """The whole body, decoded, within the shared bounds (http_body.read_body: at most limit
    bytes, a deadline, the body budget; its HttpRefusal passes through); UndecodableBody when it
    does not decode."""
    try:
        return await read_body(request, limit)
    except RequestPayloadError:
        request.content.feed_eof()  # nothing more will be read from it
        request.protocol.close()  # close the connection after this request's answer
        request[_CLOSE] = True
        raise UndecodableBody(
            f"the body does not decode as its Content-Encoding "
            f"({request.headers.get('Content-Encoding', '')[:40]}) says"
        ) from None


def close_if_needed(request: web.Request, response: Response) -> Response:
    if request.get(_CLOSE):
        response.force_close()
    return response
