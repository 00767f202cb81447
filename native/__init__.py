"""leaseq._native: compiled versions of per-message loops, optional.

`speedups` is a C extension that `pip install` builds when the machine has a C compiler and the
Python headers (setup.py marks it optional: without them the install goes on without it). Each
function in it has a pure-Python twin, the reference, which the callers use when the module is
missing or raises; tests/service/test_native_encoding.py checks that both give the same bytes.
`speedups` is None when the module was not built.

Lives beside server/ and client/ (as `leaseq._native`) so that either may use it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# Found by name, so that type checks read the same whether or not the extension was built.
speedups: ModuleType | None
try:
    speedups = importlib.import_module(".speedups", __name__)
except ImportError:  # not built (no compiler at install time): the callers' Python twins serve
    speedups = None

__all__ = ["speedups"]
