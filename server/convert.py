"""Domain values <-> protobuf messages, and the opaque page tokens.

Only shapes live here: this module trusts its input. Reading a *request* (ranges, presence,
malformed Durations) is `validation`'s job; it uses the raw helpers below once a value is known
to be well formed. Times are float seconds since the epoch, as in the stores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from leaseq._native import speedups
from leaseq.v1 import queue_service_pb2 as pb

from . import domain
from .errors import InvalidArgument

_NANOS = 1_000_000_000

# --- Duration / Timestamp -------------------------------------------------------------------


def duration_to_seconds(duration: duration_pb2.Duration) -> float:
    """A well-formed Duration (see validation.check_duration) as float seconds."""
    return duration.seconds + duration.nanos / _NANOS


def seconds_to_duration(seconds: float) -> duration_pb2.Duration:
    # Round through integer nanoseconds so 0.2 becomes 200,000,000 ns, not 199,999,999.
    total = round(seconds * _NANOS)
    whole, nanos = divmod(abs(total), _NANOS)
    sign = -1 if total < 0 else 1  # Duration wants seconds and nanos of the same sign
    return duration_pb2.Duration(seconds=sign * whole, nanos=sign * nanos)


def seconds_to_timestamp(when: float) -> timestamp_pb2.Timestamp:
    # Timestamp nanos are always >= 0, whatever the sign of seconds: floor division does that.
    whole, nanos = divmod(round(when * _NANOS), _NANOS)
    return timestamp_pb2.Timestamp(seconds=whole, nanos=nanos)


def timestamp_to_seconds(ts: timestamp_pb2.Timestamp) -> float:
    return ts.seconds + ts.nanos / _NANOS


def format_seconds(seconds: float) -> str:
    """A duration as proto3 JSON writes one ("30s", "0.200s"): the unit of OUT_OF_RANGE metadata
    for Duration fields, so a client can tell seconds from counts."""
    if math.isinf(seconds) or math.isnan(seconds):
        return str(seconds)
    return seconds_to_duration(seconds).ToJsonString()


# --- queues ---------------------------------------------------------------------------------


def config_to_proto(config: domain.QueueConfig) -> pb.QueueConfig:
    """The effective configuration: every field set, the dead letter pair only when configured."""
    message = pb.QueueConfig(
        visibility_timeout=seconds_to_duration(config.visibility_timeout),
        receive_wait_time=seconds_to_duration(config.receive_wait_time),
        message_retention=seconds_to_duration(config.message_retention),
        default_delay=seconds_to_duration(config.default_delay),
        max_message_bytes=config.max_message_bytes,
        max_in_flight=config.max_in_flight,
        dedup_window=seconds_to_duration(config.dedup_window),
        ordering=int(config.ordering),  # type: ignore[arg-type]  # equal numbers (domain.Ordering)
    )
    if config.content_based_dedup:
        message.content_based_dedup = True
    if config.ordering is domain.Ordering.FIFO:
        message.dedup_scope = int(config.dedup_scope)  # type: ignore[assignment]
    if config.dead_letter_queue is not None:
        message.dead_letter_queue = config.dead_letter_queue
    if config.max_delivery_count is not None:
        message.max_delivery_count = config.max_delivery_count
    if config.retry_policy is not None:
        message.retry_policy.minimum_backoff.CopyFrom(
            seconds_to_duration(config.retry_policy.minimum_backoff)
        )
        message.retry_policy.maximum_backoff.CopyFrom(
            seconds_to_duration(config.retry_policy.maximum_backoff)
        )
    return message


def queue_to_proto(info: domain.QueueInfo) -> pb.Queue:
    return pb.Queue(
        name=info.name,
        config=config_to_proto(info.config),
        create_time=seconds_to_timestamp(info.create_time),
    )


def stats_to_proto(stats: domain.QueueStats) -> pb.QueueStats:
    return pb.QueueStats(
        visible=stats.visible,
        leased=stats.leased,
        delayed=stats.delayed,
        total=stats.total,
        oldest_visible_age=seconds_to_duration(max(0.0, stats.oldest_visible_age)),
        dead_lettered_total=stats.dead_lettered_total,
        expired_total=stats.expired_total,
        deleted_total=stats.deleted_total,
        channels=[
            pb.ChannelStats(
                channel=channel,
                visible=counts.visible,
                leased=counts.leased,
                delayed=counts.delayed,
                total=counts.total,
            )
            for channel, counts in sorted(stats.channels.items())
        ],
        groups=stats.groups,
        blocked_groups=stats.blocked_groups,
    )


# --- messages -------------------------------------------------------------------------------


class TimestampCache:
    """seconds_to_timestamp for the many equal instants of one batch: every message of a send
    shares enqueued_at and expires_at, every message of a receive shares visible_at."""

    def __init__(self) -> None:
        self._made: dict[float, timestamp_pb2.Timestamp] = {}

    def __call__(self, when: float) -> timestamp_pb2.Timestamp:
        made = self._made.get(when)
        if made is None:
            made = self._made[when] = seconds_to_timestamp(when)
        return made


# --- received messages as protobuf wire bytes -------------------------------------------------
#
# A receive of 1,000 messages built its response with `messages.add(...)`, the largest single
# cost on the event loop in a profile. Writing each ReceivedMessage's wire bytes here and parsing
# the whole response once (upb, in C) costs about a third of that (docs/performance.md, "Figures
# behind the code"). The encoding is plain proto3 (fields in number order, empty scalars left out);
# parsing it back checks it, so a response can never carry bytes the schema does not allow.

_SMALL_VARINTS = [bytes((n,)) for n in range(128)]


def _varint(n: int) -> bytes:
    if n < 128:
        return _SMALL_VARINTS[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string_field(tag: bytes, text: str) -> bytes:
    data = text.encode()
    return tag + _varint(len(data)) + data


class ReceivedEncoder:
    """ReceivedMessages as wire bytes, each a whole `messages` entry (tag, length, message) of a
    GetMessagesResponse: `response(parts)` joins and parses them into one response. Timestamp
    fields are encoded once per distinct instant (a receive's messages share visible_at, a send's
    share enqueued_at and expires_at)."""

    def __init__(self) -> None:
        self._enqueued: dict[float, bytes] = {}
        self._expires: dict[float, bytes] = {}
        self._visible: dict[float, bytes] = {}

    @staticmethod
    def _time(made: dict[float, bytes], tag: bytes, when: float) -> bytes:
        data = seconds_to_timestamp(when).SerializeToString()
        field = made[when] = tag + _varint(len(data)) + data
        return field

    def __call__(self, message: domain.DeliveredMessage) -> bytes:
        enqueued = self._enqueued.get(message.enqueued_at) or self._time(
            self._enqueued, b"\x32", message.enqueued_at
        )
        expires = self._expires.get(message.expires_at) or self._time(
            self._expires, b"\x3a", message.expires_at
        )
        visible = self._visible.get(message.visible_at) or self._time(
            self._visible, b"\x42", message.visible_at
        )
        body = message.body
        parts = [
            _string_field(b"\x0a", message.message_id),
            _string_field(b"\x12", message.receipt),
        ]
        if body:
            parts += (b"\x1a", _varint(len(body)), body)
        if message.attributes:
            for key, value in message.attributes.items():
                entry = _string_field(b"\x0a", key) + _string_field(b"\x12", value)
                parts += (b"\x22", _varint(len(entry)), entry)
        if message.channel:
            parts.append(_string_field(b"\x2a", message.channel))
        parts += (enqueued, expires, visible, b"\x48", _varint(message.delivery_count))
        if message.last_error:
            parts.append(_string_field(b"\x52", message.last_error))
        if message.group:
            parts.append(_string_field(b"\x5a", message.group))
        if message.sequence:
            parts += (b"\x60", _varint(message.sequence))
        encoded = b"".join(parts)
        return b"\x0a" + _varint(len(encoded)) + encoded

    @staticmethod
    def response(parts: list[bytes]) -> pb.GetMessagesResponse:
        return pb.GetMessagesResponse.FromString(b"".join(parts))


class Wire:
    """A response as its protobuf wire bytes, which gRPC sends as they are (`serialize`).

    The hot responses (GetMessages, SendMessages, DeleteMessages) are written as wire bytes
    (ReceivedEncoder, _framed_alike); parsing them into a message only for gRPC to serialize it
    again cost a part of a microsecond per received message. `count` is what the metrics count of
    the response: messages received, sent, or acknowledged (metrics.py)."""

    __slots__ = ("data", "count")

    def __init__(self, data: bytes, count: int) -> None:
        self.data = data
        self.count = count

    def parse(self, message_class: Any) -> Any:
        """The response as a message of message_class (for tests and tools)."""
        return message_class.FromString(self.data)


def serialize(response: Any) -> bytes:
    """The response serializer of every QueueService method: a Wire as it is, else the message
    serialized."""
    if response.__class__ is Wire:
        return response.data
    return response.SerializeToString()  # type: ignore[no-any-return]


def timestamp_field(tag: bytes, when: float) -> bytes:
    """One Timestamp field (tag, length, Timestamp) of the instant when, as wire bytes."""
    data = seconds_to_timestamp(when).SerializeToString()
    return tag + _varint(len(data)) + data


def encode_received(messages: list[domain.DeliveredMessage]) -> list[bytes]:
    """ReceivedEncoder's bytes for each message: by the compiled twin (leaseq._native, about a
    tenth of the cost) when it is built, else by ReceivedEncoder itself. The twin raises on
    anything it does not expect (a type, a range), and then ReceivedEncoder answers: the
    result, or the error, is always ReceivedEncoder's."""
    if speedups is not None:
        try:
            return speedups.encode_received(messages)  # type: ignore[no-any-return]
        except Exception:
            pass
    encode = ReceivedEncoder()
    return [encode(message) for message in messages]


