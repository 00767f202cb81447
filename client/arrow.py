"""The Arrow bulk path: send, receive and acknowledge messages as ``pyarrow`` tables.

``QueueClient.send_arrow`` / ``receive_arrow`` / ``ack_arrow`` (and their ``AsyncQueueClient``
twins) are thin drivers of the plans below. They convert *at the edge*: on the wire the
messages travel as the ordinary repeated protobuf fields (the same RPCs as ``send_batch``,
``receive`` and ``delete``), and ``_wire_arrow`` turns Arrow columns into request bytes and
response bytes into Arrow columns, without a Python object per message (its C twin,
``_wire_arrow_c``; a send with attributes, delays or ttls builds its entries row by row here).
Carrying Arrow IPC bytes in the protobuf messages instead was measured and did not pay
(``python -m leaseq.bench.arrow_path``; the figures are in docs/performance.md), so the proto stays one shape that
every language's client can use.

Cutting: every RPC carries at most 10,000 rows (the API's batch limit) and, for sends and acks,
at most ``max_batch_bytes`` of estimated entry bytes (default ``DEFAULT_BATCH_BYTES``, 32 MiB).
gRPC's message limit is raised to ``MAX_MESSAGE_SIZE`` (64 MiB) on both the client and the
server; ``max_batch_bytes`` may go up to ``MAX_BATCH_BYTES`` (55 MiB), which leaves room for one
more message of the largest size (8 MiB) plus framing, so the 64 MiB limit is never what fails.
A single row larger than ``max_batch_bytes`` travels alone. Receives ask for at most 10,000
messages per RPC; the server itself splits a response that would pass the limit.

Example::

    import pyarrow as pa
    from leaseq.client import QueueClient

    with QueueClient() as client:
        client.create_queue("events")
        table = pa.table({"body": [b"a", b"b"], "channel": ["eu", "us"]})
        sent = client.send_arrow("events", table)          # one row per input row
        assert sent.column("error_code").null_count == len(table)
        got = client.receive_arrow("events", 10_000, wait_time=1)   # MESSAGE_SCHEMA
        acked = client.ack_arrow("events", got.column("receipt"))   # (receipt, status)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..v1 import queue_service_pb2 as pb
from . import _wire, _wire_arrow
from ._wire import MAX_MESSAGE_SIZE as MAX_MESSAGE_SIZE  # named here: see the docstring
from ._wire import Call, Plan
from .batching import (
    DEFAULT_BATCH_BYTES,
    MAX_BATCH_BYTES,
    check_batch_bytes,
    receipt_cost,
    send_entry_cost,
)
from .errors import LeaseqError, status_code
from .types import DurationLike

__all__ = [
    "ACK_RESULT_SCHEMA",
    "DEFAULT_BATCH_BYTES",
    "MAX_BATCH_BYTES",
    "MESSAGE_SCHEMA",
    "SEND_RESULT_SCHEMA",
]

_log = logging.getLogger("leaseq.client")

MAX_ROWS = _wire.MAX_BATCH
"""Rows per RPC: the API's batch limit."""

_TIME = pa.timestamp("us", tz="UTC")
_ATTRIBUTES = pa.map_(pa.string(), pa.string())

MESSAGE_SCHEMA = pa.schema(
    [
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("receipt", pa.string(), nullable=False),
        pa.field("body", pa.binary(), nullable=False),
        pa.field("attributes", _ATTRIBUTES, nullable=False),
        pa.field("channel", pa.string(), nullable=False),
        pa.field("enqueued_at", _TIME, nullable=False),
        pa.field("visible_at", _TIME, nullable=False),
        pa.field("expires_at", _TIME, nullable=False),
        pa.field("delivery_count", pa.int32(), nullable=False),
    ]
)
"""The fixed schema of ``receive_arrow``'s table: one row per delivered message.

``visible_at`` is when the lease ends; times are microseconds, UTC. ``channel`` is "" for the
default channel; ``attributes`` is an empty map when the message has none."""

