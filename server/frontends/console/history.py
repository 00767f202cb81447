"""Each queue's depth (total messages) per second over the last minutes, as the console read it
from the stats: the depth line of the charts, so that a page opened now shows the minutes before.

Samples are taken only when a console page reads a queue's stats (at most one per queue and
second, whoever is looking), never by a background scan: seconds when nobody looked are gaps.
Bounded like traffic.py: one deque of at most WINDOW_SECONDS samples per queue viewed, and at
most MAX_QUEUES queues (the least recently sampled is forgotten first).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

from ...traffic import WINDOW_SECONDS

MAX_QUEUES = 10_000


class DepthHistory:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._queues: OrderedDict[str, deque[tuple[int, int]]] = OrderedDict()

    def record(self, queue: str, depth: int) -> None:
        second = int(self._clock())
        samples = self._queues.get(queue)
        if samples is None:
            while len(self._queues) >= MAX_QUEUES:
                self._queues.popitem(last=False)
            samples = self._queues[queue] = deque(maxlen=WINDOW_SECONDS)
        self._queues.move_to_end(queue)
        if samples and samples[-1][0] == second:
            samples[-1] = (second, depth)
        else:
            samples.append((second, depth))

    def forget(self, queue: str) -> None:
        self._queues.pop(queue, None)

    def series(self, queue: str, seconds: int) -> list[int | None]:
        """Depth per second for the last `seconds` seconds, the current one last, oldest first;
        None where no page looked."""
        seconds = max(1, min(seconds, WINDOW_SECONDS))
        out: list[int | None] = [None] * seconds
        current = int(self._clock())
        for second, depth in self._queues.get(queue, ()):
            # The last slot is the second under way: a page refreshing every second sees itself.
            index = seconds - 1 - (current - second)
            if 0 <= index < seconds:
                out[index] = depth
        return out
