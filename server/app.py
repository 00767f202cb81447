"""Build the grpc.aio server, serve it, and drain it on SIGTERM/SIGINT.

Served: leaseq.v1.QueueService, grpc.health.v1.Health (overall "", per service
"leaseq.v1.QueueService", and LIVENESS_SERVICE), and server reflection (v1 and v1alpha). Optionally health alone
on a second plaintext port (health_listen), and Prometheus metrics (metrics.py). Every RPC goes
through the request-id/access-log interceptor (logs.py) and, with metrics, the metrics one.

Shutdown (`LeaseqServer.shutdown`), in this order, so a load balancer and every client learn of
it before connections close:
1. health turns NOT_SERVING at once (LIVENESS_SERVICE excepted); health Watch streams end;
2. the service drains: new RPCs get UNAVAILABLE with RetryInfo, follow streams end cleanly (OK),
   waiting long polls answer now with what they have;
3. `server.stop(grace)`: RPCs in progress get up to `grace` seconds to finish; then the health
   port closes;
4. (serve) the metrics endpoint and the store are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from . import reflection
from .addresses import StartupError, check_free, parse_listen
from .auth import Security
from .frontends.http_limits import HttpLimits
from .limits import Limits, StreamLimiter, fit_to_fd_limit
from .logs import RequestLogInterceptor
from .metrics import Metrics
from .service import (
    MAX_GRPC_MESSAGE_BYTES,
    SERVICE_NAME,
    GenericOnly,
    QueueService,
    add_to_server,
)
from .store import open_store, redact_url
from .store.base import ChangeFeed, Store

if TYPE_CHECKING:
    from .frontends.console.app import ConsoleFrontend
    from .frontends.dialect import DialectFrontend
    from .frontends.http_site import HttpShared

log = logging.getLogger(__name__)

LISTENER_OPTIONS: list[tuple[str, int]] = [
    # gRPC sets SO_REUSEPORT by default: a second server on a busy port would start and the two
    # would take turns answering. Off, a busy port fails the bind (addresses.check_free says so
    # before anything starts). On only among the workers of one `serve --workers N` (workers.py).
    ("grpc.so_reuseport", 0),
]
SHARED_LISTENER_OPTIONS: list[tuple[str, int]] = [("grpc.so_reuseport", 1)]

SERVER_OPTIONS: list[tuple[str, int]] = [
    # See service.MAX_GRPC_MESSAGE_BYTES for why 64 MiB instead of gRPC's 4 MiB default.
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
]

LIVENESS_SERVICE = "liveness"
"""A health name that stays SERVING while the process runs, through the drain too: a liveness
probe asks for it, so a draining server is taken out of rotation (readiness: "" or the service
name turn NOT_SERVING) but never restarted for draining."""

_HEALTH_NAMES = ("", SERVICE_NAME, LIVENESS_SERVICE)


class _Health(health_aio.HealthServicer):
    """The stock aio health servicer, born SERVING for our names: its `set` is a coroutine, and
    the server must answer SERVING from its first RPC, before any coroutine could run.

    On drain every name but LIVENESS_SERVICE turns NOT_SERVING, and Watch streams end once they
    have sent the last status: the stock Watch never ends, so every client watching health (gRPC
    client-side health checking does) would hold the shutdown for the whole grace period."""

    # The stock servicer's own state, which its type stubs do not declare.
    _server_status: dict[str, Any]
    _server_watchers: dict[str, asyncio.Condition]
    _watcher_count_by_service: dict[str, int]
    _gracefully_shutting_down: bool
    _set: Callable[[str, Any], Awaitable[None]]

    def __init__(self) -> None:
        super().__init__()
        for name in _HEALTH_NAMES:
            self._server_status[name] = health_pb2.HealthCheckResponse.SERVING

    async def enter_graceful_shutdown(self) -> None:
        if self._gracefully_shutting_down:
            return
        self._gracefully_shutting_down = True  # before the notifies: Watch reads it
        for name in list(self._server_status):
            status = self._server_status[name]
            if name != LIVENESS_SERVICE:
                status = health_pb2.HealthCheckResponse.NOT_SERVING
            await self._set(name, status)

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        service = request.service
        condition = self._server_watchers[service]
        self._watcher_count_by_service[service] += 1
        last = None
        try:
            async with condition:
                while True:
                    status = self._server_status.get(
                        service, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
                    )
                    if status != last:
                        await context.write(health_pb2.HealthCheckResponse(status=status))
                        last = status
                    if self._gracefully_shutting_down:
                        return
                    await condition.wait()
        finally:
            self._watcher_count_by_service[service] -= 1
            if self._watcher_count_by_service[service] == 0:
                del self._server_watchers[service]
                del self._watcher_count_by_service[service]


@dataclass
class LeaseqServer:
    """A built (not yet started) server and the parts its shutdown needs."""

    server: grpc.aio.Server
    port: int
    service: QueueService
    health: _Health
    stream_limiter: StreamLimiter | None = None
    # A second, plaintext port serving only grpc.health.v1 (build's health_listen), for probes
    # that can do neither TLS nor auth; it answers until the main server has stopped.
    health_server: grpc.aio.Server | None = None
    health_port: int | None = None
    metrics: Metrics | None = None

    async def start(self) -> None:
        await self.server.start()
        if self.health_server is not None:
            await self.health_server.start()

    async def drain(self) -> None:
        """Steps 1 and 2 of the module docstring; the server keeps running."""
        await self.health.enter_graceful_shutdown()
        self.service.drain()

    async def shutdown(self, grace: float) -> None:
        await self.drain()
        await self.server.stop(grace)
        await self.service.settle()  # release what ended streams leased but did not send
        await self.stop_now()

    async def stop_now(self) -> None:
        """Stop both ports at once (calls still running are cancelled)."""
        await self.server.stop(0)
        if self.health_server is not None:
            await self.health_server.stop(0)


def build(
    store: Store,
    listen: str,
    *,
    security: Security | None = None,
    limits: Limits | None = None,
    health_listen: str | None = None,
    metrics: Metrics | None = None,
    max_connection_age: float | None = None,
    max_connection_age_grace: float | None = None,
    reuse_port: bool = False,
) -> LeaseqServer:
    """Build the server on an opened store; listen is "host:port" (port 0 picks a free one).
    Call from the event loop that will run it.

    security: TLS files and the auth policy (`auth.Security`); None serves plaintext, open.
    limits: stream caps (`limits.Limits`).
    health_listen: also serve grpc.health.v1 alone, in plaintext, on this address.
    metrics: count RPCs (an interceptor) and report the store's queues (`metrics.Metrics`).
    max_connection_age (+ _grace), seconds: connection_options().
    reuse_port: share the ports with the other workers of `serve --workers N` (workers.py)."""
    limits = limits or Limits()
    listener_options = SHARED_LISTENER_OPTIONS if reuse_port else LISTENER_OPTIONS
    # Request ids and the access log first (outermost): they cover refused calls too, and the
    # id is set before anything else logs. Then metrics (they count refusals). Then auth: an
    # unauthenticated call takes no receive-stream slot.
    stream_limiter = StreamLimiter(limits.max_receive_streams)
    interceptors: list[grpc.aio.ServerInterceptor] = [RequestLogInterceptor()]
    if metrics is not None:
        interceptors.append(metrics.interceptor())
        metrics.watch_store(store, asyncio.get_running_loop())
    interceptors += [*(security.interceptors() if security else ()), stream_limiter]
    server = grpc.aio.server(
        options=SERVER_OPTIONS
        + listener_options
        + limits.server_options()
        + connection_options(max_connection_age, max_connection_age_grace),
        interceptors=interceptors,
    )
    service = QueueService(store, call_bytes=limits.call_bytes, server_bytes=limits.response_bytes)
    if isinstance(store, ChangeFeed):
        # Replicas over one store: sends through the others wake this one's long polls too.
        store.subscribe(service.longpoll.store_changed)
    add_to_server(service, server)
    health = _Health()
    health_pb2_grpc.add_HealthServicer_to_server(health, GenericOnly(server))  # type: ignore[arg-type]  # a grpc.aio.Server in all it uses
    reflection.enable(
        GenericOnly(server),
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name),
    )
    credentials = security.credentials() if security else None
    port = _bind(server, listen, credentials)
    health_server, health_port = None, None
    if health_listen:
        health_server = grpc.aio.server(options=listener_options + limits.health_server_options())
        health_pb2_grpc.add_HealthServicer_to_server(health, GenericOnly(health_server))  # type: ignore[arg-type]
        health_port = _bind(health_server, health_listen, None)
    return LeaseqServer(
        server, port, service, health, stream_limiter, health_server, health_port, metrics
    )


def _bind(server: grpc.aio.Server, listen: str, credentials: grpc.ServerCredentials | None) -> int:
    """Add the port; a failure says why in one line (StartupError), not gRPC's "Failed to bind"."""
    address = parse_listen(listen)
    try:
        if credentials is not None:
            return server.add_secure_port(listen, credentials)
        return server.add_insecure_port(listen)
    except RuntimeError:
        check_free([address])  # raises with the reason: in use, no such address, ...
        raise StartupError(f"cannot listen on {address}") from None


