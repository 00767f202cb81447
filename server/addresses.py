"""The server's listen addresses: parsed once, checked free before anything is opened.

`parse_listen` turns "HOST:PORT" into a `ListenAddress` or says in one line what is wrong with it
(no port, a port outside 0..65535: gRPC would otherwise wrap 99999 to 34463). `check_free` binds
every address at once, then lets them go, so `leaseq serve` fails with "address HOST:PORT is already
in use" before it opens the store, instead of starting half-way (gRPC alone would even share a
busy port: it sets SO_REUSEPORT, which the server turns off, see app.LISTENER_OPTIONS).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass


class StartupError(RuntimeError):
    """The server cannot start, for a reason the operator can fix; the message is one line."""


class AddressInUse(StartupError):
    def __init__(self, address: ListenAddress) -> None:
        super().__init__(f"address {address} is already in use")
        self.address = address


@dataclass(frozen=True)
class ListenAddress:
    host: str
    """As given, without the brackets of an IPv6 literal."""
    port: int
    """0: the system picks a free port."""
    text: str
    """As given (grpc and messages use it)."""

    def __str__(self) -> str:
        return self.text

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name other than localhost
            return False


def parse_listen(text: str, example_port: int = 50051) -> ListenAddress:
    """ "HOST:PORT" ("[::1]:PORT" for IPv6; port 0 picks a free one); ValueError says why not
    (example_port goes into the examples of the message)."""
    text = text.strip()
    host, colon, port = text.rpartition(":")
    if not colon:
        example = f"127.0.0.1:{text}" if text.isdigit() else f"127.0.0.1:{example_port}"
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. {example})")
    if not (port.isascii() and port.isdigit()):
        raise ValueError(
            f"{text!r} has no port number: give HOST:PORT (e.g. {host or '127.0.0.1'}:{example_port})"
        )
    if not host:
        raise ValueError(
            f"{text!r} has no host: give 127.0.0.1:{port}, or 0.0.0.0:{port} / [::]:{port} for "
            "every interface"
        )
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if "[" in bare or "]" in bare or ":" in bare and bare == host:
        raise ValueError(
            f"{text!r} is not HOST:PORT: write an IPv6 address in brackets, [::1]:50051"
        )
    number = int(port)
    if number > 65535:
        raise ValueError(f"{text!r}: port {number} is outside 1..65535 (0 picks a free one)")
    return ListenAddress(bare, number, text)


def check_free(addresses: Iterable[ListenAddress]) -> None:
    """Raise AddressInUse for the first address some socket listens on already (this process's
    other addresses included: all are held until the last is checked), StartupError for one that
    cannot be bound at all (no such local address, a privileged port, a name that does not
    resolve). Port 0 needs no check. Like gRPC's own listeners the probes set SO_REUSEADDR, so a
    previous run's connections in TIME_WAIT do not count as "in use"."""
    with ExitStack() as held:
        for address in addresses:
            if address.port == 0:
                continue
            for sock in _probe(address):
                held.callback(sock.close)


def _probe(address: ListenAddress) -> list[socket.socket]:
    try:
        infos = socket.getaddrinfo(
            address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as error:
        raise StartupError(f"cannot listen on {address}: {error.strerror}") from None
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, sockaddr in infos:
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(sockaddr)
                sock.listen(1)  # a listening socket is what conflicts with the next bind
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise AddressInUse(address) from None
                if error.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL) and len(infos) > 1:
                    continue  # e.g. localhost's ::1 on a host without IPv6: gRPC skips it too
                raise StartupError(f"cannot listen on {address}: {error.strerror}") from None
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound
