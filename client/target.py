"""Where a client connects: ``HOST:PORT`` checked and completed before gRPC sees it.

gRPC takes a target without a port to mean port 443 and wraps a port above 65535 around
(``:99999`` dials 34463), and an empty target fails deep inside its core with log lines on
stderr. ``parse_target`` gives leaseq's own rules instead:

- ``HOST`` alone means ``HOST:50051`` (``DEFAULT_PORT``, where ``leaseq serve`` listens);
- a port is a number in 1..65535;
- an IPv6 address goes in brackets (``[::1]:50051``, or ``[::1]`` for the default port);
- a gRPC URI with a scheme gRPC resolves itself (``dns:``, ``unix:``, ``ipv4:``, ``ipv6:``, ...)
  is passed through as it is.

Example::

    parse_target("localhost")        # "localhost:50051"
    parse_target("10.0.0.7:6000")    # "10.0.0.7:6000"
    parse_target("10.0.0.7:99999")   # InvalidTarget: ... port 99999 is outside 1..65535
"""

from __future__ import annotations

__all__ = ["DEFAULT_PORT", "InvalidTarget", "parse_target"]

DEFAULT_PORT = 50051
"""The port of a target given without one: ``leaseq serve``'s default."""

# Name resolvers built into gRPC: a target that starts with one of these is a URI, not HOST:PORT.
_SCHEMES = frozenset({"dns", "unix", "unix-abstract", "ipv4", "ipv6", "vsock", "xds"})


class InvalidTarget(ValueError):
    """A target that is not ``HOST[:PORT]`` (or a gRPC URI); ``problem`` says what is wrong."""

    def __init__(self, target: str, problem: str) -> None:
        super().__init__(f"target {target!r}: {problem}")
        self.target = target
        self.problem = problem


def parse_target(target: str) -> str:
    """The target to hand to gRPC: ``HOST:PORT`` with the default port filled in.

    Raises ``InvalidTarget`` (a ``ValueError`` naming the target and what is wrong) for an empty
    target, a port that is not a number in 1..65535, a missing host, or an IPv6 address without
    brackets.
    """
    if not isinstance(target, str):
        raise TypeError(f"target must be a str, not {type(target).__name__}")
    if not target.strip():
        raise InvalidTarget(target, f"it is empty: give HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT}")
    if target != target.strip() or any(c.isspace() for c in target):
        raise InvalidTarget(target, "it contains white space")
    scheme = target.split(":", 1)[0].lower()
    if scheme in _SCHEMES and ":" in target:
        return target
    if target.startswith("["):  # [IPv6] or [IPv6]:PORT
        end = target.find("]")
        if end < 0:
            raise InvalidTarget(target, "no ']' after the IPv6 address")
        host, rest = target[: end + 1], target[end + 1 :]
        if rest and not rest.startswith(":"):
            raise InvalidTarget(target, "expected ':PORT' after ']'")
        port = rest[1:] if rest else None
    elif target.count(":") > 1:
        raise InvalidTarget(target, f"put an IPv6 address in brackets, e.g. [::1]:{DEFAULT_PORT}")
    else:
        host, sep, port_text = target.partition(":")
        port = port_text if sep else None
    if host in ("", "[]"):
        raise InvalidTarget(target, f"no host: give HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT}")
    if port is None:
        return f"{host}:{DEFAULT_PORT}"
    if not port.isdigit() or not port.isascii():
        raise InvalidTarget(target, f"the port {port!r} is not a number")
    if not 1 <= int(port) <= 65535:
        raise InvalidTarget(target, f"port {int(port)} is outside 1..65535")
    return f"{host}:{int(port)}"