DEFAULT_CONNECTION_AGE_GRACE = 35.0
"""Seconds a connection past its max age keeps for calls in progress: a long poll (30 s at most)
finishes; gRPC's own default (no limit) would let a follow stream pin its replica forever."""


def connection_options(max_age: float | None, grace: float | None = None) -> list[tuple[str, int]]:
    """gRPC server options that close each client connection after max_age seconds (GOAWAY,
    then calls still running get grace more seconds before the connection is cut).

    Why: HTTP/2 keeps a client on the one server replica it connected to, however many replicas
    are added later; an aged-out connection makes the client reconnect through the Service and
    land anywhere, so load spreads over replicas without client-side balancing. gRPC adds +-10%
    jitter to the age, so replicas are not all left at once. Follow streams are cut at age +
    grace and must be re-opened (the client's retry does); long polls (at most 30 s) finish
    within a grace of 30 s or more."""
    if not max_age:
        return []
    if grace is None:
        grace = DEFAULT_CONNECTION_AGE_GRACE
    return [
        ("grpc.max_connection_age_ms", int(max_age * 1000)),
        ("grpc.max_connection_age_grace_ms", int(grace * 1000)),
    ]


def build_server(store: Store, listen: str) -> tuple[grpc.aio.Server, int]:
    """The grpc.aio server and its port. For a drainable handle use `build`."""
    built = build(store, listen)
    return built.server, built.port


