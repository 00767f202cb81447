"""What ``QueueClient`` and ``AsyncQueueClient`` share (``leaseq.client.client``): TLS settings and
the settings both derive from their constructor arguments (target, credentials, channel options,
timeouts and the retry pacing).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc

from ._wire import MAX_MESSAGE_SIZE, Call
from .errors import LeaseqError
from .retry import NO_RETRY, RetryPolicy
from .target import parse_target
from .types import VisibilityChange

T = TypeVar("T")

DEFAULT_TARGET = "127.0.0.1:50051"
"""Where ``leaseq serve`` listens by default."""

log = logging.getLogger("leaseq.client")

ChannelOptions = Sequence[tuple[str, Any]]
VisibilityEntries = Iterable[VisibilityChange | tuple[Any, ...]]


@dataclass(frozen=True)
class TLSConfig:
    """TLS settings of a client's channel.

    Attributes:
        root_certificates: PEM of the CA(s) to trust; None trusts the system's roots.
        certificate_chain: PEM client certificate, for mutual TLS.
        private_key: PEM key of the client certificate.
        server_name: the name to check the server's certificate against, when it differs from
            the target's host (e.g. connecting by IP address).

    Example::

        QueueClient("queue.internal:50051", tls=TLSConfig.from_files(ca="ca.pem"))
    """

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    server_name: str | None = None

    @classmethod
    def from_files(
        cls,
        *,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        server_name: str | None = None,
    ) -> TLSConfig:
        """Read the PEM files given (CA, client certificate, client key).

        Raises ``OSError`` for a file that cannot be read and ``ValueError`` for one that is not
        PEM, at once (gRPC would only fail at the first connection, with a vaguer error)."""

        def read(path: str | Path | None) -> bytes | None:
            return read_pem(path) if path is not None else None

        return cls(read(ca), read(cert), read(key), server_name)

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )


TLSLike = bool | TLSConfig | None


def read_pem(path: str | Path) -> bytes:
    """The bytes of a PEM file; ``ValueError`` when it holds no PEM block (e.g. a DER file or a
    path mixed up with another)."""
    data = Path(path).read_bytes()
    if b"-----BEGIN " not in data:
        raise ValueError(f"{path} is not a PEM file (no '-----BEGIN' line)")
    return data


class Settings:
    """What both clients derive from their constructor arguments."""

    def __init__(
        self,
        target: str,
        token: str | None,
        tls: TLSLike,
        retry: RetryPolicy | None,
        timeout: float | None,
        options: ChannelOptions,
    ) -> None:
        self.target = parse_target(target)
        self.retry = retry_policy = retry if retry is not None else NO_RETRY
        self.timeout = timeout
        self.metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        tls_config = TLSConfig() if tls is True else tls or None
        self.credentials = tls_config.credentials() if tls_config else None
        channel_options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", MAX_MESSAGE_SIZE),
            ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
            # After a failed connect gRPC waits before it tries again (1 s growing to 120 s by
            # default) and fails every call at once meanwhile, which would make our retries
            # useless; keep its reconnect backoff in step with the retry policy instead.
            ("grpc.initial_reconnect_backoff_ms", max(10, int(retry_policy.initial_backoff * 1e3))),
            ("grpc.max_reconnect_backoff_ms", max(100, int(retry_policy.max_backoff * 1e3))),
        ]
        if tls_config and tls_config.server_name:
            channel_options.append(("grpc.ssl_target_name_override", tls_config.server_name))
        # Later options win in gRPC, so a caller's options override ours.
        channel_options.extend(options)
        self.channel_options = tuple(channel_options)

    def timeout_for(self, call: Call) -> float | None:
        return None if self.timeout is None else self.timeout + call.extra_timeout

    def delay_before_retry(self, call: Call, attempts: int, error: LeaseqError) -> float | None:
        if not call.retry:
            return None
        delay = self.retry.delay(attempts, error)
        if delay is not None:
            log.debug(
                "%s failed with %s (attempt %d of %d); retrying in %.3f s",
                call.method,
                error.code.name,
                attempts,
                self.retry.max_attempts,
                delay,
            )
        return delay
