"""TLS for the HTTP ports: the gRPC port's certificate and key (--tls-cert/--tls-key), and with
--tls-client-ca client certificates required and verified (mutual TLS), as on the gRPC port."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from ..tls import check_files

if TYPE_CHECKING:
    from ..tls import TLSFiles


def server_context(files: TLSFiles) -> ssl.SSLContext:
    check_files(files)  # a clear one-line error for a bad pair, before any port opens
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(files.cert), str(files.key))
    context.set_alpn_protocols(["http/1.1"])
    if files.client_ca is not None:
        context.load_verify_locations(cafile=str(files.client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.verify_mode = ssl.CERT_NONE
    return context