async def serve(
    store_url: str,
    listen: str,
    *,
    grace: float = 10.0,
    ready: Callable[[int], object] | None = None,
    stop: asyncio.Event | None = None,
    security: Security | None = None,
    limits: Limits | None = None,
    health_listen: str | None = None,
    metrics_listen: str | None = None,
    max_connection_age: float | None = None,
    max_connection_age_grace: float | None = None,
    sqs_listen: str | None = None,
    sqs_account_id: str | None = None,
    azure_listen: str | None = None,
    oci_listen: str | None = None,
    console_listen: str | None = None,
    reuse_port: bool = False,
    http_limits: HttpLimits | None = None,
) -> None:
    """Open the store, serve until SIGTERM/SIGINT (or `stop` is set), then drain and close.

    ready(port) is called once the server accepts RPCs (the port matters with ":0").
    health_listen: a plaintext port with grpc.health.v1 only; metrics_listen: Prometheus
    /metrics over HTTP; max_connection_age (+ _grace): `connection_options`; sqs_listen: the
    SQS-compatible HTTP endpoint (frontends/sqs) on this loop, over the same core; azure_listen:
    the Azure Queue Storage-compatible one (frontends/azure), likewise; oci_listen: the OCI
    Queue-compatible one (frontends/oci), likewise; console_listen: the web
    console (frontends/console), likewise; reuse_port: one worker of `serve --workers N`, whose
    parent checked and holds the shared ports (workers.py); http_limits: what the HTTP ports
    share (frontends/http_limits.py), served over TLS with security's certificate when it has
    one.

    Start-up failures raise StartupError (an address that is malformed or in use: checked before
    the store is opened) or StoreOpenError, each with a one-line message."""
    addresses = []
    for name, text in (
        ("listen", listen),
        ("health", health_listen),
        ("metrics", metrics_listen),
        ("SQS", sqs_listen),
        ("Azure", azure_listen),
        ("OCI", oci_listen),
        ("console", console_listen),
    ):
        if text and not (reuse_port and name not in ("metrics", "console")):
            try:
                addresses.append(parse_listen(text))
            except ValueError as error:
                raise StartupError(f"{name} address {error}") from None
    check_free(addresses)
    http_limits = http_limits or HttpLimits()
    serves_http = bool(sqs_listen or azure_listen or oci_listen or console_listen)
    limits, http_connections, note = fit_to_fd_limit(
        limits or Limits(), http_limits.max_connections if serves_http else 0
    )
    if note:
        log.warning(note)
    http = None
    if serves_http:
        from .frontends.http_site import HttpShared
        from .frontends.http_tls import server_context

        http = HttpShared(
            replace(http_limits, max_connections=max(1, http_connections)),
            server_context(security.tls) if security and security.tls else None,
        )
        _throttle_accept_errors(asyncio.get_running_loop())
    store = open_store(store_url)
    await store.open()
    async with contextlib.AsyncExitStack() as cleanup:
        # Undone in reverse order, whatever fails: the metrics endpoint, the gRPC ports, the
        # store. A started grpc.aio server left to the garbage collector would try to shut
        # itself down on a closed event loop (a traceback at exit).
        cleanup.push_async_callback(store.close)
        metrics = Metrics(process=True) if metrics_listen else None
        built = build(
            store,
            listen,
            security=security,
            limits=limits,
            health_listen=health_listen,
            metrics=metrics,
            max_connection_age=max_connection_age,
            max_connection_age_grace=max_connection_age_grace,
            reuse_port=reuse_port,
        )
        cleanup.push_async_callback(built.stop_now)
        if metrics is not None and metrics_listen:
            endpoint = metrics.serve_http(metrics_listen)
            cleanup.push_async_callback(asyncio.to_thread, endpoint.close)
            log.info("metrics on port %d", endpoint.port)
        if sqs_listen:
            # Before gRPC starts: once health says SERVING, the SQS endpoint answers too.
            sqs = await _start_http_frontend(
                "SQS", store, built, security, sqs_listen, reuse_port, http, sqs_account_id
            )
            cleanup.push_async_callback(sqs.stop)
        if azure_listen:
            azure = await _start_http_frontend(
                "Azure", store, built, security, azure_listen, reuse_port, http
            )
            cleanup.push_async_callback(azure.stop)
        if oci_listen:
            oci = await _start_http_frontend(
                "OCI", store, built, security, oci_listen, reuse_port, http
            )
            cleanup.push_async_callback(oci.stop)
        if console_listen:
            console = await _start_console(built, security, console_listen, http)
            cleanup.push_async_callback(console.stop)
        await built.start()
        _settle_garbage_collector()
        if built.health_port is not None:
            log.info("health on port %d", built.health_port)
        stop = stop or asyncio.Event()
        _install_signal_handlers(cleanup, stop, security)
        log.info(
            "serving %s on port %d (store %s)", SERVICE_NAME, built.port, redact_url(store_url)
        )
        if ready is not None:
            ready(built.port)
        await stop.wait()
        log.info("draining (grace %.1fs)", grace)
        await built.shutdown(grace)


