"""Messages sent and acknowledged per queue and second over the last minutes, for the web
console's rates and charts.

Counted below every front end (core.QueueCore.send_checked and .delete, which gRPC, SQS and the
console all call), in the one LongPoll a server owns, so a rate covers every dialect. It counts
this server process only: the replicas of a PostgreSQL store each count their own.

Bounded: one deque of at most WINDOW_SECONDS entries per queue that saw traffic, an entry only
for a second that had some; a deleted queue is forgotten. Costs one dict lookup and one integer
addition per batch (not per message) on the send and ack paths.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

WINDOW_SECONDS = 300


class Traffic:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # queue -> deque of [second, sent, acked], oldest first
        self._queues: dict[str, deque[list[int]]] = {}

    def _add(self, queue: str, sent: int, acked: int) -> None:
        second = int(self._clock())
        entries = self._queues.get(queue)
        if entries is None:
            entries = self._queues[queue] = deque(maxlen=WINDOW_SECONDS)
        if entries and entries[-1][0] == second:
            entries[-1][1] += sent
            entries[-1][2] += acked
        else:
            entries.append([second, sent, acked])

    def sent(self, queue: str, count: int) -> None:
        if count:
            self._add(queue, count, 0)

    def acked(self, queue: str, count: int) -> None:
        if count:
            self._add(queue, 0, count)

    def forget(self, queue: str) -> None:
        self._queues.pop(queue, None)

    def series(self, queue: str, seconds: int = WINDOW_SECONDS) -> tuple[list[int], list[int]]:
        """(sent, acked) per second for the last `seconds` whole seconds, oldest first; the
        second under way is left out (it is not over: its rate would read low)."""
        seconds = max(1, min(seconds, WINDOW_SECONDS))
        sent, acked = [0] * seconds, [0] * seconds
        current = int(self._clock())
        for second, s, a in self._queues.get(queue, ()):
            index = seconds - (current - second)
            if 0 <= index < seconds:
                sent[index], acked[index] = s, a
        return sent, acked
