"""The Arrow bulk path: send, receive and acknowledge messages as ``pyarrow`` tables.

``QueueClient.send_arrow`` / ``receive_arrow`` / ``ack_arrow`` (and their ``AsyncQueueClient``
twins) are thin drivers of the plans below. They convert *at the edge*: on the wire the
messages travel as the ordinary repeated protobuf fields (the same RPCs as ``send_batch``,
``receive`` and ``delete``), and this module turns Arrow columns into entries and responses into
record batches. Carrying Arrow IPC bytes in the protobuf messages instead was measured and did
not pay (``scripts/bench_arrow.py``; the figures are in the README), so the proto stays one
shape that every language's client can use.

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
from typing import Any, Union

import pyarrow as pa

from ..v1 import queue_service_pb2 as pb
from . import _wire
from ._wire import MAX_MESSAGE_SIZE, Call, Plan  # MAX_MESSAGE_SIZE: see the docstring
from .batching import (
    DEFAULT_BATCH_BYTES,
    MAX_BATCH_BYTES,
    check_batch_bytes,
    chunks,
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

ReceiptColumn = Union[pa.Array, pa.ChunkedArray, pa.Table, pa.RecordBatch, Iterable[str]]
"""What ``ack_arrow`` accepts: a string array (or chunked array), a table or record batch with
a ``receipt`` column (e.g. ``receive_arrow``'s), or any iterable of receipt strings."""


# --- send ------------------------------------------------------------------------------------


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


class _Requests:
    """The SendMessagesRequest being filled, and the result ids of its rows.

    Entries are added in place (``entries.add``): building them apart and copying them into
    the request costs twice as much."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.ids: list[str] = []  # result ids of the rows of the current request
        self.request = pb.SendMessagesRequest(queue=queue)
        self.size = 0

    def take(self) -> tuple[pb.SendMessagesRequest, list[str]]:
        out = self.request, self.ids
        self.request = pb.SendMessagesRequest(queue=self.queue)
        self.ids, self.size = [], 0
        return out


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
) -> Iterator[tuple[pb.SendMessagesRequest, list[str]]]:
    """(request, result ids of its rows) in row order, converting one record batch at a time
    so a large table is never all Python objects at once. Wire entry ids are positions in the
    request (a user's id column may repeat, which the server would refuse)."""
    if body_column not in table.column_names:
        raise KeyError(f"the table has no body column {body_column!r}")
    named = {
        "body": table.column(body_column),
        "attributes": _column(table, attributes_column, "attributes"),
        "channel": _column(table, channel_column, "channel"),
        "delay": _column(table, delay_column, "delay"),
        "ttl": _column(table, ttl_column, "ttl"),
        "dedup_id": _column(table, dedup_id_column, "dedup_id"),
        "id": _column(table, id_column, "id"),
    }
    present = pa.table({k: v for k, v in named.items() if v is not None})
    out = _Requests(queue)
    row = 0
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
        ids = values.get("id", none)
        # The loop is the hot path of send_arrow (a few us per row): plain locals, and the
        # optional columns touched only when present.
        for i in range(n):
            body = bodies[i]
            if type(body) is not bytes:
                body = _body(body, row)
            attrs = _attributes(attributes[i]) if attributes[i] else None
            channel = "" if channels[i] is None else str(channels[i])
            dedup_id = "" if dedup_ids[i] is None else str(dedup_ids[i])
            cost = send_entry_cost(body, channel, dedup_id, attrs)
            if out.ids and (len(out.ids) >= MAX_ROWS or out.size + cost > max_bytes):
                yield out.take()
            entry = out.request.entries.add(
                id=str(len(out.ids)), body=body, channel=channel, dedup_id=dedup_id
            )
            if attrs:
                entry.attributes.update(attrs)
            if delays[i] is not None:
                entry.delay.CopyFrom(_wire.to_duration(delays[i]))
            if ttls[i] is not None:
                entry.ttl.CopyFrom(_wire.to_duration(ttls[i]))
            out.ids.append(str(row) if ids[i] is None else str(ids[i]))
            out.size += cost
            row += 1
    if out.ids:
        yield out.take()


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
    )
    ids: list[str] = []
    message_ids: list[str | None] = []
    duplicates: list[bool] = []
    codes: list[str | None] = []
    errors: list[str | None] = []
    failure: LeaseqError | None = None
    for request, row_ids in requests:
        ids.extend(row_ids)
        count = len(row_ids)
        if failure is not None:
            # An earlier request failed: these rows were not sent at all.
            _fail_rows(count, failure, "not sent", message_ids, duplicates, codes, errors)
            continue
        # As send_batch: repeating a send is safe only when every entry carries a dedup id.
        retry = all(entry.dedup_id for entry in request.entries)
        try:
            response = yield Call("SendMessages", request, retry=retry)
        except LeaseqError as error:
            if not message_ids:
                raise  # nothing was sent: the call failed as a whole, like send_batch
            failure = error
            _log.warning(
                "send_arrow: a request of %d rows failed with %s after %d rows were answered; "
                "their outcome is unknown and later rows are not sent",
                count,
                error.code.name,
                len(message_ids),
            )
            _fail_rows(count, error, "outcome unknown", message_ids, duplicates, codes, errors)
            continue
        if len(response.results) != count:
            raise LeaseqError(f"expected {count} send results, got {len(response.results)}")
        for result in response.results:
            if result.HasField("error"):
                message_ids.append(None)
                duplicates.append(False)
                codes.append(status_code(result.error.code).name)
                errors.append(result.error.message)
            else:
                message_ids.append(result.message_id)
                duplicates.append(result.duplicate)
                codes.append(None)
                errors.append(None)
    return pa.Table.from_arrays(
        [
            pa.array(ids, pa.string()),
            pa.array(message_ids, pa.string()),
            pa.array(duplicates, pa.bool_()),
            pa.array(codes, pa.string()),
            pa.array(errors, pa.string()),
        ],
        schema=SEND_RESULT_SCHEMA,
    )


def _fail_rows(
    count: int,
    error: LeaseqError,
    what: str,
    message_ids: list[str | None],
    duplicates: list[bool],
    codes: list[str | None],
    errors: list[str | None],
) -> None:
    message_ids.extend([None] * count)
    duplicates.extend([False] * count)
    codes.extend([error.code.name] * count)
    errors.extend([f"{what}: {error.details or error.code.name}"] * count)


# --- receive ---------------------------------------------------------------------------------


def _times(messages: list[pb.ReceivedMessage], name: str) -> pa.Array:
    stamps = [getattr(m, name) for m in messages]
    return pa.array([t.seconds * 1_000_000 + t.nanos // 1_000 for t in stamps], _TIME)


def record_batch(messages: Iterable[pb.ReceivedMessage]) -> pa.RecordBatch:
    """A ``MESSAGE_SCHEMA`` record batch of wire messages.

    One comprehension per column: field access on protobuf messages is the cost here, and
    comprehensions do it with the least interpreter overhead (about 4 us per message)."""
    ms = list(messages)
    attributes = [m.attributes for m in ms]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.message_id for m in ms], pa.string()),
            pa.array([m.receipt for m in ms], pa.string()),
            pa.array([m.body for m in ms], pa.binary()),
            pa.array([list(a.items()) if a else [] for a in attributes], _ATTRIBUTES),
            pa.array([m.channel for m in ms], pa.string()),
            _times(ms, "enqueued_at"),
            _times(ms, "visible_at"),
            _times(ms, "expires_at"),
            pa.array([m.delivery_count for m in ms], pa.int32()),
        ],
        schema=MESSAGE_SCHEMA,
    )


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
                "GetMessages", request, retry=True, streaming=True, extra_timeout=extra
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
        for response in responses:
            if response.messages:
                batches.append(record_batch(response.messages))
                got += len(response.messages)
        remaining -= got
        if got < asked:
            break  # the queue had no more visible messages (or the in-flight limit was hit)
        wait = 0  # only the first request waits for messages to arrive
    return pa.Table.from_batches(batches, schema=MESSAGE_SCHEMA)


