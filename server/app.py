"""Build the grpc.aio server, serve it, and drain it on SIGTERM/SIGINT.

Served: leaseq.v1.QueueService, grpc.health.v1.Health (overall "" and per service
"leaseq.v1.QueueService"), and server reflection.

Shutdown (`LeaseqServer.shutdown`), in this order, so a load balancer and every client learn of
it before connections close:
1. health turns NOT_SERVING at once;
2. the service drains: new RPCs get UNAVAILABLE with RetryInfo, follow streams end cleanly (OK),
   waiting long polls answer now with what they have;
3. `server.stop(grace)`: RPCs in progress get up to `grace` seconds to finish;
4. (serve) the store is closed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from .service import MAX_GRPC_MESSAGE_BYTES, SERVICE_NAME, QueueService, add_to_server
from .store import open_store
from .store.base import Store

log = logging.getLogger(__name__)

SERVER_OPTIONS: list[tuple[str, int]] = [
    # See service.MAX_GRPC_MESSAGE_BYTES for why 64 MiB instead of gRPC's 4 MiB default.
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
]

_HEALTH_NAMES = ("", SERVICE_NAME)


class _Health(health_aio.HealthServicer):
    """The stock aio health servicer, born SERVING for our names: its `set` is a coroutine, and
    the server must answer SERVING from its first RPC, before any coroutine could run."""

    def __init__(self) -> None:
        super().__init__()
        for name in _HEALTH_NAMES:
            self._server_status[name] = health_pb2.HealthCheckResponse.SERVING


@dataclass
class LeaseqServer:
    """A built (not yet started) server and the parts its shutdown needs."""

    server: grpc.aio.Server
    port: int
    service: QueueService
    health: _Health

    async def start(self) -> None:
        await self.server.start()

    async def drain(self) -> None:
        """Steps 1 and 2 of the module docstring; the server keeps running."""
        await self.health.enter_graceful_shutdown()
        self.service.drain()

    async def shutdown(self, grace: float) -> None:
        await self.drain()
        await self.server.stop(grace)


def build(store: Store, listen: str) -> LeaseqServer:
    """Build the server on an opened store; listen is "host:port" (port 0 picks a free one).
    Call from the event loop that will run it."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    service = QueueService(store)
    add_to_server(service, server)
    health = _Health()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME),
        server,
    )
    port = server.add_insecure_port(listen)
    if port == 0:
        raise RuntimeError(f"cannot listen on {listen!r}")
    return LeaseqServer(server, port, service, health)


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
) -> None:
    """Open the store, serve until SIGTERM/SIGINT (or `stop` is set), then drain and close.

    ready(port) is called once the server accepts RPCs (the port matters with ":0")."""
    store = open_store(store_url)
    await store.open()
    try:
        built = build(store, listen)
        await built.start()
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        installed = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(signum, stop.set)
                installed.append(signum)
            except (NotImplementedError, RuntimeError):
                # Not the main thread (or not Unix): the caller stops us through `stop`.
                pass
        try:
            log.info("serving %s on port %d (store %s)", SERVICE_NAME, built.port, store_url)
            if ready is not None:
                ready(built.port)
            await stop.wait()
            log.info("draining (grace %.1fs)", grace)
            await built.shutdown(grace)
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)
            # Makes sure the listener is gone even if the wait above was cancelled.
            await built.server.stop(0)
    finally:
        await store.close()
