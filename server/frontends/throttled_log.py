"""A log record that may repeat many times a second (a refused connection, a failed accept),
written at most once per interval with the count of the ones left out."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class ThrottledLog:
    def __init__(
        self,
        logger: logging.Logger,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._next = 0.0
        self._left_out = 0

    def warning(self, message: str, *args: object) -> bool:
        """Log now, or count it for the next record; True when it was written."""
        now = self._clock()
        if now < self._next:
            self._left_out += 1
            return False
        if self._left_out:
            message += " (and %d more since the last such record)"
            args = (*args, self._left_out)
        self._left_out = 0
        self._next = now + self._interval
        self._logger.warning(message, *args)
        return True
