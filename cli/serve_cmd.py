"""``leaseq serve``: run the server until SIGTERM/SIGINT, then drain and exit 0."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_STORE = "sqlite:///./leaseq-data/leaseq.db"
DEFAULT_LISTEN = "127.0.0.1:50051"

log = logging.getLogger("leaseq.cli")

# Options API.md promises whose features the server does not have yet. They are accepted by the
# parser (so scripts written against the documented interface fail clearly, not with "no such
# option"), and refused when given, rather than silently serving without TLS or auth.
_NOT_YET = ("metrics_listen", "auth_policy", "tls_cert", "tls_key", "tls_client_ca")


def is_loopback(listen: str) -> bool:
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost, or empty (every interface)
        return False


def _env(flag: str) -> str:
    return "LEASEQ_" + flag.lstrip("-").replace("-", "_").upper()


def _option(flag: str, **kwargs: Any) -> Callable[[F], F]:
    """An option that also reads LEASEQ_<FLAG> from the environment (API.md)."""
    return click.option(flag, envvar=_env(flag), show_envvar=True, **kwargs)


@click.command("serve")
@_option(
    "--store", default=DEFAULT_STORE, show_default=True, help="sqlite:///path.db or memory://"
)
@_option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    metavar="HOST:PORT",
    help="Address of the gRPC port (port 0 picks a free one).",
)
@_option("--metrics-listen", metavar="HOST:PORT", help="Metrics address (not supported yet).")
@_option("--auth-policy", metavar="FILE", help="Token policy file (not supported yet).")
@_option("--tls-cert", metavar="FILE", help="Server certificate (not supported yet).")
@_option("--tls-key", metavar="FILE", help="Server key (not supported yet).")
@_option("--tls-client-ca", metavar="FILE", help="CA of client certificates (not supported yet).")
@_option(
    "--allow-unauthenticated",
    is_flag=True,
    help="Allow a non-loopback address without authentication.",
)
@_option(
    "--grace",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds that calls in progress get to finish on shutdown.",
)
@_option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="Log verbosity (logs go to stderr).",
)
def serve(
    store: str,
    listen: str,
    allow_unauthenticated: bool,
    grace: float,
    log_level: str,
    **not_yet: str | None,
) -> None:
    """Serve the queue service (gRPC, health, reflection) until SIGTERM or Ctrl-C."""
    for name in _NOT_YET:
        if not_yet.get(name):
            flag = "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} is not supported yet")
    if not allow_unauthenticated and not is_loopback(listen):
        # API.md: without auth, only loopback unless the operator says so explicitly.
        raise click.UsageError(
            f"{listen} is not a loopback address and authentication is off: "
            "pass --allow-unauthenticated to serve it anyway"
        )

    # The command line is an application: it may configure logging (the library never does).
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    host = listen.rpartition(":")[0]

    def ready(port: int) -> None:
        log.info("listening on %s:%d", host, port)

    from leaseq.server.app import serve as run_server

    try:
        asyncio.run(run_server(store, listen, grace=grace, ready=ready))
    except KeyboardInterrupt:  # a second Ctrl-C while draining
        sys.exit(130)
    except (ValueError, RuntimeError, OSError) as e:
        # Startup failures the operator can fix: a bad store URL, an address in use, a data
        # directory that cannot be created. One line, not a traceback (which --log-level debug
        # still shows).
        log.debug("the server failed", exc_info=True)
        raise click.ClickException(str(e)) from e
    log.info("stopped")
