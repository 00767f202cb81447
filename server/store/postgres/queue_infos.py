"""get_queue's answers kept in memory (QueueInfos), so that a send or a receive does not read the
queue's row once for the service and again in its own statement (see the package docstring,
Queue configurations).

The promise: a replica answers get_queue from memory only while its LISTEN connection is up, and
every change of a queue's row (create, update, delete) sends a notification inside its own
transaction, so the replica drops the entry when it hears of the commit; an entry read before it
and answered after it is never kept (the generation below). So a replica may use a configuration
older than the newest committed one only between that commit and the moment its listener hears
of it (the notification's delay: milliseconds), and in any case never an entry older than
QUEUE_INFO_SECONDS (a listener that is stuck without noticing). The statements of the store
itself never use these answers: they read the queue's row as they run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...domain.types import QueueInfo

# The payload's first word (where other notifications carry their replica's origin) for a change
# of a queue's row: "config <origin> <queue>". A replica of an older leaseq takes it for another
# replica's wake-up of a queue named "<origin> <queue>": harmless.
CONFIG_ORIGIN = "config"


class QueueInfos:
    """name -> (QueueInfo, when it was read), valid while `enabled`."""

    def __init__(self, max_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age = max_age
        self.clock = clock
        self.enabled = False  # the LISTEN connection is up: changes are heard
        # Bumped by every forget/clear: an answer read under an older generation may predate the
        # change and is not kept.
        self.generation = 0
        self._entries: dict[str, tuple[QueueInfo, float]] = {}

    def get(self, name: str) -> QueueInfo | None:
        if not self.enabled:
            return None
        entry = self._entries.get(name)
        if entry is None:
            return None
        info, read_at = entry
        if self.clock() - read_at >= self.max_age:
            del self._entries[name]
            return None
        return info

    def start_read(self) -> tuple[int, float]:
        """Before reading a queue's row: what `keep` needs to know the answer is still current."""
        return self.generation, self.clock()

    def keep(self, info: QueueInfo, started: tuple[int, float]) -> None:
        """Keep an answer read after start_read(), unless something changed since."""
        generation, read_at = started
        if self.enabled and generation == self.generation:
            self._entries[info.name] = (info, read_at)

    def forget(self, name: str) -> None:
        """The queue's row changed (or may have)."""
        self.generation += 1
        self._entries.pop(name, None)

    def clear(self) -> None:
        """Changes may have been missed (the listener went down or came up)."""
        self.generation += 1
        self._entries.clear()

    def set_enabled(self, enabled: bool) -> None:
        self.clear()
        self.enabled = enabled