_OK = domain.LeaseStatus.OK


def _framed_alike(texts: list[str], tag: str, suffix: str = "") -> bytes | None:
    """Field 1 entries (tag 0x0a, length) each holding `tag`, one of texts and suffix, as one
    join: what the per-entry loops below write, when every text is ASCII and of one short
    length (receipts, message ids), so that every entry has the same framing bytes. None when
    they are not (the loops do it)."""
    if not texts:
        return b""
    lengths = set(map(len, texts))
    if len(lengths) != 1:
        return None
    (length,) = lengths
    entry = len(tag) + 1 + length + len(suffix)
    if entry >= 128:  # one-byte varints only
        return None
    joined = f"{suffix}\x0a{chr(entry)}{tag}{chr(length)}".join(texts)
    if not joined.isascii():  # UTF-8 lengths would differ from len()
        return None
    return f"\x0a{chr(entry)}{tag}{chr(length)}{joined}{suffix}".encode("ascii")


def send_results_response(
    entries: Any, outcomes: list[domain.SendOutcome]
) -> pb.SendMessagesResponse:
    """A SendMessagesResponse with one SendResult (id echoed, message_id, duplicate) per entry,
    all accepted, written as wire bytes and parsed once (see ReceivedEncoder)."""
    message_ids = [outcome.message_id for outcome in outcomes]
    if not any(outcome.duplicate for outcome in outcomes) and not any(e.id for e in entries):
        # The common batch (no entry ids, no duplicates): every result has the same framing.
        framed = _framed_alike(message_ids, "\x12")
        if framed is not None:
            return pb.SendMessagesResponse.FromString(framed)
    parts = []
    for entry, outcome in zip(entries, outcomes):
        entry_id = entry.id
        result = _string_field(b"\x12", outcome.message_id)
        if entry_id:
            result = _string_field(b"\x0a", entry_id) + result
        if outcome.duplicate:
            result += b"\x18\x01"
        parts.append(b"\x0a" + _varint(len(result)) + result)
    return pb.SendMessagesResponse.FromString(b"".join(parts))


