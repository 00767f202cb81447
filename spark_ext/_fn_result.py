"""What ``consume_process_ack``'s ``fn`` returned, as one error (or None: success) per row.

The accepted shapes are few on purpose. A value outside them is not a verdict on the messages
but a programming error in ``fn`` (the usual one: returning the DataFrame, the ``mapInPandas``
habit), and it must stop the job: treating it as "the batch failed" made the consumer bisect
every batch down to single rows, call ``fn`` dozens of times per message and release the whole
queue with a reason that blamed the messages.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from ..client import Reject

__all__ = ["ACCEPTED", "FnResultError", "Rejection", "rejection", "row_errors"]

ACCEPTED = (
    "None (every row succeeded), or one value per row as a list, tuple, pandas Series, 1-d "
    "numpy array or pyarrow Array of the batch's length, each value True or None (success), "
    "False or an error text (failure, retried), or leaseq.client.Reject('why') (rejected: "
    "dead-lettered, not retried)"
)


class Rejection(str):
    """The reason of a row ``fn`` rejected (``leaseq.client.Reject``): the message goes to the
    dead letter queue now, with this as its last error, instead of being released for a retry.
    A ``str``, so that it travels with the other rows' error texts."""


def rejection(value: Reject) -> Rejection:
    return Rejection(value.reason or "rejected by fn")


class FnResultError(TypeError):
    """``fn`` returned something that is not one of the accepted shapes (``ACCEPTED``)."""


def _describe(value: Any) -> str:
    kind = type(value)
    name = kind.__qualname__
    if kind.__module__ != "builtins":
        name = f"{kind.__module__}.{name}"
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):
        return f"a {name} of shape {shape}"
    try:
        return f"a {name} of length {len(value)}"
    except TypeError:
        return f"a {name}"


def _values(result: Any) -> list[Any] | None:
    """The per-row values of an accepted container, else None."""
    if isinstance(result, (list, tuple)):
        return list(result)
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(result, pandas.Series):
        return result.tolist()
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(result, numpy.ndarray):
        return result.tolist() if result.ndim == 1 else None
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None and isinstance(result, (pyarrow.Array, pyarrow.ChunkedArray)):
        return result.to_pylist()
    return None


def _is_missing(value: Any) -> bool:
    # pandas' missing values (None, NaN, pd.NA) of a Series that had None in it.
    if isinstance(value, float):
        return math.isnan(value)
    pandas = sys.modules.get("pandas")
    return pandas is not None and value is pandas.NA


def row_errors(result: Any, rows: int) -> list[str | None]:
    """One error text (None: success) per row; ``FnResultError`` for any other shape."""
    if result is None:
        return [None] * rows
    values = _values(result)
    if values is None:
        raise FnResultError(f"fn returned {_describe(result)}; accepted: {ACCEPTED}")
    if len(values) != rows:
        raise FnResultError(
            f"fn returned {len(values)} values for a batch of {rows} rows "
            f"({_describe(result)}); accepted: {ACCEPTED}"
        )
    numpy = sys.modules.get("numpy")
    errors: list[str | None] = []
    for position, value in enumerate(values):
        if isinstance(value, Reject):
            errors.append(rejection(value))
            continue
        if numpy is not None and isinstance(value, numpy.generic):
            value = value.item()  # numpy.True_ in a list of a mask's items, say
        if value is True or value is None or _is_missing(value):
            errors.append(None)
        elif value is False:
            errors.append("failed: fn returned False")
        elif isinstance(value, str):
            errors.append(value or "failed: fn returned an empty text")
        else:
            raise FnResultError(
                f"fn returned {_describe(result)} whose value at row {position} is "
                f"{value!r} ({type(value).__name__}); accepted: {ACCEPTED}"
            )
    return errors
