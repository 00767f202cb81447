"""The server's garbage-collector settings (app._settle_garbage_collector): what exists at start
is frozen, the youngest generation is collected less often, and cycles made later are still
collected. Run in a child process: the settings are process-wide."""

from __future__ import annotations

import subprocess
import sys

CHILD = r"""
import gc, weakref
from leaseq.server import app

app._settle_garbage_collector()
assert gc.get_freeze_count() > 0, gc.get_freeze_count()
assert gc.get_threshold()[0] == app.GC_YOUNG_THRESHOLD, gc.get_threshold()

class Node:
    pass

a, b = Node(), Node()
a.other, b.other = b, a  # a cycle: only the collector frees it
gone = weakref.ref(a)
del a, b
gc.collect()
assert gone() is None
print("ok")
"""


def test_startup_objects_are_frozen_and_later_cycles_are_still_collected() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
