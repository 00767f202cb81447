"""Message stores behind one protocol (base.Store). open_store(url) picks the backend by URL:

- ``memory://``                     the reference implementation; nothing survives a restart
- ``sqlite:///relative/or/abs.db``  the embedded default: one durable file (WAL)
- ``postgresql://...``              many server replicas over one database; query parameters
                                    ``schema``, ``pool_min``, ``pool_max`` (see postgres/)
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from ..clock import Clock
from .base import Store


class StoreOpenError(RuntimeError):
    """A store that cannot be opened (a file that is not a database, a directory, no permission,
    a database server that is down or has no such database). The message is one line that names
    the store and the cause; ``leaseq serve`` prints it as it is."""


def open_store(url: str, clock: Clock | None = None) -> Store:
    """An unopened store for url; call ``await store.open()`` before use."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        from .memory import MemoryStore

        return MemoryStore(clock=clock)
    if scheme == "sqlite":
        path, _, query = url[len("sqlite://") :].partition("?")
        durability = _sqlite_parameters(url, query)
        # sqlite:///abs/path -> "/abs/path"; sqlite:///./rel -> "/./rel" is relative to the cwd.
        if path.startswith("/./") or path.startswith("/../"):
            path = path[1:]
        elif path.startswith("//"):  # sqlite:////abs/path (SQLAlchemy's spelling) is /abs/path too
            path = "/" + path.lstrip("/")
        if not path or path == "/":
            raise ValueError(f"store URL {url!r} names no file")
        return _sqlite(Path(path), clock, durability)
    if scheme in ("postgresql", "postgres"):
        try:
            from .postgres import PostgresStore
        except ImportError as error:  # the [postgres] extra is not installed
            raise ValueError(
                f"the PostgreSQL store needs psycopg: pip install 'leaseq[postgres]' ({error})"
            ) from error
        return PostgresStore.from_url(url, clock=clock)
    raise ValueError(f"unknown store URL {url!r}: use memory://, sqlite:///path or postgresql://")


def redact_url(url: str) -> str:
    """The store URL without a password, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _sqlite_parameters(url: str, query: str) -> str:
    """The SQLite URL's one parameter, durability=full|relaxed (full when absent)."""
    durability = "full"
    for name, values in parse_qs(query, keep_blank_values=True).items():
        if name != "durability":
            raise ValueError(
                f"store URL {url!r}: unknown parameter {name!r} (SQLite takes durability)"
            )
        durability = values[-1]
        if durability not in ("full", "relaxed"):
            raise ValueError(
                f"store URL {url!r}: durability must be full or relaxed, not {durability!r}"
            )
    return durability


def _sqlite(path: Path, clock: Clock | None, durability: str) -> Store:
    from .sqlite import SqliteStore

    return SqliteStore(path, clock=clock, durability=durability)


__all__ = ["Store", "StoreOpenError", "open_store", "redact_url"]
