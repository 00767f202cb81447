"""CPU seconds per role of the processes a Spark benchmark runs, read from /proc (Linux).

Roles: the `leaseq serve` process (``server``), Spark's JVM (``jvm``), the Python workers it
starts (``python workers``) and this driver process (``driver``). Each live process counts its
own time and that of its children it has already waited for, so a worker that exited still
counts through its parent. Where the CPU goes tells what bounds a phase on a 2-core machine.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command name, CPU seconds incl. waited-for children)."""
    out: dict[int, tuple[int, str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
        out[int(entry.name)] = (int(fields[1]), name, ticks / _TICK)
    return out


def cpu_by_role(server_pid: int) -> dict[str, float]:
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in procs.items():
        children.setdefault(parent, []).append(pid)

    def tree(pid: int) -> list[int]:
        found, todo = [], [pid]
        while todo:
            p = todo.pop()
            found.append(p)
            todo.extend(children.get(p, []))
        return found

    roles = {"server": 0.0, "jvm": 0.0, "python workers": 0.0, "driver": 0.0}
    served = set(tree(server_pid))
    for pid in served:
        roles["server"] += procs.get(pid, (0, "", 0.0))[2]
    me = os.getpid()
    for pid in tree(me):
        if pid in served:
            continue
        parent, name, seconds = procs[pid]
        if pid == me:
            # Own time only: the server's (a child) is counted above once it has exited.
            roles["driver"] += sum(os.times()[:2])
        elif name == "java":
            roles["jvm"] += seconds
        elif name.startswith("python") or name.startswith("pyspark"):
            roles["python workers"] += seconds
        else:
            roles["jvm"] += seconds  # helper processes of Spark
    return roles


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}
