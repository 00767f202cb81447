"""Driver-side checks before a Spark job starts: arguments in range, the target reachable.

A mistake found inside a task costs the whole job's retries (each attempt fails the same way,
and a consuming task leases messages before it fails) and surfaces as a Py4J stack trace. Found
here it is one clear exception, raised before Spark runs anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..client import QueueClient
from ..client.errors import LeaseqError
from ..client.retry import RetryPolicy
from ..client.types import Queue
from ._executor import ClientSettings

__all__ = [
    "MAX_LEASE_SECONDS",
    "MAX_WAIT_SECONDS",
    "check_int",
    "check_seconds",
    "driver_client",
    "check_queue",
]

MAX_LEASE_SECONDS = 7 * 86400.0  # docs/api.md: visibility_timeout 0 s .. 7 d
MAX_WAIT_SECONDS = 30.0  # API.md: wait_time 0 .. 30 s

# The driver's own calls: a short deadline and few attempts, so that an unreachable target
# fails in seconds (connection refused: about 0.3 s of backoff; a black hole: 3 x 10 s).
_DRIVER_TIMEOUT = 10.0
_DRIVER_RETRY = RetryPolicy(max_attempts=3)


def check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    """``value`` is an int (not a bool) in ``low .. high``, else ``TypeError``/``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f"at least {low:,}" if high is None else f"between {low:,} and {high:,}"
        raise ValueError(f"{name} must be {bounds}, got {value:,}")


def check_seconds(
    name: str, value: Any, low: float, high: float, *, low_open: bool = False
) -> None:
    """``value`` is a number of seconds in ``low .. high`` (``low`` excluded if ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if value > high or value < low or (low_open and value == low):
        low_text = f"more than {low:g}" if low_open else f"at least {low:g}"
        raise ValueError(f"{name} must be {low_text} and at most {high:g} seconds, got {value:g}")


@contextmanager
def driver_client(settings: ClientSettings) -> Iterator[QueueClient]:
    """A short-lived client for the driver's own calls (made after the SparkSession exists,
    which is the start-up order the package docstring asks for)."""
    client = QueueClient(
        settings.target, token=settings.token, timeout=_DRIVER_TIMEOUT, retry=_DRIVER_RETRY
    )
    try:
        yield client
    finally:
        client.close()


def check_queue(settings: ClientSettings, queue: str, caller: str) -> Queue:
    """``GetQueue`` from the driver: the target answers and the queue exists (and the token is
    accepted), else the client's error (``Unavailable``, ``QueueNotFound``, ``Unauthenticated``,
    ...), its text prefixed with ``caller``, the target and the queue, before any task runs."""
    with driver_client(settings) as client:
        try:
            return client.get_queue(queue)
        except LeaseqError as error:
            # Same type and attributes (callers catch Unavailable, QueueNotFound, ...), a
            # message that says which call could not use what.
            error.args = (f"{caller}: cannot use queue {queue!r} at {settings.target}: {error}",)
            raise
