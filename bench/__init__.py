"""``leaseq bench``: throughput and latency of a real ``leaseq serve``, driven over loopback gRPC
from separate client processes.

Modules, one job each: settings (what to run, what a run found), launcher (the store and the
``leaseq serve`` child process), workers (the client processes' loops), driver (starting them
through one timed window), scenarios (a gRPC run: queue, jobs, merged figures, accounting),
inprocess (the same loops against the store alone), baseline (the raw SQLite loop), cpu (/proc CPU
time), database_cpu (the PostgreSQL backends' CPU time), stats (percentiles), report (progress bar,
table, JSON, plot), runner (a whole invocation).
"""

from .runner import run
from .settings import RunResult, Settings

__all__ = ["RunResult", "Settings", "run"]