GC_YOUNG_THRESHOLD = 20_000
"""Allocations between two collections of the youngest generation (CPython's default: 700)."""


def _settle_garbage_collector() -> None:
    """Once everything the server keeps for its life is built: freeze it (`gc.freeze`: the
    collector no longer walks the modules, grpc, protobuf descriptors and the store's objects at
    every full collection) and collect the youngest generation less often. The server allocates
    objects per message (DeliveredMessage, LeaseResult, rows) that are freed by reference
    counting, not by the collector; at the default thresholds the collector took a measurable
    share of the server's instructions (docs/performance.md, "Figures behind the code"). Cycles
    are still collected."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(max(gc.get_threshold()[0], GC_YOUNG_THRESHOLD), older, oldest)


def _install_signal_handlers(
    cleanup: contextlib.AsyncExitStack, stop: asyncio.Event, security: Security | None
) -> None:
    """SIGTERM/SIGINT set stop, SIGHUP re-reads the auth policy; removed again by cleanup."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stop.set)
            cleanup.callback(loop.remove_signal_handler, signum)
        except (NotImplementedError, RuntimeError):
            # Not the main thread (or not Unix): the caller stops us through `stop`.
            pass
    reload_policy = getattr(security.policy if security else None, "request_reload", None)
    if reload_policy is not None:
        try:  # SIGHUP re-reads the auth policy file (auth.PolicyFile)
            loop.add_signal_handler(signal.SIGHUP, reload_policy)
            cleanup.callback(loop.remove_signal_handler, signal.SIGHUP)
        except (NotImplementedError, RuntimeError, AttributeError):
            pass