SEND_RESULT_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("message_id", pa.string()),
        pa.field("duplicate", pa.bool_(), nullable=False),
        pa.field("error_code", pa.string()),
        pa.field("error_message", pa.string()),
    ]
)
"""The schema of ``send_arrow``'s result: one row per input row, in input order.

``id`` is the row's value of the id column, or its position in the table. ``message_id`` is
null and ``error_code`` (a gRPC status name such as ``"INVALID_ARGUMENT"``) is set when the row
was not enqueued."""

ACK_RESULT_SCHEMA = pa.schema(
    [
        pa.field("receipt", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
    ]
)
"""The schema of ``ack_arrow``'s result: per receipt, a ``LeaseStatus`` name (``"OK"``,
``"ALREADY_DELETED"``, ``"RECEIPT_SUPERSEDED"``, ...)."""

ReceiptColumn: TypeAlias = pa.Array | pa.ChunkedArray | pa.Table | pa.RecordBatch | Iterable[str]
"""What ``ack_arrow`` accepts: a string array (or chunked array), a table or record batch with
a ``receipt`` column (e.g. ``receive_arrow``'s), or any iterable of receipt strings."""


# --- send ----------------------------------------------------------------------------------


def _column(table: pa.Table, name: str | None, default: str) -> pa.ChunkedArray | None:
    """The column ``name``; the default name may be absent (the column is then unused), a name
    given explicitly must exist; None ignores the column even if present."""
    if name is None:
        return None
    if name in table.column_names:
        return table.column(name)
    if name == default:
        return None
    raise KeyError(f"the table has no column {name!r} (columns: {table.column_names})")


def _attributes(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict):  # a struct column
        return {str(k): str(v) for k, v in value.items() if v is not None}
    return {str(k): str(v) for k, v in value}  # a map column: (key, value) pairs


def _body(value: Any, row: int) -> bytes:
    if value is None:
        raise ValueError(f"row {row}: the body is null")
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


@dataclass
class _Request:
    """One SendMessagesRequest as wire bytes, the result ids of its rows, and whether it may be
    repeated (every entry carries a dedup id)."""

    raw: bytes
    ids: pa.Array
    retry: bool


def _result_ids(column: pa.ChunkedArray | None, rows: int) -> pa.Array:
    """The ``id`` of each result row: the id column's value, else the row's position."""
    positions = pc.cast(pa.array(np.arange(rows, dtype=np.int64)), pa.string())
    if column is None:
        return positions
    if pa.types.is_string(column.type) or pa.types.is_integer(column.type):
        values = pc.cast(column, pa.string()).combine_chunks()
    else:
        values = pa.array([None if v is None else str(v) for v in column.to_pylist()], pa.string())
    return pc.if_else(pc.is_valid(values), values, positions)


_TEXT_TYPES = (
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
)


def _is_text(column: pa.ChunkedArray) -> bool:
    return any(test(column.type) for test in _TEXT_TYPES)


def _fast_columns(named: dict[str, pa.ChunkedArray | None]) -> dict[int, pa.ChunkedArray] | None:
    """The columns of the columnar send path, by SendEntry field number (2 body, 4 channel,
    7 dedup_id, 8 group), as string or binary without nulls; None when the table needs the per-row path
    (attributes, delays or ttls in use, or a column of another type)."""
    for name in ("attributes", "delay", "ttl"):
        column = named[name]
        if column is not None and column.null_count < len(column):
            return None
    fields: dict[int, pa.ChunkedArray] = {}
    for name, field in (("body", 2), ("channel", 4), ("dedup_id", 7), ("group", 8)):
        column = named[name]
        if column is None:
            continue
        if not _is_text(column):
            if name == "body" or not pa.types.is_integer(column.type):
                return None
            column = pc.cast(column, pa.string())
        if column.null_count:
            if name == "body":
                first = pc.index(pc.is_null(column), True).as_py()
                raise ValueError(f"row {first}: the body is null")
            column = pc.fill_null(column, "")
        fields[field] = column
    return fields


def _cuts(costs: np.ndarray, max_bytes: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of each request: as many rows as fit ``max_bytes`` of costs, at most
    ``MAX_ROWS``, at least one (a row larger than the cut travels alone)."""
    ends = np.cumsum(costs)
    start, base = 0, 0
    while start < len(costs):
        stop = int(np.searchsorted(ends, base + max_bytes, side="right"))
        stop = min(max(stop, start + 1), start + MAX_ROWS)
        yield start, stop
        base = int(ends[stop - 1])
        start = stop


def _fast_requests(
    queue: str, fields: dict[int, pa.ChunkedArray], ids: pa.Array, max_bytes: int
) -> Iterator[_Request]:
    """Requests straight from the Arrow buffers (``_wire_arrow.encode_send``); the cost of a
    row counts bytes, as ``send_entry_cost`` does characters."""
    costs = np.full(len(ids), send_entry_cost(b"", "", "", None), dtype=np.int64)
    for column in fields.values():
        costs += pc.fill_null(pc.binary_length(column), 0).to_numpy()
    for start, stop in _cuts(costs, max_bytes):
        chunk = {f: _single(c.slice(start, stop - start)) for f, c in fields.items()}
        dedup = chunk.get(7)
        retry = dedup is not None and pc.min(pc.binary_length(dedup)).as_py() > 0
        raw = _wire_arrow.encode_send(queue, chunk, 0, stop - start)
        yield _Request(raw, ids.slice(start, stop - start), retry)


def _single(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One array of 32-bit offsets (what the wire encoder reads)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_large_string(array.type):
        return array.cast(pa.string())
    if pa.types.is_large_binary(array.type):
        return array.cast(pa.binary())
    return array


def _row_requests(
    queue: str, named: dict[str, pa.ChunkedArray | None], ids: pa.Array, max_bytes: int
) -> Iterator[_Request]:
    """Requests built row by row through protobuf objects: the path for attributes, delays and
    ttls (and columns of other types), converting one record batch at a time so a large table
    is never all Python objects at once."""
    present = pa.table({k: v for k, v in named.items() if v is not None})
    request = pb.SendMessagesRequest(queue=queue)
    size = first = row = 0

    def take() -> _Request:
        nonlocal request, size, first
        retry = all(entry.dedup_id for entry in request.entries)
        out = _Request(request.SerializeToString(), ids.slice(first, row - first), retry)
        request, size, first = pb.SendMessagesRequest(queue=queue), 0, row
        return out

    for batch in present.to_batches(max_chunksize=MAX_ROWS):
        n = batch.num_rows
        values = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        none: list[Any] = [None] * n
        bodies = values["body"]
        attributes = values.get("attributes", none)
        channels = values.get("channel", none)
        delays = values.get("delay", none)
        ttls = values.get("ttl", none)
        dedup_ids = values.get("dedup_id", none)
        groups = values.get("group", none)
        for i in range(n):
            body = bodies[i]
            if type(body) is not bytes:
                body = _body(body, row)
            attrs = _attributes(attributes[i]) if attributes[i] else None
            channel = "" if channels[i] is None else str(channels[i])
            dedup_id = "" if dedup_ids[i] is None else str(dedup_ids[i])
            cost = send_entry_cost(body, channel, dedup_id, attrs)
            count = row - first
            if count and (count >= MAX_ROWS or size + cost > max_bytes):
                yield take()
            group = "" if groups[i] is None else str(groups[i])
            entry = request.entries.add(
                id=str(row - first), body=body, channel=channel, dedup_id=dedup_id, group=group
            )
            if attrs:
                entry.attributes.update(attrs)
            if delays[i] is not None:
                entry.delay.CopyFrom(_wire.to_duration(delays[i]))
            if ttls[i] is not None:
                entry.ttl.CopyFrom(_wire.to_duration(ttls[i]))
            size += cost
            row += 1
    if row > first:
        yield take()


def _send_requests(
    queue: str,
    table: pa.Table,
    max_bytes: int,
    *,
    body_column: str,
    attributes_column: str | None,
    channel_column: str | None,
    delay_column: str | None,
    ttl_column: str | None,
    dedup_id_column: str | None,
    id_column: str | None,
    group_column: str | None = "group",
) -> Iterator[_Request]:
    """The requests of ``table`` in row order. Wire entry ids are positions in the request (a
    user's id column may repeat, which the server would refuse)."""
    if body_column not in table.column_names:
        raise KeyError(f"the table has no body column {body_column!r}")
    named = {
        "body": table.column(body_column),
        "attributes": _column(table, attributes_column, "attributes"),
        "channel": _column(table, channel_column, "channel"),
        "delay": _column(table, delay_column, "delay"),
        "ttl": _column(table, ttl_column, "ttl"),
        "dedup_id": _column(table, dedup_id_column, "dedup_id"),
        "group": _column(table, group_column, "group"),
    }
    ids = _result_ids(_column(table, id_column, "id"), table.num_rows)
    fields = _fast_columns(named)
    if fields is not None:
        return _fast_requests(queue, fields, ids, max_bytes)
    return _row_requests(queue, named, ids, max_bytes)


def send_arrow(
    queue: str,
    table: pa.Table,
    *,
    body_column: str,
    attributes_column: str | None,
    channel_column: str | None,
    delay_column: str | None,
    ttl_column: str | None,
    dedup_id_column: str | None,
    id_column: str | None,
    max_batch_bytes: int,
    group_column: str | None = "group",
) -> Plan[pa.Table]:
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise TypeError(f"send_arrow needs a pyarrow Table, not {type(table).__name__}")
    check_batch_bytes(max_batch_bytes)
    requests = _send_requests(
        queue,
        table,
        max_batch_bytes,
        body_column=body_column,
        attributes_column=attributes_column,
        channel_column=channel_column,
        delay_column=delay_column,
        ttl_column=ttl_column,
        dedup_id_column=dedup_id_column,
        id_column=id_column,
        group_column=group_column,
    )
    parts: list[pa.RecordBatch] = []
    failure: LeaseqError | None = None
    for request in requests:
        count = len(request.ids)
        if failure is not None:
            # An earlier request failed: these rows were not sent at all.
            parts.append(_failed_rows(request.ids, failure, "not sent"))
            continue
        try:
            raw = yield Call("SendMessages", request.raw, retry=request.retry, raw=True)
        except LeaseqError as error:
            if not parts:
                raise  # nothing was sent: the call failed as a whole, like send_batch
            failure = error
            _log.warning(
                "send_arrow: a request of %d rows failed with %s after %d rows were answered; "
                "their outcome is unknown and later rows are not sent",
                count,
                error.code.name,
                sum(p.num_rows for p in parts),
            )
            parts.append(_failed_rows(request.ids, error, "outcome unknown"))
            continue
        results = _wire_arrow.decode_send_results(raw)
        if len(results) != count:
            raise LeaseqError(f"expected {count} send results, got {len(results)}")
        ok = pc.invert(results.failed)
        no_text = pa.nulls(count, pa.string())
        parts.append(
            pa.RecordBatch.from_arrays(
                [
                    request.ids,
                    pc.if_else(ok, results.message_id, no_text),
                    pc.and_(results.duplicate, ok),
                    pc.if_else(ok, no_text, _wire_arrow.names(results.code, _code_name)),
                    pc.if_else(ok, no_text, results.error),
                ],
                schema=SEND_RESULT_SCHEMA,
            )
        )
    return pa.Table.from_batches(parts, schema=SEND_RESULT_SCHEMA)


def _code_name(code: int) -> str:
    return status_code(code).name


def _failed_rows(ids: pa.Array, error: LeaseqError, what: str) -> pa.RecordBatch:
    count = len(ids)
    return pa.RecordBatch.from_arrays(
        [
            ids,
            pa.nulls(count, pa.string()),
            pa.array(np.zeros(count, dtype=bool)),
            pa.array([error.code.name] * count, pa.string()),
            pa.array([f"{what}: {error.details or error.code.name}"] * count, pa.string()),
        ],
        schema=SEND_RESULT_SCHEMA,
    )


# --- receive ---------------------------------------------------------------------------------


def record_batch(messages: Iterable[pb.ReceivedMessage]) -> pa.RecordBatch:
    """A ``MESSAGE_SCHEMA`` record batch of wire messages (attributes sorted by key)."""
    return _wire_arrow._messages_batch(messages, MESSAGE_SCHEMA)


def receive_arrow(
    queue: str,
    max_messages: int,
    *,
    visibility_timeout: DurationLike | None,
    wait_time: DurationLike | None,
    channel: str | None,
    attempt_id: str | None,
) -> Plan[pa.Table]:
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
        raise ValueError("max_messages must be a positive int")
    if attempt_id and max_messages > MAX_ROWS:
        # A replay must repeat one request exactly; several requests would need several ids.
        raise ValueError(f"attempt_id needs max_messages <= {MAX_ROWS} (one request)")
    batches: list[pa.RecordBatch] = []
    remaining = max_messages
    wait: DurationLike | None = wait_time
    while remaining > 0:
        asked = min(remaining, MAX_ROWS)
        request = _wire.receive_request(
            queue,
            asked,
            visibility_timeout=visibility_timeout,
            wait_time=wait,
            channel=channel,
            attempt_id=attempt_id,
        )
        extra = _wire.MAX_WAIT_SECONDS if wait is None else _wire.seconds(wait)
        try:
            responses = yield Call(
                "GetMessages",
                request.SerializeToString(),
                retry=True,
                streaming=True,
                extra_timeout=extra,
                raw=True,
            )
        except LeaseqError as error:
            if not batches:
                raise
            # The messages already received are leased to us: hand them over rather than
            # strand them until their leases end.
            _log.warning(
                "receive_arrow: a follow-up request failed with %s; returning the %d messages "
                "received so far",
                error.code.name,
                max_messages - remaining,
            )
            break
        got = 0
        for raw in responses:
            batch = _wire_arrow.decode_messages(raw, MESSAGE_SCHEMA)
            if batch.num_rows:
                batches.append(batch)
                got += batch.num_rows
        remaining -= got
        if got < asked:
            break  # the queue had no more visible messages (or the in-flight limit was hit)
        wait = 0  # only the first request waits for messages to arrive
    return pa.Table.from_batches(batches, schema=MESSAGE_SCHEMA)


# --- ack -------------------------------------------------------------------------------------


def receipts_array(receipts: ReceiptColumn) -> pa.Array:
    """The receipts as one string array without nulls (TypeError for anything else)."""
    if isinstance(receipts, (pa.Table, pa.RecordBatch)):
        if "receipt" not in receipts.column_names:
            raise KeyError("the table has no 'receipt' column")
        receipts = receipts.column("receipt")
    if isinstance(receipts, (pa.Array, pa.ChunkedArray)):
        if not (pa.types.is_string(receipts.type) or pa.types.is_large_string(receipts.type)):
            raise TypeError(f"receipts must be strings, not {receipts.type}")
        if receipts.null_count:
            first = pc.index(pc.is_null(receipts), True).as_py()
            raise TypeError(f"receipt {first} is NoneType, not str")
        return _single(receipts)
    values: list[Any] = [receipts] if isinstance(receipts, str) else list(receipts)
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise TypeError(f"receipt {index} is {type(value).__name__}, not str")
    return pa.array(values, pa.string())


def ack_arrow(queue: str, receipts: ReceiptColumn, *, max_batch_bytes: int) -> Plan[pa.Table]:
    check_batch_bytes(max_batch_bytes)
    column = receipts_array(receipts)
    costs = pc.binary_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
    costs += receipt_cost("")
    parts: list[pa.RecordBatch] = []
    for start, stop in _cuts(costs, max_batch_bytes):
        raw = _wire_arrow.encode_delete(queue, column, start, stop)
        # Retried, and never partial: a repeated delete answers ALREADY_DELETED, so the caller
        # may simply ack the same receipts again after an error.
        response = yield Call("DeleteMessages", raw, retry=True, raw=True)
        acked, statuses = _wire_arrow.decode_delete_results(response)
        parts.append(
            pa.RecordBatch.from_arrays(
                [acked, _wire_arrow.names(statuses, _status_name)], schema=ACK_RESULT_SCHEMA
            )
        )
    return pa.Table.from_batches(parts, schema=ACK_RESULT_SCHEMA)


def _status_name(value: int) -> str:
    return _wire.lease_status(value).name
