"""What every client subcommand shares: --target/--token/--json, durations, the client itself."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

import click

from leaseq.client import DEFAULT_TARGET, QueueClient, TLSConfig

F = TypeVar("F", bound=Callable[..., Any])

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$")


class DurationType(click.ParamType):  # type: ignore[type-arg]  # generic only in click >= 8.2
    """A duration: plain seconds ("30", "1.5") or with a unit ("500ms", "30s", "5m", "2h", "7d")."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float, timedelta)):
            return value
        match = _DURATION.match(str(value))
        if not match:
            self.fail(f"{value!r} is not a duration (e.g. 30, 1.5s, 500ms, 5m, 2h, 7d)", param, ctx)
        number, unit = match.groups()
        return float(number) * _UNITS[unit or "s"]


DURATION = DurationType()


def client_options(func: F) -> F:
    """Add --target, --token, the --tls* options and --json to a command; it receives ``client_args`` (a dict of
    QueueClient arguments) and ``as_json``."""

    @click.option(
        "--target",
        show_envvar=True, envvar="LEASEQ_TARGET",
        default=DEFAULT_TARGET,
        show_default=True,
        metavar="HOST:PORT",
        help="The server to talk to",
    )
    @click.option(
        "--token",
        show_envvar=True, envvar="LEASEQ_TOKEN",
        default=None,
        help="Bearer token",
    )
    @click.option(
        "--tls", is_flag=True, envvar="LEASEQ_TLS", show_envvar=True,
        help="Use TLS (trusting the system's CAs unless --tls-ca).",
    )
    @click.option(
        "--tls-ca", metavar="FILE", envvar="LEASEQ_TLS_CA", show_envvar=True,
        help="CA (PEM) to trust for the server's certificate; implies --tls.",
    )
    @click.option(
        "--tls-client-cert", metavar="FILE", envvar="LEASEQ_TLS_CLIENT_CERT", show_envvar=True,
        help="Client certificate (PEM) for mutual TLS; implies --tls.",
    )
    @click.option(
        "--tls-client-key", metavar="FILE", envvar="LEASEQ_TLS_CLIENT_KEY", show_envvar=True,
        help="Key (PEM) of --tls-client-cert.",
    )
    @click.option("as_json", "--json", is_flag=True, help="Print one JSON document.")
    @functools.wraps(func)
    def wrapper(
        *args: Any,
        target: str,
        token: str | None,
        tls: bool,
        tls_ca: str | None,
        tls_client_cert: str | None,
        tls_client_key: str | None,
        **kwargs: Any,
    ) -> Any:
        client_args: dict[str, Any] = {"target": target, "token": token}
        if bool(tls_client_cert) != bool(tls_client_key):
            raise click.UsageError("--tls-client-cert and --tls-client-key go together")
        if tls or tls_ca or tls_client_cert:
            client_args["tls"] = TLSConfig.from_files(
                ca=tls_ca, cert=tls_client_cert, key=tls_client_key
            )
        return func(*args, client_args=client_args, **kwargs)

    return wrapper  # type: ignore[return-value]


@contextmanager
def open_client(client_args: dict[str, Any]) -> Iterator[QueueClient]:
    """A client for one command. Its errors propagate to the group, which prints them."""
    with QueueClient(**client_args) as client:
        yield client
