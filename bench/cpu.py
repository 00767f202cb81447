"""CPU time of a process (user + system, all threads) from /proc/<pid>/stat, for % of one core."""

from __future__ import annotations

import os
import time

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """utime + stime of pid in seconds; None when unknown (no /proc, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / _TICKS


class CpuMeter:
    """CPU % of one core used by a process between start() and stop() (None when unknown)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._cpu0: float | None = None
        self._wall0 = 0.0
        self.cpu_seconds: float | None = None  # used between start() and stop(), once stopped

    def start(self) -> None:
        self._cpu0 = process_cpu_seconds(self.pid) if self.pid else None
        self._wall0 = time.monotonic()

    def stop(self) -> float | None:
        if self._cpu0 is None or self.pid is None:
            return None
        cpu = process_cpu_seconds(self.pid)
        wall = time.monotonic() - self._wall0
        if cpu is None or wall <= 0:
            return None
        self.cpu_seconds = cpu - self._cpu0
        return round(100.0 * (cpu - self._cpu0) / wall, 2)
