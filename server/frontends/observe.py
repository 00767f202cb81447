"""The access log and the RPC metrics of an HTTP front end's requests, shared by every dialect so
that their records and labels look alike (and like gRPC's: metrics.py, logs.py)."""

from __future__ import annotations

import logging
import time
from typing import Any

from ..metrics import Metrics

access_log = logging.getLogger("leaseq.access")


def log_request(
    service: str, method: str, queue: str, status: int, started: float, peer: str
) -> None:
    """One access log record: DEBUG for success, INFO for a 4xx, WARNING for a 5xx. Never a
    body, attribute, receipt or credential."""
    level = logging.WARNING if status >= 500 else logging.DEBUG if status < 400 else logging.INFO
    if not access_log.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "rpc_service": service,
        "rpc_method": method or "-",
        "http_status": status,
        "duration_ms": round((time.monotonic() - started) * 1000, 3),
        "peer": peer,
    }
    if queue:
        fields["queue"] = queue
    access_log.log(
        level,
        "%s.%s %d %.1fms",
        service,
        method or "-",
        status,
        fields["duration_ms"],
        extra=fields,
    )


def count_request(
    metrics: Metrics,
    service: str,
    method: str,
    outcome: str,
    started: float,
    queue: str = "",
    messages: tuple[str, int] | None = None,
) -> None:
    """The request in the RPC metrics (`method` must be one of the dialect's fixed names or "-":
    client text never becomes a label); messages: (Metrics counter attribute, count) of the
    messages it sent, received or deleted, counted per queue as gRPC's are."""
    metrics.handled.labels(service, method, outcome).inc()
    metrics.duration.labels(service, method, outcome).observe(time.monotonic() - started)
    if queue and messages is not None and messages[1]:
        counter, n = messages
        getattr(metrics, counter).labels(queue).inc(n)