def sent_response(
    ids: list[str], message_ids: list[str], duplicates: Sequence[int] = ()
) -> pb.SendMessagesResponse:
    """send_results_response for entries that were only an id, a body and perhaps a dedup id,
    all sent; duplicates: the indexes of those that were duplicates (rare: a retried send)."""
    return pb.SendMessagesResponse.FromString(sent_wire(ids, message_ids, duplicates))


def sent_wire(ids: list[str], message_ids: list[str], duplicates: Sequence[int] = ()) -> bytes:
    """sent_response's wire bytes (its `results`): by leaseq._native when built and nothing is
    a duplicate, else the same loop."""
    if duplicates:
        return send_results_python(ids, message_ids, duplicates)
    if not any(ids):
        framed = _framed_alike(message_ids, "\x12")
        if framed is not None:
            return framed
    if speedups is not None:
        try:
            return speedups.send_results(ids, message_ids)  # type: ignore[no-any-return]
        except Exception:
            pass
    return send_results_python(ids, message_ids)


def send_results_python(
    ids: list[str], message_ids: list[str], duplicates: Sequence[int] = ()
) -> bytes:
    """The wire bytes of one SendResult (id when not empty, message_id, duplicate when its
    index is in duplicates) per pair: the twin of leaseq._native.speedups.send_results (which
    has no duplicates)."""
    duplicated = set(duplicates)
    parts = []
    for index, (entry_id, message_id) in enumerate(zip(ids, message_ids)):
        result = _string_field(b"\x12", message_id)
        if entry_id:
            result = _string_field(b"\x0a", entry_id) + result
        if index in duplicated:
            result += b"\x18\x01"
        parts.append(b"\x0a" + _varint(len(result)) + result)
    return b"".join(parts)


