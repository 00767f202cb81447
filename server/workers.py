"""Several server processes on one host behind the same ports: ``leaseq serve --workers N``.

Why: one server process runs its Python on one core (the GIL), whatever the host has. N workers
are N full servers (gRPC, store pool, long polls) over one PostgreSQL database, exactly like N
replicas, except that they share the listen port: each binds it with SO_REUSEPORT and the kernel
spreads incoming connections over them. Wake-ups cross workers as they cross replicas (the
store's LISTEN/NOTIFY), leases are the database's, so nothing else is shared. Only the PostgreSQL
store can do this: a SQLite file has one writer, memory is one process's (the CLI refuses).

The parent (`run_workers`) serves nothing itself:

- it checks every address is free (a second, separate ``leaseq serve`` on a busy port still
  fails: SO_REUSEPORT is on only among the workers of one parent), then holds each shared port
  with a bound, non-listening SO_REUSEPORT socket (port 0 is resolved once, for all workers; a
  non-listening socket receives no connections);
- it starts the workers (fresh interpreters: gRPC does not survive fork) and reports ready once
  every worker is; a worker that fails to start stops the whole server with that worker's one-line
  message (a store that is down fails N workers alike);
- a worker that dies after it served is restarted (the others go on serving; clients on its
  connections reconnect and land on the others meanwhile); more than RESTARTS_PER_MINUTE deaths in
  a minute and the parent drains the rest and exits 1;
- SIGTERM or SIGINT drain every worker (each one drains as a single server does: health
  NOT_SERVING, long polls answered, grace for calls in progress); the parent exits 0 when every
  worker exited 0, else 1. A second SIGINT kills the workers (exit 130).

The listeners:

    --listen           every worker, SO_REUSEPORT (the point of it all)
    --health-listen    every worker, SO_REUSEPORT: a probe asks whichever worker it reaches; all
                       drain together, so readiness is the server's
    --sqs-listen       every worker, SO_REUSEPORT (aiohttp's reuse_port), like --listen
    --azure-listen     every worker, SO_REUSEPORT, like --sqs-listen (queue metadata, which the
                       Azure front end keeps in memory, is then each worker's own)
    --metrics-listen   worker 0 only: the queue figures (read from the store) are the whole
                       server's, the RPC counters and process figures are worker 0's own share
                       (one process per scrape target; counters that jumped between workers
                       would be useless to Prometheus)
    --oci-listen       worker 0 only: its work requests (what admin writes answer, polled by
                       the SDK's waiters) live in one process's memory
    --console-listen   worker 0 only: its sign-in sessions live in one process's memory (a
                       request reaching another worker would be signed out); its counts are the
                       store's, its send/ack rates worker 0's own share

Every log record of a worker carries ``worker`` (its index).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from .addresses import ListenAddress, StartupError, check_free, parse_listen

log = logging.getLogger(__name__)

RESTARTS_PER_MINUTE = 5
# After the grace, what a worker may still need: settling leases, closing the store.
DRAIN_MARGIN = 30.0

_SHARED = (
    "listen",
    "health_listen",
    "sqs_listen",
    "azure_listen",
)  # served by every worker (SO_REUSEPORT)


@dataclass
class _Worker:
    index: int
    process: Any  # multiprocessing's SpawnProcess
    conn: multiprocessing.connection.Connection
    ready: bool = False
    error: str | None = None
    started: float = field(default_factory=time.monotonic)


def run_workers(
    count: int,
    store_url: str,
    listen: str,
    options: dict[str, Any],
    *,
    logging_setup: tuple[str, str],
    ready: Callable[[int], object] | None = None,
) -> int:
    """Run count workers until SIGTERM/SIGINT; the exit status (0: every worker drained).

    options: app.serve's keyword arguments (picklable: they travel to fresh interpreters);
    logging_setup: configure_logging's (level, format) for the workers. Start-up failures raise
    StartupError with one line."""
    texts = {"listen": listen, **{k: options.get(k) for k in _SHARED[1:]}}
    parsed = {k: parse_listen(v) for k, v in texts.items() if v}
    alone = [
        options[k] for k in ("metrics_listen", "console_listen", "oci_listen") if options.get(k)
    ]
    check_free([*parsed.values(), *(parse_listen(text) for text in alone)])
    with ExitStack() as held:
        shared = {}
        for name, address in parsed.items():
            sock = _reserve(address)
            held.callback(sock.close)
            shared[name] = f"{_host_text(address)}:{sock.getsockname()[1]}"
        return _Supervisor(count, store_url, shared, options, logging_setup).run(ready)


def _host_text(address: ListenAddress) -> str:
    return f"[{address.host}]" if ":" in address.host else address.host


def _reserve(address: ListenAddress) -> socket.socket:
    """Hold a port for the workers: bound with SO_REUSEPORT only (a separate server's bind, with
    SO_REUSEADDR alone, conflicts with it), never listening (so it takes no connections)."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    infos = socket.getaddrinfo(address.host or None, address.port, family, socket.SOCK_STREAM)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(infos[0][4])
    except OSError as error:
        sock.close()
        raise StartupError(f"cannot listen on {address}: {error.strerror}") from None
    return sock


