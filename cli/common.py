"""What every client subcommand shares: --target/--token/--tls*/--json, durations, the client.

The connection options and --json are accepted both on the ``leaseq`` group and on each client
command, so ``leaseq --target h:1 queue list`` and ``leaseq queue list --target h:1`` mean the
same. Environment variables (``LEASEQ_TARGET``, ...) are read by the group only; an option on the
command wins over one on the group, which wins over the environment.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

import click

from leaseq.client import DEFAULT_TARGET, QueueClient, TLSConfig
from leaseq.client.client import read_pem
from leaseq.client.target import InvalidTarget, parse_target

F = TypeVar("F", bound=Callable[..., Any])

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$")

TARGET_KEY = "leaseq.target"
"""``ctx.meta`` key of the target a command talks to, for the error messages (cli/errors.py)."""


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


class BackoffsType(click.ParamType):  # type: ignore[type-arg]  # generic only in click >= 8.2
    """A retry policy's two backoffs, "MIN,MAX" (durations: "1s,4s", "10s,10m")."""

    name = "min,max"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        parts = str(value).split(",")
        if len(parts) != 2:
            self.fail(f"{value!r} is not MIN,MAX (e.g. 1s,4s)", param, ctx)
        return tuple(DURATION.convert(part, param, ctx) for part in parts)


BACKOFFS = BackoffsType()


class InputError(click.ClickException):
    """Bad input found after parsing (a target, a TLS file): one line, exit status 2 like a
    usage error, without click's usage lines (the option is named in the message)."""

    exit_code = 2


# (parameter name, option, flag?, environment variable, metavar, help) of the connection options.
_CONNECTION: list[tuple[str, str, bool, str | None, str | None, str]] = [
    (
        "target",
        "--target",
        False,
        "LEASEQ_TARGET",
        "HOST:PORT",
        f"The server to talk to (a HOST alone: port 50051)  [default: {DEFAULT_TARGET}]",
    ),
    ("token", "--token", False, "LEASEQ_TOKEN", None, "Bearer token"),
    (
        "tls",
        "--tls",
        True,
        "LEASEQ_TLS",
        None,
        "Use TLS (trusting the system's CAs unless --tls-ca).",
    ),
    (
        "tls_ca",
        "--tls-ca",
        False,
        "LEASEQ_TLS_CA",
        "FILE",
        "CA (PEM) to trust for the server's certificate; implies --tls.",
    ),
    (
        "tls_client_cert",
        "--tls-client-cert",
        False,
        "LEASEQ_TLS_CLIENT_CERT",
        "FILE",
        "Client certificate (PEM) for mutual TLS; implies --tls.",
    ),
    (
        "tls_client_key",
        "--tls-client-key",
        False,
        "LEASEQ_TLS_CLIENT_KEY",
        "FILE",
        "Key (PEM) of --tls-client-cert.",
    ),
    ("as_json", "--json", True, None, None, "Print one JSON document."),
]
CONNECTION_PARAMS = [name for name, *_ in _CONNECTION]


def group_client_options(func: F) -> F:
    """The connection options and --json on the ``leaseq`` group, read from the environment too."""
    for name, option, flag, envvar, metavar, help_ in reversed(_CONNECTION):
        func = click.option(
            name,
            option,
            is_flag=flag,
            default=False if flag else None,
            envvar=envvar,
            show_envvar=envvar is not None,
            metavar=metavar,
            help=help_,
        )(func)
    return func


def _group_value(name: str) -> Any:
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root() if ctx is not None else None
    value = root.params.get(name) if root is not None else None
    if name == "target" and value is None:
        return DEFAULT_TARGET
    return value


def _tls_file(option: str, path: str | None) -> bytes | None:
    """A PEM file's bytes, or one clear line naming the option when it cannot be used."""
    if path is None:
        return None
    try:
        return read_pem(path)
    except OSError as e:
        raise InputError(f"{option} {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise InputError(f"{option}: {e}") from e


def client_settings(given: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """(QueueClient arguments, as_json) from a command's connection options, each falling back
    to the group's (and so to the environment)."""
    values: dict[str, Any] = {
        name: given.get(name) if given.get(name) not in (None, False) else _group_value(name)
        for name in CONNECTION_PARAMS
    }
    try:
        target = parse_target(values["target"])
    except InvalidTarget as e:
        raise InputError(f"--target {e.target!r}: {e.problem}") from e
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[TARGET_KEY] = target
    client_args: dict[str, Any] = {"target": target, "token": values["token"]}
    cert, key = values["tls_client_cert"], values["tls_client_key"]
    if bool(cert) != bool(key):
        raise InputError("--tls-client-cert and --tls-client-key go together")
    if values["tls"] or values["tls_ca"] or cert:
        client_args["tls"] = TLSConfig(
            root_certificates=_tls_file("--tls-ca", values["tls_ca"]),
            certificate_chain=_tls_file("--tls-client-cert", cert),
            private_key=_tls_file("--tls-client-key", key),
        )
    return client_args, bool(values["as_json"])


def client_options(func: F) -> F:
    """Add the connection options and --json to a client command; it receives ``client_args``
    (a dict of QueueClient arguments) and ``as_json``. The same options given before the command
    (on the group) or in the environment apply when the command's own are not given."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in CONNECTION_PARAMS}
        client_args, as_json = client_settings(given)
        return func(*args, client_args=client_args, as_json=as_json, **kwargs)

    for name, option, flag, envvar, metavar, help_ in reversed(_CONNECTION):
        if envvar:
            help_ += f" (env {envvar})"
        wrapper = click.option(
            name,
            option,
            is_flag=flag,
            default=False if flag else None,
            metavar=metavar,
            help=help_,
        )(wrapper)
    return wrapper  # type: ignore[return-value]


@contextmanager
def open_client(client_args: dict[str, Any]) -> Iterator[QueueClient]:
    """A client for one command. Its errors propagate to the group, which prints them."""
    with QueueClient(**client_args) as client:
        yield client
