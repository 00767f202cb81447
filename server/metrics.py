"""Prometheus metrics: a server interceptor for the RPCs and a scrape-time collector for the store.

Nothing here is called by the handlers or the stores: `MetricsInterceptor` sees every RPC (its
request, its responses, its final code) and `StoreCollector` asks the store for each queue's stats
when Prometheus scrapes. `leaseq serve --metrics-listen HOST:PORT` serves them at /metrics.

This server's RPCs (counted by the interceptor, per process):

    leaseq_rpcs_handled_total{service,method,code}       every finished RPC
    leaseq_rpc_duration_seconds{service,method,code}     histogram; every RPC but follow streams
                                                         (their length is a session, not a latency)
    leaseq_rpcs_in_flight{service,method}                RPCs running now
    leaseq_receive_streams_in_flight{mode}               GetMessages now open: mode follow|long_poll
    leaseq_messages_sent_total{queue}                    enqueued by SendMessages (not duplicates)
    leaseq_messages_received_total{queue}                delivered by GetMessages
    leaseq_messages_deleted_total{queue}                 acknowledged by DeleteMessages

The store (shared by every replica: aggregate with max() by queue, not sum()):

    leaseq_queue_messages{queue,state}                   state visible|leased|delayed
    leaseq_queue_oldest_visible_age_seconds{queue}
    leaseq_queue_dead_lettered_total{queue}              moved from the queue to its dead letter queue
    leaseq_queue_expired_total{queue}
    leaseq_queue_deleted_total{queue}                    deletes through any replica
    leaseq_queues                                        queues reported (at most max_queues)
    leaseq_store_up                                      1 when the last stats collection worked
    leaseq_store_stats_duration_seconds                  how long it took

Scrapes stay cheap: the stats are collected at most once per `stats_ttl` seconds (concurrent
scrapes share one collection), bounded by `stats_timeout` seconds (then leaseq_store_up is 0 and
the queue series are left out), for at most `max_queues` queues in name order.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import grpc
import grpc.aio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from leaseq.v1 import queue_service_pb2 as pb

from .addresses import AddressInUse, StartupError, parse_listen
from .convert import Wire
from .domain.types import QueueStats
from .errors import QueueNotFound
from .interceptors import Observation, ObservedHandlers, Start
from .service import SERVICE_NAME
from .store.base import Store

log = logging.getLogger(__name__)

RPC_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
STATS_TTL = 5.0
STATS_TIMEOUT = 3.0
MAX_QUEUES = 1000
_PAGE = 500


# --- the RPC side -------------------------------------------------------------------------------


# A hot response may come as convert.Wire (its wire bytes): it carries its count. The class
# test is faster than isinstance() but does not narrow the type for mypy: hence the ignores.


def _sent(response: pb.SendMessagesResponse | Wire) -> int:
    if response.__class__ is Wire:
        return response.count
    return sum(1 for r in response.results if not r.HasField("error") and not r.duplicate)  # type: ignore[union-attr,misc]


def _received(response: pb.GetMessagesResponse | Wire) -> int:
    if response.__class__ is Wire:
        return response.count
    return len(response.messages)  # type: ignore[union-attr]


def _deleted(response: pb.DeleteMessagesResponse | Wire) -> int:
    if response.__class__ is Wire:
        return response.count
    acked = sum(1 for r in response.results if r.status == pb.LEASE_STATUS_OK)  # type: ignore[union-attr,misc]
    return acked + sum(a.deleted_count for a in response.attempt_results)  # type: ignore[union-attr,misc]


class Metrics:
    """The metrics of one server, in their own registry (several servers may share a process)."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        process: bool = False,
        stats_ttl: float = STATS_TTL,
        stats_timeout: float = STATS_TIMEOUT,
        max_queues: int = MAX_QUEUES,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.stats_ttl = stats_ttl
        self.stats_timeout = stats_timeout
        self.max_queues = max_queues
        if process:  # the process's CPU, memory, file descriptors, GC: for `leaseq serve`
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        r = self.registry
        self.handled = Counter(
            "leaseq_rpcs_handled", "Finished RPCs.", ["service", "method", "code"], registry=r
        )
        self.duration = Histogram(
            "leaseq_rpc_duration_seconds",
            "RPC latency (follow streams are left out).",
            ["service", "method", "code"],
            buckets=RPC_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "leaseq_rpcs_in_flight", "RPCs running now.", ["service", "method"], registry=r
        )
        self.streams = Gauge(
            "leaseq_receive_streams_in_flight",
            "GetMessages streams open now (mode follow or long_poll).",
            ["mode"],
            registry=r,
        )
        for mode in ("follow", "long_poll"):
            self.streams.labels(mode)
        self.sent = Counter(
            "leaseq_messages_sent", "Messages enqueued by SendMessages.", ["queue"], registry=r
        )
        self.received = Counter(
            "leaseq_messages_received", "Messages delivered by GetMessages.", ["queue"], registry=r
        )
        self.deleted = Counter(
            "leaseq_messages_deleted", "Messages deleted by DeleteMessages.", ["queue"], registry=r
        )
        self._counts = {
            "SendMessages": (self.sent, _sent),
            "GetMessages": (self.received, _received),
            "DeleteMessages": (self.deleted, _deleted),
        }
        self.store_collector: StoreCollector | None = None

    def interceptor(self) -> MetricsInterceptor:
        return MetricsInterceptor(self)

    def watch_store(self, store: Store, loop: asyncio.AbstractEventLoop) -> None:
        """Report store's queues at scrape time; store belongs to loop (call from loop's thread)."""
        self.store_collector = StoreCollector(
            store,
            loop,
            ttl=self.stats_ttl,
            timeout=self.stats_timeout,
            max_queues=self.max_queues,
        )
        self.registry.register(self.store_collector)

    def forget_queue(self, queue: str) -> None:
        """Drop a deleted queue's series (they would otherwise stay until the process ends)."""
        for counter in (self.sent, self.received, self.deleted):
            try:
                counter.remove(queue)
            except KeyError:
                pass

    def serve_http(self, listen: str, **limits: Any) -> MetricsEndpoint:
        """limits: MetricsEndpoint.start's max_connections and idle_timeout."""
        return MetricsEndpoint.start(listen, self.registry, **limits)