class _Supervisor:
    def __init__(
        self,
        count: int,
        store_url: str,
        shared: dict[str, str],
        options: dict[str, Any],
        logging_setup: tuple[str, str],
    ) -> None:
        self.count = count
        self.store_url = store_url
        self.shared = shared
        self.options = options
        self.logging_setup = logging_setup
        self.context = multiprocessing.get_context("spawn")
        self.workers: dict[int, _Worker] = {}
        self.deaths: list[float] = []
        self.signals: list[int] = []

    def start(self, index: int) -> None:
        options = {**self.options, **{k: v for k, v in self.shared.items() if k != "listen"}}
        if index != 0:
            options["metrics_listen"] = None
            options["console_listen"] = None
            options["oci_listen"] = None
        parent_end, child_end = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=worker_main,
            args=(
                index,
                child_end,
                self.store_url,
                self.shared["listen"],
                options,
                self.logging_setup,
            ),
            name=f"leaseq-worker-{index}",
        )
        process.start()
        child_end.close()
        self.workers[index] = _Worker(index, process, parent_end)

    def run(self, ready: Callable[[int], object] | None) -> int:
        wake_read, wake_write = socket.socketpair()
        wake_read.setblocking(False)
        wake_write.setblocking(False)
        previous = {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGTERM, signal.SIGINT)
        }
        old_fd = signal.set_wakeup_fd(wake_write.fileno())
        try:
            for index in range(self.count):
                self.start(index)
            status = self._serve(ready, wake_read)
        finally:
            signal.set_wakeup_fd(old_fd)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            wake_read.close()
            wake_write.close()
        return status

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)

    def _wait(self, wake: socket.socket, timeout: float | None) -> list[Any]:
        waitables: list[Any] = [wake]
        for worker in self.workers.values():
            waitables += [worker.process.sentinel, worker.conn]
        got = multiprocessing.connection.wait(waitables, timeout)
        if wake in got:
            try:
                while wake.recv(64):
                    pass
            except BlockingIOError:
                pass
        return got

    def _serve(self, ready: Callable[[int], object] | None, wake: socket.socket) -> int:
        announced = False
        while not self.signals:
            self._wait(wake, None)
            for worker in list(self.workers.values()):
                self._read_messages(worker)
                if worker.process.is_alive():
                    continue
                worker.process.join()
                if not announced:
                    # Failed to start: as a single server would, stop with its reason.
                    log.error(
                        "worker %d failed to start (exit %s)",
                        worker.index,
                        worker.process.exitcode,
                    )
                    self._drain(wake)
                    raise StartupError(worker.error or f"worker {worker.index} failed to start")
                if not self._may_restart():
                    log.error("workers keep dying (%d in a minute): stopping", len(self.deaths))
                    self._drain(wake)
                    return 1
                log.warning(
                    "worker %d (pid %d) exited with %s: restarting it",
                    worker.index,
                    worker.process.pid,
                    worker.process.exitcode,
                )
                worker.conn.close()
                self.start(worker.index)
            if not announced and all(w.ready for w in self.workers.values()):
                announced = True
                if ready is not None:
                    ready(int(self.shared["listen"].rpartition(":")[2]))
        log.info("draining %d workers", len(self.workers))
        return self._drain(wake)

    def _read_messages(self, worker: _Worker) -> None:
        try:
            while worker.conn.poll():
                kind, value = worker.conn.recv()
                if kind == "ready":
                    worker.ready = True
                elif kind == "error":
                    worker.error = value
        except (EOFError, OSError):
            pass

    def _may_restart(self) -> bool:
        now = time.monotonic()
        self.deaths = [t for t in self.deaths if now - t < 60.0] + [now]
        return len(self.deaths) <= RESTARTS_PER_MINUTE

    def _drain(self, wake: socket.socket) -> int:
        """SIGTERM every worker, wait for all; 0 when all exited 0."""
        for worker in self.workers.values():
            if worker.process.is_alive():
                os.kill(worker.process.pid, signal.SIGTERM)
        grace = float(self.options.get("grace", 10.0))
        deadline = time.monotonic() + grace + DRAIN_MARGIN
        interrupts = self.signals.count(signal.SIGINT)
        while any(w.process.is_alive() for w in self.workers.values()):
            left = deadline - time.monotonic()
            if left <= 0 or self.signals.count(signal.SIGINT) > max(interrupts, 1):
                for worker in self.workers.values():
                    if worker.process.is_alive():
                        worker.process.kill()
                for worker in self.workers.values():
                    worker.process.join()
                return 130 if left > 0 else 1
            self._wait(wake, left)
        status = 0
        for worker in self.workers.values():
            worker.process.join()
            self._read_messages(worker)
            worker.conn.close()
            if worker.process.exitcode != 0:
                log.warning("worker %d exited with %s", worker.index, worker.process.exitcode)
                status = 1
        return status


class _WorkerField(logging.Filter):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.index
        return True


def worker_main(
    index: int,
    conn: multiprocessing.connection.Connection,
    store_url: str,
    listen: str,
    options: dict[str, Any],
    logging_setup: tuple[str, str],
) -> None:
    """One worker (a fresh interpreter): app.serve on the shared ports until SIGTERM."""
    import asyncio

    from .app import serve
    from .logs import configure_logging

    configure_logging(logging_setup[0], logging_setup[1], sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_WorkerField(index))

    def ready(port: int) -> None:
        conn.send(("ready", port))

    try:
        asyncio.run(serve(store_url, listen, ready=ready, reuse_port=True, **options))
    except (ValueError, RuntimeError, OSError) as error:
        log.debug("worker %d failed", index, exc_info=True)
        conn.send(("error", str(error)))
        sys.exit(1)
    finally:
        conn.close()
