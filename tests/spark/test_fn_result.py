"""What consume_process_ack accepts from fn, and what it refuses as a programming error (no
Spark needed: the function that reads fn's return value, and the bisection around fn)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from leaseq.spark_ext import FnResultError
from leaseq.spark_ext._fn_result import row_errors
from leaseq.spark_ext.consume import _run_fn


@pytest.mark.parametrize(
    "result",
    [
        [True, None, False, "bad input"],
        (True, None, False, "bad input"),
        pd.Series([True, None, False, "bad input"]),
        np.array([True, None, False, "bad input"], dtype=object),
        pa.array([None, None, "failed: fn returned False", "bad input"]),
        pa.chunked_array([[None, None], ["failed: fn returned False", "bad input"]], pa.string()),
        [np.True_, float("nan"), np.False_, "bad input"],
        pd.Series([None, pd.NA, False, "bad input"], dtype=object),
    ],
    ids=["list", "tuple", "series", "ndarray", "arrow", "chunked", "numpy-items", "pd-na"],
)
def test_one_value_per_row_in_every_accepted_container(result):
    assert row_errors(result, 4) == [None, None, "failed: fn returned False", "bad input"]


def test_none_means_every_row_succeeded():
    assert row_errors(None, 3) == [None, None, None]
    assert row_errors(pd.Series([True, True]).to_numpy(), 2) == [None, None]


@pytest.mark.parametrize(
    "result, returned",
    [
        (pd.DataFrame({"a": [1, 2], "b": [3, 4]}), "a pandas.core.frame.DataFrame of shape (2, 2)"),
        (pa.table({"a": [1, 2]}), "a pyarrow.lib.Table of shape (2, 1)"),
        ({"ok": True}, "a dict of length 1"),
        ("done", "a str of length 4"),
        (True, "a bool"),
        (np.zeros((2, 1)), "a numpy.ndarray of shape (2, 1)"),
        ([None, None, None], "3 values for a batch of 2 rows"),
        ([1, 0], "a list of length 2 whose value at row 0 is 1 (int)"),
        (pd.Series([b"x", None]), "whose value at row 0 is b'x' (bytes)"),
    ],
    ids=["dataframe", "table", "dict", "str", "bool", "2d", "length", "ints", "bytes"],
)
def test_anything_else_is_a_programming_error_that_says_what_and_what_is_accepted(result, returned):
    with pytest.raises(FnResultError) as caught:
        row_errors(result, 2)
    text = str(caught.value)
    assert returned in text
    assert "accepted: None (every row succeeded), or one value per row" in text
    assert isinstance(caught.value, TypeError)


def test_a_wrong_shape_is_never_bisected():
    table = pa.table({"body": [b"a", b"b", b"c", b"d"]})
    calls = []

    def fn(frame):
        calls.append(len(frame))
        if len(frame) > 2:
            raise ValueError("too many")  # bisection starts...
        return frame  # ...and meets the mapInPandas habit: stop there

    with pytest.raises(FnResultError, match="DataFrame of shape"):
        _run_fn(fn, table, as_pandas=True, bisect=True)
    assert calls == [4, 2]


def test_a_raising_fn_is_still_bisected_to_the_rows_that_make_it_raise():
    table = pa.table({"body": [b"a", b"b", b"c", b"d"]})

    def fn(frame):
        if b"c" in frame["body"].tolist():
            raise ValueError("c is bad")
        return [True] * len(frame)

    assert _run_fn(fn, table, as_pandas=True, bisect=True) == [
        None,
        None,
        "ValueError: c is bad",
        None,
    ]


def test_a_reject_value_rejects_its_row_and_a_raised_reject_its_whole_call():
    from leaseq.client import Reject
    from leaseq.spark_ext._fn_result import Rejection

    errors = row_errors([None, Reject("poison"), "later", Reject()], 4)
    assert errors == [None, "poison", "later", "rejected by fn"]
    assert [isinstance(e, Rejection) for e in errors] == [False, True, False, True]

    calls = []

    def fn(table):
        calls.append(table.num_rows)
        raise Reject("all of them")

    table = pa.table({"body": [b"a", b"b", b"c", b"d"]})
    rejected = _run_fn(fn, table, as_pandas=False, bisect=True)
    assert rejected == ["all of them"] * 4 and all(isinstance(e, Rejection) for e in rejected)
    assert calls == [4]  # a verdict: not bisected
