"""Why a SQLite store cannot be opened, in one line (`StoreOpenError`), instead of SQLite's
"unable to open database file" or a traceback.

SQLite does not say which of the usual reasons it met (a directory, no permission, a read-only
file system, a parent that is a file), so `check_path` looks first, with the same calls SQLite
would make, and turns the OS error into words; `explain` words the SQLite errors that remain.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from .. import StoreOpenError


def cannot_open(path: Path, reason: str) -> StoreOpenError:
    return StoreOpenError(f"cannot open the SQLite store {path}: {reason}")


def check_path(path: Path) -> None:
    """Create the file's directory, then the file itself if missing (SQLite would create both),
    and check that SQLite can write its -wal and -shm files next to it."""
    if path.is_dir():
        raise cannot_open(
            path, "it is a directory (name a file in it, e.g. sqlite:///DIR/leaseq.db)"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a component of the path is a file
        raise cannot_open(path, f"{_first_file(path.parent)} is not a directory") from None
    except OSError as error:
        raise cannot_open(path, f"cannot create its directory: {error.strerror}") from None
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
    except OSError as error:
        raise cannot_open(path, f"cannot write it: {error.strerror}") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise cannot_open(
            path, "its directory is not writable (SQLite keeps its -wal and -shm files there)"
        )


def explain(path: Path, error: sqlite3.Error) -> StoreOpenError:
    if isinstance(error, sqlite3.DatabaseError) and "not a database" in str(error):
        return cannot_open(path, "the file is not a SQLite database")
    return cannot_open(path, str(error))


def _first_file(directory: Path) -> Path:
    """The first component of directory that exists and is not a directory."""
    for part in reversed([directory, *directory.parents]):
        if part.exists() and not part.is_dir():
            return part
    return directory
