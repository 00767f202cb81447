"""Arrow columns to and from protobuf wire bytes, for the Arrow bulk path (``arrow.py``).

The bulk RPCs travel as raw bytes (the client's driver skips the stubs' serializers for
``Call(raw=True)``), so a response becomes Arrow columns and Arrow columns become a request
without a protobuf or Python object per message: ``_wire_arrow_c`` (``_wire_arrow_c.c``) reads
and writes the wire format straight from and into Arrow buffers. Where that module is not built
(no C compiler at install time) the pure-Python twins below do the same work through the
generated protobuf classes, a few microseconds per message slower; tests check that both give
the same bytes and the same tables (``tests/client/test_wire_arrow.py``).

``python -m leaseq.bench.arrow_path --codec`` prints the cost of each conversion per row, with and without
the compiled module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..v1 import queue_service_pb2 as pb

# Found by name, so that type checks read the same whether or not the extension was built.
_native: Any
try:
    _native = importlib.import_module("._wire_arrow_c", __package__)
except ImportError:  # not built: the pure-Python twins serve
    _native = None

__all__ = [
    "NATIVE",
    "SendResults",
    "decode_delete_results",
    "decode_messages",
    "decode_send_results",
    "encode_delete",
    "encode_send",
]

NATIVE = _native is not None
"""Whether the compiled conversions are in use."""

_TIME = pa.timestamp("us", tz="UTC")
_ATTRIBUTES = pa.map_(pa.string(), pa.string())

# The fields of each repeated message, by field number from 1 (see _wire_arrow_c.c): 'S' string
# or bytes, 'V' int32, 'T' Timestamp, 'M' map<string, string>, 'E' EntryError, '-' not read.
_RECEIVED = "SSSMSTTTV"  # ReceivedMessage: last_error (10) is not in MESSAGE_SCHEMA
_SEND_RESULT = "SSVE"  # SendResult: id, message_id, duplicate, error
_DELETE_RESULT = "SV"  # DeleteResult: receipt, status


def _use_native(native: bool | None) -> bool:
    if native and _native is None:
        raise RuntimeError("leaseq.client._wire_arrow_c is not built")
    return NATIVE if native is None else native


def _strings(kind: pa.DataType, rows: int, column: tuple[bytes, bytes]) -> pa.Array:
    offsets, data = column
    array = pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    if kind == pa.string():
        array.validate(full=True)  # UTF-8, as a protobuf parser checks it for string fields
    return array


def _numbers(kind: pa.DataType, rows: int, column: tuple[bytes]) -> pa.Array:
    return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(column[0])])


# --- responses -------------------------------------------------------------------------------


def decode_messages(raw: bytes, schema: pa.Schema, native: bool | None = None) -> pa.RecordBatch:
    """A ``GetMessagesResponse``'s messages as a record batch of ``schema`` (MESSAGE_SCHEMA).

    Attributes are sorted by key (protobuf maps have no order of their own)."""
    if not _use_native(native):
        return _messages_batch(pb.GetMessagesResponse.FromString(raw).messages, schema)
    rows, columns = _native.decode(raw, 1, _RECEIVED)
    ids, receipts, bodies, attributes, channels, enqueued, expires, visible, counts = columns
    entry_offsets, key_offsets, keys, value_offsets, values = attributes
    pairs = int(np.frombuffer(entry_offsets, np.int32)[-1])
    maps = pa.MapArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), rows + 1, [None, pa.py_buffer(entry_offsets)]),
        _strings(pa.string(), pairs, (key_offsets, keys)),
        _strings(pa.string(), pairs, (value_offsets, values)),
        type=_ATTRIBUTES,
    )
    return pa.RecordBatch.from_arrays(
        [
            _strings(pa.string(), rows, ids),
            _strings(pa.string(), rows, receipts),
            _strings(pa.binary(), rows, bodies),
            maps,
            _strings(pa.string(), rows, channels),
            _numbers(_TIME, rows, enqueued),
            _numbers(_TIME, rows, visible),
            _numbers(_TIME, rows, expires),
            _numbers(pa.int32(), rows, counts),
        ],
        schema=schema,
    )


def _times(messages: Any, name: str) -> pa.Array:
    stamps = [getattr(m, name) for m in messages]
    return pa.array([t.seconds * 1_000_000 + t.nanos // 1_000 for t in stamps], _TIME)


def _messages_batch(messages: Any, schema: pa.Schema) -> pa.RecordBatch:
    """The pure-Python twin: one comprehension per column (field access on protobuf messages is
    the cost here, and comprehensions do it with the least interpreter overhead)."""
    ms = list(messages)
    attributes = [m.attributes for m in ms]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.message_id for m in ms], pa.string()),
            pa.array([m.receipt for m in ms], pa.string()),
            pa.array([m.body for m in ms], pa.binary()),
            pa.array([sorted(a.items()) if a else [] for a in attributes], _ATTRIBUTES),
            pa.array([m.channel for m in ms], pa.string()),
            _times(ms, "enqueued_at"),
            _times(ms, "visible_at"),
            _times(ms, "expires_at"),
            pa.array([m.delivery_count for m in ms], pa.int32()),
        ],
        schema=schema,
    )


@dataclass(frozen=True)
class SendResults:
    """A ``SendMessagesResponse`` as columns: per entry, the message id ("" when it failed),
    duplicate, and the error's code (0: none) and message."""

    message_id: pa.Array
    duplicate: pa.Array
    failed: pa.Array
    code: pa.Array
    error: pa.Array

    def __len__(self) -> int:
        return len(self.message_id)