class _RpcMetrics(Observation):
    def __init__(
        self, metrics: Metrics, context: Any, service: str, method: str, request: Any
    ) -> None:
        super().__init__(context)
        self.metrics = metrics
        self.service = service
        self.method = method
        ours = service == SERVICE_NAME
        # Message RPCs name their queue `queue`, queue RPCs `name`.
        self.queue = (getattr(request, "queue", "") or getattr(request, "name", "")) if ours else ""
        self.counter = metrics._counts.get(method) if ours and self.queue else None
        self.mode = None
        if ours and method == "GetMessages" and request is not None:
            self.mode = "follow" if getattr(request, "follow", False) else "long_poll"
            metrics.streams.labels(self.mode).inc()
        metrics.in_flight.labels(service, method).inc()
        self.started = time.perf_counter()

    def response(self, response: Any) -> None:
        if self.counter is not None:
            counter, count = self.counter
            n = count(response)
            if n:
                counter.labels(self.queue).inc(n)

    def end(self, code: grpc.StatusCode) -> None:
        m = self.metrics
        # Count the call before its gauges drop: a scrape (another thread) that sees a call gone
        # from the in-flight gauges then also sees it in the counters and histograms.
        m.handled.labels(self.service, self.method, code.name).inc()
        if self.mode != "follow":
            elapsed = time.perf_counter() - self.started
            m.duration.labels(self.service, self.method, code.name).observe(elapsed)
        m.in_flight.labels(self.service, self.method).dec()
        if self.mode is not None:
            m.streams.labels(self.mode).dec()
        if (
            code == grpc.StatusCode.OK
            and self.method == "DeleteQueue"
            and self.service == SERVICE_NAME
        ):
            m.forget_queue(self.queue)


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._observed = ObservedHandlers(self._start_for)

    def _start_for(self, service: str, method: str) -> Start:
        def start(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Observation:
            return _RpcMetrics(self.metrics, context, service, method, request)

        return start

    async def intercept_service(
        self, continuation: Any, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        return self._observed.get(handler_call_details.method, handler)


# --- the store side -----------------------------------------------------------------------------


@dataclass
class _Snapshot:
    stats: dict[str, QueueStats]
    ok: bool
    duration: float
    taken: float  # time.monotonic()


class StoreCollector(Collector):
    """Per-queue gauges and counters from the store's stats, collected at scrape time (in the
    metrics endpoint's thread: the store is called on its own event loop, and waited for)."""

    def __init__(
        self,
        store: Store,
        loop: asyncio.AbstractEventLoop,
        *,
        ttl: float = STATS_TTL,
        timeout: float = STATS_TIMEOUT,
        max_queues: int = MAX_QUEUES,
    ) -> None:
        self._store = store
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self.ttl = ttl
        self.timeout = timeout
        self.max_queues = max_queues
        self._lock = threading.Lock()  # one collection at a time; other scrapes wait for it
        self._snapshot: _Snapshot | None = None

    async def _gather(self) -> dict[str, QueueStats]:
        names: list[str] = []
        after: str | None = None
        while len(names) < self.max_queues:
            limit = min(_PAGE, self.max_queues - len(names))
            page = await self._store.list_queues("", after, limit)
            names.extend(q.name for q in page)
            if len(page) < limit:
                break
            after = page[-1].name
        stats: dict[str, QueueStats] = {}
        for name in names:
            try:
                stats[name] = await self._store.stats(name)
            except QueueNotFound:
                pass  # deleted since it was listed
        return stats

    def snapshot(self) -> _Snapshot:
        with self._lock:
            now = time.monotonic()
            cached = self._snapshot
            if cached is not None and now - cached.taken < self.ttl:
                return cached
            if threading.get_ident() == self._loop_thread:
                # Called on the store's own loop: waiting here would deadlock it.
                return cached or _Snapshot({}, False, 0.0, now)
            started = time.perf_counter()
            try:
                future = asyncio.run_coroutine_threadsafe(self._gather(), self._loop)
            except RuntimeError:  # the loop is closed: the server has stopped
                return _Snapshot({}, False, 0.0, now)
            try:
                stats, ok = future.result(self.timeout), True
            except Exception as error:  # a timeout, or the store failed
                future.cancel()
                log.warning("store stats for metrics failed: %s", error or type(error).__name__)
                stats, ok = {}, False
            self._snapshot = _Snapshot(stats, ok, time.perf_counter() - started, time.monotonic())
            return self._snapshot

    def describe(self) -> Iterable[Metric]:
        return list(self._families(_Snapshot({}, True, 0.0, 0.0)))

    def collect(self) -> Iterable[Metric]:
        return list(self._families(self.snapshot()))

    @staticmethod
    def _families(snap: _Snapshot) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "leaseq_queue_messages", "Messages in the queue by state.", labels=["queue", "state"]
        )
        age = GaugeMetricFamily(
            "leaseq_queue_oldest_visible_age_seconds",
            "Age of the oldest visible message (0 when none).",
            labels=["queue"],
        )
        dead = CounterMetricFamily(
            "leaseq_queue_dead_lettered",
            "Messages moved from the queue to its dead letter queue.",
            labels=["queue"],
        )
        expired = CounterMetricFamily(
            "leaseq_queue_expired", "Messages that expired in the queue.", labels=["queue"]
        )
        deleted = CounterMetricFamily(
            "leaseq_queue_deleted", "Messages deleted from the queue.", labels=["queue"]
        )
        for name, s in sorted(snap.stats.items()):
            depth.add_metric([name, "visible"], s.visible)
            depth.add_metric([name, "leased"], s.leased)
            depth.add_metric([name, "delayed"], s.delayed)
            age.add_metric([name], s.oldest_visible_age)
            dead.add_metric([name], s.dead_lettered_total)
            expired.add_metric([name], s.expired_total)
            deleted.add_metric([name], s.deleted_total)
        yield from (depth, age, dead, expired, deleted)
        yield GaugeMetricFamily("leaseq_queues", "Queues reported.", value=len(snap.stats))
        yield GaugeMetricFamily(
            "leaseq_store_up", "1 when the last store stats collection worked.", value=int(snap.ok)
        )
        yield GaugeMetricFamily(
            "leaseq_store_stats_duration_seconds",
            "How long the last store stats collection took.",
            value=snap.duration,
        )


# --- the endpoint -------------------------------------------------------------------------------


ENDPOINT_MAX_CONNECTIONS = 64
"""Connections the /metrics endpoint serves at once (a thread each); more are closed at once."""
ENDPOINT_IDLE_TIMEOUT = 10.0
"""Seconds a /metrics connection may stay silent before it is closed."""


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # no line per scrape on stderr


def _server_class(host: str, max_connections: int) -> type[WSGIServer]:
    """A threading WSGI server that serves at most max_connections connections at once: each
    holds a thread and a file descriptor, so a flood of idle connections must not be able to
    take them all (the handler's timeout closes the idle ones)."""
    try:
        ipv6 = ipaddress.ip_address(host).version == 6
    except ValueError:
        ipv6 = False

    class _Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ipv6 else socket.AF_INET
        slots = threading.BoundedSemaphore(max_connections)

        def process_request(self, request: Any, client_address: Any) -> None:
            if not self.slots.acquire(blocking=False):
                self.shutdown_request(request)  # full: closed at once, not queued
                return
            try:
                super().process_request(request, client_address)
            except BaseException:
                self.slots.release()
                raise

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                self.slots.release()

        def handle_error(self, request: Any, client_address: Any) -> None:
            # A client that went silent (the handler's timeout) or away: nothing to report
            # (the base class prints a traceback to stderr).
            pass

    return _Server


class MetricsEndpoint:
    """An HTTP server for /metrics in a daemon thread (prometheus_client's WSGI app)."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        self.port: int = httpd.server_address[1]

    @classmethod
    def start(
        cls,
        listen: str,
        registry: CollectorRegistry,
        *,
        max_connections: int = ENDPOINT_MAX_CONNECTIONS,
        idle_timeout: float = ENDPOINT_IDLE_TIMEOUT,
    ) -> MetricsEndpoint:
        """Bind now (StartupError, one line, when the address is bad or in use), serve in a thread."""
        try:
            address = parse_listen(listen, example_port=9090)
        except ValueError as error:
            raise StartupError(f"metrics address {error}") from None
        try:
            httpd = make_server(
                address.host,
                address.port,
                make_wsgi_app(registry),
                _server_class(address.host, max_connections),
                # StreamRequestHandler.timeout: a silent connection is closed after it.
                handler_class=type("_Handler", (_QuietHandler,), {"timeout": idle_timeout}),
            )
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise AddressInUse(address) from None
            raise StartupError(f"cannot listen on {address}: {error.strerror or error}") from None
        # A short poll interval: close() waits for the serving loop to notice.
        thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="leaseq-metrics",
            daemon=True,
        )
        thread.start()
        return cls(httpd, thread)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