async def _start_http_frontend(
    dialect: str,
    store: Store,
    built: LeaseqServer,
    security: Security | None,
    listen: str,
    reuse_port: bool,
    http: HttpShared | None,
    sqs_account_id: str | None = None,
) -> DialectFrontend:
    """An HTTP front end ("SQS" or "Azure") over the gRPC service's long polls (one set of
    waiters and wake-ups for every dialect)."""
    from .core import QueueCore

    if dialect == "SQS":
        from .frontends.sqs.app import SqsFrontend as Frontend
    elif dialect == "OCI":
        from .frontends.oci.app import OciFrontend as Frontend  # type: ignore[assignment]
    else:
        from .frontends.azure.app import AzureFrontend as Frontend  # type: ignore[assignment]
    frontend = Frontend(
        QueueCore(store, built.service.longpoll),
        security.policy if security else None,
        metrics=built.metrics,
        http=http,
    )
    if sqs_account_id:
        frontend.set_account(sqs_account_id)
    await frontend.start(listen, reuse_port=reuse_port)
    log.info("%s endpoint on port %d", dialect, frontend.port)
    return frontend


async def _start_console(
    built: LeaseqServer, security: Security | None, listen: str, http: HttpShared | None
) -> ConsoleFrontend:
    """The web console over the gRPC service's core (its long polls and traffic counts)."""
    from .frontends.console.app import ConsoleFrontend

    frontend = ConsoleFrontend(
        built.service.core, security.policy if security else None, metrics=built.metrics, http=http
    )
    await frontend.start(listen)
    log.info(
        "web console on %s://%s:%d/",
        frontend.http.scheme,
        listen.rpartition(":")[0] or "127.0.0.1",
        frontend.port,
    )
    return frontend


_ACCEPT_FAILED = "socket.accept() out of system resource"


def _throttle_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio logs a failed accept (no file descriptor left: EMFILE) with a traceback at every
    try, once a second per listener; one record per interval says it as well."""
    from .frontends.http_limits import REFUSAL_LOG_INTERVAL
    from .frontends.throttled_log import ThrottledLog

    throttled = ThrottledLog(logging.getLogger("leaseq.server.http"), REFUSAL_LOG_INTERVAL)
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == _ACCEPT_FAILED:
            throttled.warning(
                "cannot accept connections: %s (the file-descriptor limit, ulimit -n)",
                context.get("exception"),
            )
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