def decode_send_results(raw: bytes, native: bool | None = None) -> SendResults:
    if not _use_native(native):
        results = pb.SendMessagesResponse.FromString(raw).results
        return SendResults(
            message_id=pa.array([r.message_id for r in results], pa.string()),
            duplicate=pa.array([r.duplicate for r in results], pa.bool_()),
            failed=pa.array([r.HasField("error") for r in results], pa.bool_()),
            code=pa.array([r.error.code for r in results], pa.int32()),
            error=pa.array([r.error.message for r in results], pa.string()),
        )
    rows, (_, message_ids, duplicates, errors) = _native.decode(raw, 1, _SEND_RESULT)
    present, codes, error_offsets, error_data = errors
    return SendResults(
        message_id=_strings(pa.string(), rows, message_ids),
        duplicate=pc.not_equal(_numbers(pa.int32(), rows, duplicates), 0),
        failed=pc.not_equal(_numbers(pa.uint8(), rows, (present,)), 0),
        code=_numbers(pa.int32(), rows, (codes,)),
        error=_strings(pa.string(), rows, (error_offsets, error_data)),
    )


def decode_delete_results(raw: bytes, native: bool | None = None) -> tuple[pa.Array, pa.Array]:
    """A ``DeleteMessagesResponse``'s results: (receipts, statuses as int32)."""
    if not _use_native(native):
        results = pb.DeleteMessagesResponse.FromString(raw).results
        return (
            pa.array([r.receipt for r in results], pa.string()),
            pa.array([r.status for r in results], pa.int32()),
        )
    rows, (receipts, statuses) = _native.decode(raw, 1, _DELETE_RESULT)
    return _strings(pa.string(), rows, receipts), _numbers(pa.int32(), rows, statuses)


def names(codes: pa.Array, name_of: Callable[[int], str]) -> pa.Array:
    """The names of int codes (status codes, lease statuses): one lookup per distinct value."""
    distinct = pc.unique(codes)
    labels = pa.array([name_of(int(c)) for c in distinct.to_pylist()], pa.string())
    return pc.take(labels, pc.index_in(codes, distinct))


# --- requests --------------------------------------------------------------------------------


def _buffers(field: int, array: pa.Array) -> tuple[int, Any, Any, int]:
    _, offsets, data = array.buffers()
    return field, offsets, data if data is not None else b"", array.offset


def encode_send(
    queue: str, columns: Mapping[int, pa.Array], start: int, stop: int, native: bool | None = None
) -> bytes:
    """A ``SendMessagesRequest`` of rows start..stop-1: each entry's ``id`` is its position in
    the request, and the other fields (by field number: 2 body, 4 channel, 7 dedup_id, 8 group) come
    from ``columns``, string or binary arrays without nulls ("" leaves a field unset)."""
    if not _use_native(native):
        request = pb.SendMessagesRequest(queue=queue)
        values = {f: column.slice(start, stop - start).to_pylist() for f, column in columns.items()}
        names_ = {2: "body", 4: "channel", 7: "dedup_id", 8: "group"}
        for i in range(stop - start):
            request.entries.add(id=str(i), **{names_[f]: v[i] for f, v in values.items()})
        return request.SerializeToString()
    fields = tuple(_buffers(f, columns[f]) for f in sorted(columns))
    return _native.encode(queue.encode(), 2, 1, 1, start, stop, fields)  # type: ignore[no-any-return]


def encode_delete(
    queue: str, receipts: pa.Array, start: int, stop: int, native: bool | None = None
) -> bytes:
    """A ``DeleteMessagesRequest`` of receipts start..stop-1 (a string array without nulls)."""
    if not _use_native(native):
        chunk = receipts.slice(start, stop - start).to_pylist()
        return pb.DeleteMessagesRequest(queue=queue, receipts=chunk).SerializeToString()
    return _native.encode(  # type: ignore[no-any-return]
        queue.encode(), 2, 0, 0, start, stop, (_buffers(2, receipts),)
    )