_ENTRY_ID = pb.SendEntry.DESCRIPTOR.fields_by_name["id"]
_ENTRY_BODY = pb.SendEntry.DESCRIPTOR.fields_by_name["body"]
_ENTRY_DEDUP_ID = pb.SendEntry.DESCRIPTOR.fields_by_name["dedup_id"]


def plain_entries(
    request: pb.SendMessagesRequest, with_dedup: bool = False
) -> tuple[list[str], list[bytes]] | tuple[list[str], list[bytes], list[str] | None] | None:
    """(ids, bodies) of the request's entries when every one sets nothing but an id and a body
    (the common send: such an entry needs no check but its body's size), else None. with_dedup:
    a dedup id is allowed too, and the answer is (ids, bodies, dedup_ids), dedup_ids None when
    no entry sets one (else one per entry, "" where unset: write_queue's send). The compiled
    twin reads the request's wire bytes (serializing it again costs a few ns a message) instead
    of each entry's fields; it also says None for an entry with unknown fields, which then takes
    the per-entry way: the outcome is the same either way."""
    if speedups is not None:
        try:
            return speedups.plain_entries(request.SerializeToString(), with_dedup)  # type: ignore[no-any-return]
        except Exception:
            pass
    return plain_entries_python(request, with_dedup)


def plain_entries_python(
    request: pb.SendMessagesRequest, with_dedup: bool = False
) -> tuple[list[str], list[bytes]] | tuple[list[str], list[bytes], list[str] | None] | None:
    allowed = (_ENTRY_ID, _ENTRY_BODY, _ENTRY_DEDUP_ID) if with_dedup else (_ENTRY_ID, _ENTRY_BODY)
    ids: list[str] = []
    bodies: list[bytes] = []
    dedup_ids: list[str] = []
    for entry in request.entries:
        for field, _ in entry.ListFields():
            if field not in allowed:
                return None
        ids.append(entry.id)
        bodies.append(entry.body)
        dedup_ids.append(entry.dedup_id)
    if not with_dedup:
        return ids, bodies
    return ids, bodies, dedup_ids if any(dedup_ids) else None


def delete_results_response(results: Sequence[domain.LeaseResult]) -> pb.DeleteMessagesResponse:
    """A DeleteMessagesResponse with one DeleteResult (receipt, status) per result, written as
    wire bytes and parsed once (see ReceivedEncoder: add() per entry cost three times as much)."""
    return pb.DeleteMessagesResponse.FromString(delete_results_wire(results)[0])


def delete_results_wire(results: Sequence[domain.LeaseResult]) -> tuple[bytes, int]:
    """delete_results_response's wire bytes (its `results`), and how many results are OK."""
    if results.__class__ is domain.AllDeleted:  # the usual ack, told without a result object
        framed = _framed_alike(list(results.receipts), "\x0a", "\x10\x01")
        if framed is not None:
            return framed, len(results)
    elif all(result.status == _OK for result in results):
        # The common ack: every entry is a receipt (same length, ASCII) and OK.
        framed = _framed_alike([result.receipt for result in results], "\x0a", "\x10\x01")
        if framed is not None:
            return framed, len(results)
    parts = []
    acked = 0
    for result in results:
        entry = _string_field(b"\x0a", result.receipt) + b"\x10" + _varint(result.status)
        parts.append(b"\x0a" + _varint(len(entry)) + entry)
        acked += result.status == _OK
    return b"".join(parts), acked


def received_to_proto(message: domain.DeliveredMessage) -> pb.ReceivedMessage:
    return ReceivedEncoder.response([ReceivedEncoder()(message)]).messages[0]


def peeked_to_proto(message: domain.PeekedMessage) -> pb.PeekedMessage:
    return pb.PeekedMessage(
        message_id=message.message_id,
        body=message.body,
        attributes=message.attributes,
        channel=message.channel,
        enqueued_at=seconds_to_timestamp(message.enqueued_at),
        expires_at=seconds_to_timestamp(message.expires_at),
        visible_at=seconds_to_timestamp(message.visible_at),
        delivery_count=message.delivery_count,
        last_error=message.last_error,
        state=int(message.state),  # type: ignore[arg-type]  # the domain enum's values are the proto's numbers
        group=message.group,
        sequence=message.sequence,
    )


def lease_status_to_proto(status: domain.LeaseStatus) -> int:
    return int(status)  # equal numbers by construction (domain.LeaseStatus docstring)


def add_send_error(results: Any, entry_id: str, error: InvalidArgument) -> None:
    """Append the SendResult of an entry that failed validation to a repeated field."""
    results.add(
        id=entry_id, error=pb.EntryError(code=3, message=str(error))
    )  # 3 = INVALID_ARGUMENT
