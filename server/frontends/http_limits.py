"""The limits every HTTP port (SQS, Azure, the web console) shares, with their defaults.

What a client that has not authenticated can make the server hold is bounded here, before any
dialect parses a byte (docs/security.md has the table with the flags):

- connections: at most `max_connections` open at once across all HTTP ports of the process; the
  next one is closed as soon as it is accepted (as the gRPC port's cap does, limits.py), and the
  refusal is logged once per REFUSAL_LOG_INTERVAL, not once per connection. `fit_to_fd_limit`
  keeps this cap and gRPC's together below the file-descriptor limit, so the gRPC port and its
  health checks keep file descriptors while the HTTP ports are full;
- time: a new connection (and each request on a kept-alive one) must deliver its request
  headers within `header_timeout` (a TLS handshake too); a kept-alive connection with no request
  for `idle_timeout` is closed (aiohttp's own default is 3,630 s);
- headers: at most MAX_HEADER_BYTES in all, MAX_HEADERS fields, MAX_FIELD_BYTES per line;
- bodies: each dialect reads at most its own largest request (a few KiB for a console sign-in),
  it must arrive within `body_timeout` plus one second per BODY_MIN_RATE bytes received (a
  stalled or trickling body is answered 408 and its connection closed), and all bodies being
  read or handled at once across the HTTP ports hold at most `body_bytes`
  (`server.budget.ByteBudget`): the next body waits for room, up to `body_timeout`, then 503.
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB

MAX_CONNECTIONS = 4096
IDLE_TIMEOUT = 60.0
HEADER_TIMEOUT = 10.0
BODY_TIMEOUT = 10.0
BODY_BYTES = 64 * MIB

MAX_HEADER_BYTES = 64 * KIB
"""Request line and headers of one request (SigV4 and SharedKey requests carry about 1 KiB;
browsers 2-4 KiB; nginx's default buffers hold 32 KiB)."""
MAX_HEADERS = 100
MAX_FIELD_BYTES = 8190
"""One header line, and the request line (aiohttp's default, Apache's and nginx's 8 KiB)."""
BODY_MIN_RATE = 256 * KIB
"""Bytes per second a body must keep arriving at once its first `body_timeout` is over."""
REFUSAL_LOG_INTERVAL = 10.0
"""At most one log record per this many seconds for connections refused over a cap."""


@dataclass(frozen=True)
class HttpLimits:
    max_connections: int = MAX_CONNECTIONS
    """Connections open at once across all HTTP ports; more are closed when accepted."""
    idle_timeout: float = IDLE_TIMEOUT
    """Seconds a kept-alive connection may wait for its next request."""
    header_timeout: float = HEADER_TIMEOUT
    """Seconds for a request's headers (and a new connection's TLS handshake)."""
    body_timeout: float = BODY_TIMEOUT
    """Seconds a body may take before it must keep arriving at BODY_MIN_RATE."""
    body_bytes: int = BODY_BYTES
    """Bytes of request bodies read or being read at once across all HTTP ports."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names accepted without an auth policy besides loopback and IP literals ("*": any)."""

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError("HTTP max connections must be at least 1")
        if self.body_bytes < 1:
            raise ValueError("the HTTP body budget needs at least one byte")
        for name in ("idle_timeout", "header_timeout", "body_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"HTTP {name.replace('_', ' ')} must be above 0")
