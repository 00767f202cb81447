"""``leaseq serve``: run the server until SIGTERM/SIGINT, then drain and exit 0."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .common import DURATION

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_STORE = "sqlite:///./leaseq-data/leaseq.db"
DEFAULT_LISTEN = "127.0.0.1:50051"

log = logging.getLogger("leaseq.cli")


class ListenType(click.ParamType):  # type: ignore[type-arg]  # generic only in click >= 8.2
    """HOST:PORT, checked at once (server.addresses.parse_listen): no port, or one outside
    0..65535, is a usage error. The value stays the text; the server parses it again."""

    name = "listen"

    def __init__(self, example_port: int) -> None:
        self.example_port = example_port

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from leaseq.server.addresses import parse_listen

        try:
            return parse_listen(str(value), self.example_port).text
        except ValueError as error:
            self.fail(str(error), param, ctx)


def is_loopback(listen: str) -> bool:
    from leaseq.server.addresses import parse_listen

    return parse_listen(listen).is_loopback


def _env(flag: str) -> str:
    return "LEASEQ_" + flag.lstrip("-").replace("-", "_").upper()


def _option(flag: str, **kwargs: Any) -> Callable[[F], F]:
    """An option that also reads LEASEQ_<FLAG> from the environment (API.md)."""
    return click.option(flag, envvar=_env(flag), show_envvar=True, **kwargs)


@click.command("serve")
@_option(
    "--store",
    default=DEFAULT_STORE,
    show_default=True,
    help="sqlite:///path.db, memory:// or postgresql://user@host/db?schema=NAME",
)
@_option(
    "--pool-min",
    type=click.IntRange(min=0),
    help="PostgreSQL store: connections the pool keeps open (default 2).",
)
@_option(
    "--pool-max",
    type=click.IntRange(min=1),
    help="PostgreSQL store: most connections the pool opens (default 10).",
)
@_option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Server processes sharing the ports (SO_REUSEPORT), for a host with more than one "
    "core; PostgreSQL store only. Each has its own pool (--pool-max connections each).",
)
@_option(
    "--durability",
    type=click.Choice(["full", "relaxed"], case_sensitive=False),
    default="full",
    show_default=True,
    help="SQLite store: full fsyncs every commit before answering; relaxed fsyncs sends and "
    "every other write but lets leases and acks reach the disk with the next fsync (after an OS "
    "crash they may be undone: a redelivery, never a lost message).",
)
@_option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    metavar="HOST:PORT",
    type=ListenType(50051),
    help="Address of the gRPC port (port 0 picks a free one).",
)
@_option(
    "--metrics-listen",
    metavar="HOST:PORT",
    type=ListenType(9090),
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (no authentication: a "
    "non-loopback address needs --allow-unauthenticated).",
)
@_option(
    "--sqs-listen",
    metavar="HOST:PORT",
    type=ListenType(9324),
    help="Also serve the Amazon SQS API (AWS JSON and query protocols) over HTTP here, on the "
    "same store: boto3/aws-cli with --endpoint-url. Off by default.",
)
@_option(
    "--sqs-account-id",
    metavar="ID",
    help="The 12-digit AWS account id in the SQS endpoint's queue URLs and ARNs and its "
    "sts:GetCallerIdentity answer (default 000000000000).",
)
@_option(
    "--azure-listen",
    metavar="HOST:PORT",
    type=ListenType(10001),
    help="Also serve the Azure Queue Storage API over HTTP here (path-style, as Azurite), on the "
    "same store: azure-storage-queue with QueueEndpoint=http://HOST:PORT/<account>. Off by default.",
)
@_option(
    "--oci-listen",
    metavar="HOST:PORT",
    type=ListenType(10443),
    help="Also serve the OCI Queue API (20210201) over HTTP here, on the same store: the oci SDK's "
    "QueueClient/QueueAdminClient with service_endpoint=http://HOST:PORT, or oci queue ... "
    "--endpoint. Off by default.",
)
@_option(
    "--console-listen",
    metavar="HOST:PORT",
    type=ListenType(8080),
    help="Also serve the web console (queues, messages, dead letters) over HTTP here, on the "
    "same store; with --auth-policy, sign in with a token. Off by default.",
)
@_option(
    "--health-listen",
    metavar="HOST:PORT",
    type=ListenType(8081),
    help="Also serve grpc.health.v1 alone, in plaintext, on this address (probes that can do "
    "neither TLS nor auth, e.g. Kubernetes grpc probes with mutual TLS on --listen).",
)
@_option(
    "--max-connection-age",
    type=DURATION,
    default=None,
    help="Close each client connection after this long (it reconnects, maybe to another "
    "replica behind a load balancer): spreads clients over replicas. Off by default.",
)
@_option(
    "--max-connection-age-grace",
    type=DURATION,
    default=None,
    help="Time calls in progress keep on an aged-out connection [default: 35s].",
)
@_option(
    "--auth-policy",
    metavar="FILE",
    help="Token/certificate policy (TOML, or YAML/JSON by extension); re-read on SIGHUP or change.",
)
@_option("--tls-cert", metavar="FILE", help="Server certificate chain (PEM): serve TLS.")
@_option("--tls-key", metavar="FILE", help="Server private key (PEM), with --tls-cert.")
@_option(
    "--tls-client-ca",
    metavar="FILE",
    help="CA (PEM) of client certificates: mutual TLS, a certificate may name the principal.",
)
@_option(
    "--max-receive-streams",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="GetMessages calls running at once; more get RESOURCE_EXHAUSTED.",
)
@_option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="Client connections open at once on the gRPC port; more are closed at once (the "
    "health port has its own). Kept below the file-descriptor limit.",
)
@_option(
    "--max-connection-idle",
    type=DURATION,
    default="5m",
    show_default=True,
    help="Close a client connection that has had no call for this long (it reconnects on its "
    "next call); 0: never.",
)
@_option(
    "--max-response-mib",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="MiB of messages read and not yet sent, across all calls; a receive waits for room.",
)
@_option(
    "--http-max-connections",
    type=click.IntRange(min=1),
    default=4096,
    show_default=True,
    help="Connections open at once across the HTTP ports (SQS, Azure, OCI, console); more are "
    "closed at once. Kept below the file-descriptor limit together with --max-connections.",
)
@_option(
    "--http-idle-timeout",
    type=DURATION,
    default="60s",
    show_default=True,
    help="Close an HTTP connection kept alive without a request for this long.",
)
@_option(
    "--http-header-timeout",
    type=DURATION,
    default="10s",
    show_default=True,
    help="Close an HTTP connection whose request headers (or TLS handshake) take longer.",
)
@_option(
    "--http-body-timeout",
    type=DURATION,
    default="10s",
    show_default=True,
    help="Time an HTTP request body may take before it must keep arriving at 256 KiB/s; a "
    "slower one is answered 408 and its connection closed.",
)
@_option(
    "--http-body-mib",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="MiB of request bodies the HTTP ports hold at once; the next body waits for room "
    "(up to --http-body-timeout, then 503).",
)
@_option(
    "--http-allowed-hosts",
    metavar="NAMES",
    default="",
    help="Without --auth-policy the HTTP ports answer only Host names that are loopback "
    "(localhost, *.localhost) or IP addresses, against DNS rebinding: more names, "
    "comma-separated ('*': any).",
)
@_option(
    "--allow-unauthenticated",
    is_flag=True,
    help="Allow a non-loopback --listen without authentication, a non-loopback "
    "--metrics-listen (/metrics has none), and non-loopback HTTP ports without TLS.",
)
@_option(
    "--grace",
    type=click.FloatRange(min=0),
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
@_option(
    "--log-format",
    type=click.Choice(["auto", "json", "text"], case_sensitive=False),
    default="auto",
    show_default=True,
    help="auto: one JSON object per line unless stderr is a terminal.",
)
def serve(
    store: str,
    listen: str,
    allow_unauthenticated: bool,
    grace: float,
    log_level: str,
    auth_policy: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    max_receive_streams: int,
    max_connections: int,
    max_connection_idle: float,
    max_response_mib: int,
    pool_min: int | None,
    pool_max: int | None,
    metrics_listen: str | None,
    health_listen: str | None,
    max_connection_age: float | None,
    max_connection_age_grace: float | None,
    log_format: str,
    sqs_listen: str | None,
    sqs_account_id: str | None,
    azure_listen: str | None,
    oci_listen: str | None,
    console_listen: str | None,
    workers: int,
    http_max_connections: int,
    http_idle_timeout: float,
    http_header_timeout: float,
    http_body_timeout: float,
    http_body_mib: int,
    http_allowed_hosts: str,
    durability: str,
) -> None:
    """Serve the queue service (gRPC, health, reflection) until SIGTERM or Ctrl-C."""
    if workers > 1 and not store.startswith(("postgresql:", "postgres:")):
        # One writer per SQLite file; memory:// is one process's.
        raise click.ClickException(
            f"--workers {workers} needs the PostgreSQL store ({store.partition(':')[0]} has one "
            "writer: run it with --workers 1)"
        )
    store = _with_durability(store, durability.lower())
    security = _security(auth_policy, tls_cert, tls_key, tls_client_ca)
    if not allow_unauthenticated and not security.authenticates and not is_loopback(listen):
        # API.md: without auth, only loopback unless the operator says so explicitly.
        raise click.UsageError(
            f"{listen} is not a loopback address and authentication is off: "
            "pass --allow-unauthenticated to serve it anyway"
        )
    if sqs_account_id and not re.fullmatch(r"\d{12}", sqs_account_id):
        raise click.BadParameter("an AWS account id is 12 digits", param_hint="--sqs-account-id")
    if sqs_listen:
        _check_sqs_listen(sqs_listen, security, allow_unauthenticated)
    if (
        azure_listen
        and security.policy is None
        and not allow_unauthenticated
        and not is_loopback(azure_listen)
    ):
        # Without a policy the Azure endpoint takes the development account's published key.
        raise click.UsageError(
            f"--azure-listen {azure_listen} is not a loopback address and there is no --auth-policy "
            "(azure_keys): pass --allow-unauthenticated to serve it anyway"
        )
    if (
        oci_listen
        and security.policy is None
        and not allow_unauthenticated
        and not is_loopback(oci_listen)
    ):
        # Without a policy the OCI endpoint takes any well-formed signature.
        raise click.UsageError(
            f"--oci-listen {oci_listen} is not a loopback address and there is no --auth-policy "
            "(oci_keys): pass --allow-unauthenticated to serve it anyway"
        )
    if (
        console_listen
        and security.policy is None
        and not allow_unauthenticated
        and not is_loopback(console_listen)
    ):
        raise click.UsageError(
            f"--console-listen {console_listen} is not a loopback address and there is no "
            "--auth-policy (tokens to sign in with): pass --allow-unauthenticated to serve it anyway"
        )
    for flag, address in (
        ("--sqs-listen", sqs_listen),
        ("--azure-listen", azure_listen),
        ("--oci-listen", oci_listen),
        ("--console-listen", console_listen),
    ):
        if (
            address
            and security.tls is None
            and not allow_unauthenticated
            and not is_loopback(address)
        ):
            # Signed requests (replayable) and console tokens would cross the network in clear.
            raise click.UsageError(
                f"{flag} {address} is not a loopback address and there is no TLS (--tls-cert, "
                "--tls-key): pass --allow-unauthenticated to serve plain HTTP anyway"
            )
    http_limits = _http_limits(
        http_max_connections,
        http_idle_timeout,
        http_header_timeout,
        http_body_timeout,
        http_body_mib,
        http_allowed_hosts,
    )
    if metrics_listen and not allow_unauthenticated and not is_loopback(metrics_listen):
        # /metrics has no authentication and names every queue (with its counts), whatever
        # protects the gRPC port: the same rule.
        raise click.UsageError(
            f"--metrics-listen {metrics_listen} is not a loopback address and /metrics has no "
            "authentication (it names every queue): pass --allow-unauthenticated to serve it anyway"
        )

    # The command line is an application: it may configure logging (the library never does).
    from leaseq.server.logs import configure_logging

    configure_logging(log_level, log_format.lower(), sys.stderr)
    host = listen.rpartition(":")[0]

    def ready(port: int) -> None:
        log.info("listening on %s:%d", host, port)

    store = _with_pool_size(store, pool_min, pool_max)
    from leaseq.server.app import serve as run_server
    from leaseq.server.limits import Limits

    options = dict(
        grace=grace,
        security=security,
        limits=Limits(
            max_receive_streams=max_receive_streams,
            max_connections=max_connections,
            max_connection_idle=max_connection_idle or None,
            response_bytes=max_response_mib * 1024 * 1024,
        ),
        health_listen=health_listen,
        metrics_listen=metrics_listen,
        max_connection_age=max_connection_age,
        max_connection_age_grace=max_connection_age_grace,
        sqs_listen=sqs_listen,
        sqs_account_id=sqs_account_id,
        azure_listen=azure_listen,
        oci_listen=oci_listen,
        console_listen=console_listen,
        http_limits=http_limits,
    )
    try:
        if workers > 1:
            from leaseq.server.workers import run_workers

            status = run_workers(
                workers,
                store,
                listen,
                options,
                logging_setup=(log_level, log_format.lower()),
                ready=ready,
            )
            log.info("stopped")
            sys.exit(status)
        asyncio.run(run_server(store, listen, ready=ready, **options))
    except KeyboardInterrupt:  # a second Ctrl-C while draining
        sys.exit(130)
    except (ValueError, RuntimeError, OSError) as e:
        # Startup failures the operator can fix: a bad store URL, an address in use, a data
        # directory that cannot be created. One line, not a traceback (which --log-level debug
        # still shows).
        log.debug("the server failed", exc_info=True)
        raise click.ClickException(str(e)) from e
    log.info("stopped")


def _http_limits(
    max_connections: int,
    idle: float,
    header: float,
    body: float,
    body_mib: int,
    allowed_hosts: str,
) -> Any:
    from leaseq.server.frontends.http_limits import HttpLimits

    names = tuple(
        name.strip().lower().rstrip(".") for name in allowed_hosts.split(",") if name.strip()
    )
    try:
        return HttpLimits(
            max_connections=max_connections,
            idle_timeout=idle,
            header_timeout=header,
            body_timeout=body,
            body_bytes=body_mib * 1024 * 1024,
            allowed_hosts=names,
        )
    except ValueError as e:  # a duration of 0
        raise click.UsageError(str(e)) from None


def _check_sqs_listen(listen: str, security: Any, allow_unauthenticated: bool) -> None:
    """The SQS endpoint authenticates by SigV4 against the policy's access keys: without a policy
    it accepts any caller, so the loopback rule applies to it as to --listen."""
    if security.policy is None and not allow_unauthenticated and not is_loopback(listen):
        raise click.UsageError(
            f"--sqs-listen {listen} is not a loopback address and there is no --auth-policy "
            "(SigV4 access keys): pass --allow-unauthenticated to serve it anyway"
        )


def _security(
    auth_policy: str | None, tls_cert: str | None, tls_key: str | None, tls_client_ca: str | None
) -> Any:
    """The server's auth.Security from the flags; UsageError/ClickException for bad ones (a
    policy file that does not load, a key that does not match its certificate)."""
    from leaseq.server.auth import PolicyError, PolicyFile, Security, TLSFiles

    if bool(tls_cert) != bool(tls_key):
        raise click.UsageError("--tls-cert and --tls-key go together")
    if tls_client_ca and not tls_cert:
        raise click.UsageError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS)")
    tls = None
    if tls_cert and tls_key:
        from pathlib import Path

        from leaseq.server.tls import check_files

        tls = TLSFiles(
            Path(tls_cert), Path(tls_key), Path(tls_client_ca) if tls_client_ca else None
        )
        try:
            check_files(tls)
        except ValueError as e:
            raise click.ClickException(str(e)) from None
    policy = None
    if auth_policy:
        try:
            policy = PolicyFile(auth_policy)
        except PolicyError as e:
            raise click.ClickException(str(e)) from None
    return Security(policy=policy, tls=tls)


def _with_durability(store: str, durability: str) -> str:
    """--durability goes into a SQLite store URL (its durability parameter). The other stores
    have their own: memory:// keeps nothing, and PostgreSQL's is the database's
    synchronous_commit."""
    if durability == "full":
        return store
    if not store.startswith("sqlite:"):
        raise click.UsageError(
            f"--durability {durability} applies to the SQLite store, not {store.partition(':')[0]} "
            "(PostgreSQL's durability is its synchronous_commit setting)"
        )
    return f"{store}{'&' if '?' in store else '?'}durability={durability}"


def _with_pool_size(store: str, pool_min: int | None, pool_max: int | None) -> str:
    """--pool-min/--pool-max go into a PostgreSQL store URL (its pool_min/pool_max parameters);
    other stores have no pool and ignore them."""
    if pool_min is None and pool_max is None:
        return store
    if not store.startswith(("postgresql:", "postgres:")):
        return store
    try:
        from leaseq.server.store.postgres.settings import with_pool_size
    except ImportError as e:
        raise click.ClickException(
            f"the PostgreSQL store needs pip install 'leaseq[postgres]': {e}"
        ) from e
    return with_pool_size(store, pool_min, pool_max)
