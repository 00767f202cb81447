"""A request the shared HTTP layer refuses before a dialect handles it; each dialect answers it
in its own error shape (SQS, Azure XML, the console's JSON) with `status`."""

from __future__ import annotations

TOO_LARGE = "too_large"  # 413: the body is above the dialect's limit for this request
BODY_TIMEOUT = "body_timeout"  # 408: the body stalled or trickled
BUSY = "busy"  # 503: the shared body budget stayed full (retry)
CROSS_SITE = "cross_site"  # 403: a browser sent it from another site
HOST_NOT_ALLOWED = "host_not_allowed"  # 403: a Host name this server does not answer to

STATUS = {TOO_LARGE: 413, BODY_TIMEOUT: 408, BUSY: 503, CROSS_SITE: 403, HOST_NOT_ALLOWED: 403}


class HttpRefusal(Exception):
    def __init__(self, reason: str, message: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = STATUS[reason]
        self.limit = limit  # TOO_LARGE: the limit in bytes
