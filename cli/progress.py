"""A long poll that shows it is waiting: ``leaseq receive`` may sit silent for up to 30 s (the
queue's receive_wait_time), which looks like a hang in a terminal.

Only when stderr is a terminal and the output is for people: never in --json, in a pipe, a log
file or a test. The line is transient (rich's status spinner): it is erased when the call
returns, so nothing of it stays in the scroll-back.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from rich.console import Console

from .output import seconds_text


@contextmanager
def waiting(queue: str, wait: float | None, *, quiet: bool) -> Iterator[None]:
    """Show "waiting ... for a message on QUEUE" on stderr while the block runs."""
    stderr = sys.stderr
    if quiet or wait == 0 or not stderr.isatty():
        yield
        return
    how_long = "the queue's wait time" if wait is None else seconds_text(timedelta(seconds=wait))
    console = Console(file=stderr)
    with console.status(f"waiting up to {how_long} for a message on {queue} (Ctrl-C to stop)"):
        yield
