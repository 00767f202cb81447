"""One line for a failed call: the server's message, or for a connection that could not be made,
what probably went wrong and what to try (gRPC's own text names sockets and TLS internals).

Example::

    describe(error, "127.0.0.1:50051")
    # "no leaseq server answers at 127.0.0.1:50051 (connection refused): is leaseq serve running?"
"""

from __future__ import annotations

import grpc

from leaseq.client import LeaseqError

# (text in gRPC's message, what it means): the first that matches wins. These are the transport's
# messages for a channel that never connected; a server's own UNAVAILABLE (draining, store down)
# has none of them and is shown as it is.
_CONNECT_FAILURES: list[tuple[str, str]] = [
    (
        "Connection refused",
        "no leaseq server answers at {target} (connection refused): is leaseq serve running?",
    ),
    (
        "WRONG_VERSION_NUMBER",
        "{target} does not speak TLS (the TLS handshake failed): drop --tls/--tls-ca for a "
        "plaintext server",
    ),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "the TLS certificate of {target} is not trusted ({why}): give its CA with --tls-ca",
    ),
    (
        "not in peer certificate",
        "the TLS certificate of {target} does not name that host: connect by a name it has",
    ),
    ("Tls handshake failed", "the TLS handshake with {target} failed ({why})"),
    (
        "Socket closed",
        "{target} closed the connection at once: if the server uses TLS, add --tls (and --tls-ca)",
    ),
    (
        "Connection reset",
        "{target} closed the connection at once: if the server uses TLS, add --tls (and --tls-ca)",
    ),
    ("Timeout occurred", "no answer from {target} (connection timed out)"),
    ("timed out", "no answer from {target} (connection timed out)"),
    ("No route to host", "no route to {target}"),
    ("Domain name not found", "cannot resolve the host of {target} (no such name)"),
    ("errors resolving", "cannot resolve the host of {target}"),
    ("DNS resolution failed", "cannot resolve the host of {target}"),
]

# Why a TLS verification failed, in OpenSSL's words, e.g. "unable to get local issuer certificate".
_VERIFY_REASONS = (
    "unable to get local issuer certificate",
    "self signed certificate",
    "self-signed certificate",
    "certificate has expired",
)


def describe(error: LeaseqError, target: str | None) -> str:
    """The line to print for ``error`` (without the ``Error:`` prefix click adds)."""
    details = error.details or ""
    if error.code is grpc.StatusCode.UNAVAILABLE and target:
        for marker, text in _CONNECT_FAILURES:
            if marker in details:
                why = next((r for r in _VERIFY_REASONS if r in details), marker)
                return text.format(target=target, why=why)
    return f"{details or error.code.name} ({error.code.name})"