# --- ack -------------------------------------------------------------------------------------


def receipts_list(receipts: ReceiptColumn) -> list[str]:
    if isinstance(receipts, (pa.Table, pa.RecordBatch)):
        if "receipt" not in receipts.column_names:
            raise KeyError("the table has no 'receipt' column")
        receipts = receipts.column("receipt")
    values: list[Any]
    if isinstance(receipts, (pa.Array, pa.ChunkedArray)):
        values = receipts.to_pylist()
    elif isinstance(receipts, str):
        values = [receipts]  # one receipt, not its characters
    else:
        values = list(receipts)
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise TypeError(f"receipt {index} is {type(value).__name__}, not str")
    return values


def ack_arrow(queue: str, receipts: ReceiptColumn, *, max_batch_bytes: int) -> Plan[pa.Table]:
    check_batch_bytes(max_batch_bytes)
    values = receipts_list(receipts)
    out_receipts: list[str] = []
    statuses: list[str] = []
    for chunk in chunks(((r, receipt_cost(r)) for r in values), max_batch_bytes):
        request = pb.DeleteMessagesRequest(queue=queue, receipts=chunk)
        # Retried, and never partial: a repeated delete answers ALREADY_DELETED, so the caller
        # may simply ack the same receipts again after an error.
        response = yield Call("DeleteMessages", request, retry=True)
        for result in response.results:
            out_receipts.append(result.receipt)
            statuses.append(_wire.lease_status(result.status).name)
    return pa.Table.from_arrays(
        [pa.array(out_receipts, pa.string()), pa.array(statuses, pa.string())],
        schema=ACK_RESULT_SCHEMA,
    )

