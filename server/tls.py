"""TLS for the gRPC port: server credentials from PEM files, checked before the port opens.

`ssl` (stdlib) loads the files first, so a key that does not match its certificate, or a file
that is not PEM, fails at start with a clear message instead of as handshake errors later.
With a client CA, client certificates are required and verified (mutual TLS); which principal a
certificate stands for is `auth`'s business.

Certificates are read once, at start: rotate them by restarting (a rolling restart behind a
load balancer, or the StatefulSet's).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc


@dataclass(frozen=True)
class TLSFiles:
    """The server's certificate and key, and the CA of client certificates (mutual TLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read the {what} {str(path)!r}: {e.strerror or e}") from None


def check_files(files: TLSFiles) -> None:
    """ValueError unless cert and key are a matching PEM pair and client_ca is PEM certificates."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(files.cert), str(files.key))
    except (ssl.SSLError, OSError) as e:
        raise ValueError(
            f"TLS certificate {str(files.cert)!r} and key {str(files.key)!r} do not load as a "
            f"matching PEM pair: {e}"
        ) from None
    if files.client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(files.client_ca))
        except (ssl.SSLError, OSError) as e:
            raise ValueError(
                f"TLS client CA {str(files.client_ca)!r} is not a PEM certificate file: {e}"
            ) from None


def server_credentials(files: TLSFiles) -> grpc.ServerCredentials:
    """Credentials for `server.add_secure_port`; mutual TLS when files.client_ca is set."""
    check_files(files)
    cert = _read(files.cert, "TLS certificate")
    key = _read(files.key, "TLS key")
    client_ca = _read(files.client_ca, "TLS client CA") if files.client_ca is not None else None
    return grpc.ssl_server_credentials(
        [(key, cert)],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )
