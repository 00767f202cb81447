"""CPU time of the PostgreSQL backends that serve one `leaseq serve`, for `leaseq bench --store
postgres`: beside the server's own CPU, the database's share of a message's cost.

The bench names the server's connections (its pool and its LISTEN connection) with an
application_name of their own (`with_application_name`); the meter finds their backends in
pg_stat_activity and reads each one's CPU from /proc. So only a database on this machine is
measured: when a backend's process is not here (or is not a postgres process) the figure is
None, never a guess.
"""

from __future__ import annotations

import secrets
import time
from urllib.parse import parse_qsl, urlsplit

from .cpu import process_cpu_seconds
from .launcher import with_query_param

APPLICATION_NAME_PREFIX = "leaseq-bench-"


def with_application_name(url: str) -> str:
    """The store URL with a fresh application_name for the server's connections (one that names
    no one else's)."""
    return with_query_param(url, "application_name", APPLICATION_NAME_PREFIX + secrets.token_hex(6))


def _backend_pids(url: str, application_name: str) -> list[int]:
    import psycopg  # here, as in launcher.py: the bench runs without the postgres extra

    from leaseq.server.store.postgres.settings import parse_url

    # libpq's part of the store URL (the store's own parsing), under a name of its own: this
    # connection's backend is not one of those measured.
    with psycopg.connect(
        parse_url(url).conninfo,
        application_name=APPLICATION_NAME_PREFIX + "meter",
        autocommit=True,
        connect_timeout=10,
    ) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,)
        ).fetchall()
    return [pid for (pid,) in rows]


def _is_postgres(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().strip() == b"postgres"
    except OSError:
        return False


class DatabaseCpuMeter:
    """CPU % of one core used by the backends of `url`'s application_name between start() and
    stop(), and cpu_seconds; None when they cannot be read here. A backend that starts during
    the window (the pool grows) counts from its start; one that ends during it is not counted."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.application_name = dict(parse_qsl(urlsplit(url).query)).get("application_name", "")
        self._cpu0: dict[int, float] | None = None
        self._wall0 = 0.0
        self.cpu_seconds: float | None = None

    def _read(self) -> dict[int, float] | None:
        try:
            pids = _backend_pids(self.url, self.application_name)
        except Exception:  # the database is gone or refuses: no figure
            return None
        cpu: dict[int, float] = {}
        for pid in pids:
            seconds = process_cpu_seconds(pid) if _is_postgres(pid) else None
            if seconds is None:
                return None  # not on this machine (or gone): no figure rather than part of one
            cpu[pid] = seconds
        return cpu or None

    def start(self) -> None:
        self._cpu0 = self._read() if self.application_name else None
        self._wall0 = time.monotonic()

    def stop(self) -> float | None:
        if self._cpu0 is None:
            return None
        wall = time.monotonic() - self._wall0
        now = self._read()
        if now is None or wall <= 0:
            return None
        self.cpu_seconds = sum(seconds - self._cpu0.get(pid, 0.0) for pid, seconds in now.items())
        return round(100.0 * self.cpu_seconds / wall, 2)
