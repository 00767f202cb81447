"""Domain values <-> protobuf messages, and the opaque page tokens.

Only shapes live here: this module trusts its input. Reading a *request* (ranges, presence,
malformed Durations) is `validation`'s job; it uses the raw helpers below once a value is known
to be well formed. Times are float seconds since the epoch, as in the stores.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from leaseq.v1 import queue_service_pb2 as pb

from .errors import InvalidArgument
from .store import base

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


def config_to_proto(config: base.QueueConfig) -> pb.QueueConfig:
    """The effective configuration: every field set, the dead letter pair only when configured."""
    message = pb.QueueConfig(
        visibility_timeout=seconds_to_duration(config.visibility_timeout),
        receive_wait_time=seconds_to_duration(config.receive_wait_time),
        message_retention=seconds_to_duration(config.message_retention),
        default_delay=seconds_to_duration(config.default_delay),
        max_message_bytes=config.max_message_bytes,
        max_in_flight=config.max_in_flight,
        dedup_window=seconds_to_duration(config.dedup_window),
    )
    if config.dead_letter_queue is not None:
        message.dead_letter_queue = config.dead_letter_queue
    if config.max_delivery_count is not None:
        message.max_delivery_count = config.max_delivery_count
    return message


def queue_to_proto(info: base.QueueInfo) -> pb.Queue:
    return pb.Queue(
        name=info.name,
        config=config_to_proto(info.config),
        create_time=seconds_to_timestamp(info.create_time),
    )


def stats_to_proto(stats: base.QueueStats) -> pb.QueueStats:
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
    )


# --- messages -------------------------------------------------------------------------------


class TimestampCache:
    """seconds_to_timestamp for the many equal instants of one batch: every message of a send
    shares enqueued_at and expires_at, every message of a receive shares visible_at. Building a
    Timestamp once per distinct instant instead of three per message halves the cost of a
    received message (issue 6's profile)."""

    def __init__(self) -> None:
        self._made: dict[float, timestamp_pb2.Timestamp] = {}

    def __call__(self, when: float) -> timestamp_pb2.Timestamp:
        made = self._made.get(when)
        if made is None:
            made = self._made[when] = seconds_to_timestamp(when)
        return made


# Bytes a received message's fields other than body, channel, last_error and attributes can take
# on the wire: message_id (32) and receipt (39 characters), three Timestamps, delivery_count,
# every tag and length prefix. An upper bound, so a response sized by estimated_size never
# exceeds its budget.
_FIXED_FIELD_BYTES = 256


def estimated_size(message: base.DeliveredMessage) -> int:
    """An upper bound of the message's encoded size, without encoding it (str lengths times 4
    bound their UTF-8; ByteSize() per message cost more than building the message did)."""
    size = _FIXED_FIELD_BYTES + len(message.body) + 4 * (len(message.channel) + len(message.last_error))
    if message.attributes:
        size += sum(12 + 4 * (len(key) + len(value)) for key, value in message.attributes.items())
    return size


def add_received(
    messages: Any, message: base.DeliveredMessage, timestamps: TimestampCache
) -> None:
    """Append message to a repeated ReceivedMessage field (`add` builds it in place: no copy)."""
    added = messages.add(
        message_id=message.message_id,
        receipt=message.receipt,
        body=message.body,
        channel=message.channel,
        enqueued_at=timestamps(message.enqueued_at),
        expires_at=timestamps(message.expires_at),
        visible_at=timestamps(message.visible_at),
        delivery_count=message.delivery_count,
        last_error=message.last_error,
    )
    if message.attributes:
        added.attributes.update(message.attributes)


def received_to_proto(message: base.DeliveredMessage) -> pb.ReceivedMessage:
    response = pb.GetMessagesResponse()
    add_received(response.messages, message, TimestampCache())
    return response.messages[0]


def peeked_to_proto(message: base.PeekedMessage) -> pb.PeekedMessage:
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
        state=int(message.state),  # the domain enum's values are the proto's numbers
    )


def lease_status_to_proto(status: base.LeaseStatus) -> int:
    return int(status)  # equal numbers by construction (base.LeaseStatus docstring)


def add_send_error(results: Any, entry_id: str, error: InvalidArgument) -> None:
    """Append the SendResult of an entry that failed validation to a repeated field."""
    results.add(id=entry_id, error=pb.EntryError(code=3, message=str(error)))  # 3 = INVALID_ARGUMENT


# --- page tokens ----------------------------------------------------------------------------
#
# Tokens are base64url(JSON). They are opaque to clients (no promise about their content) but
# not secret: a forged token can only name a position, which any caller may read anyway. Each
# token also records the request parameters that shaped the listing, because a page of another
# filter continued from this position would silently skip or repeat items (AIP-158: the other
# fields must match the request that produced the token).

_LIST_KIND = "lq"
_PEEK_KIND = "pk"


def _encode(payload: dict) -> str:
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _decode(token: str, kind: str) -> dict:
    malformed = InvalidArgument("page_token", "malformed page token: pass a next_page_token back unchanged")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise malformed from None
    if not isinstance(payload, dict) or payload.get("k") != kind:
        raise malformed
    return payload


def encode_list_token(prefix: str, after: str) -> str:
    return _encode({"k": _LIST_KIND, "p": prefix, "a": after})


def decode_list_token(token: str, prefix: str) -> str:
    """The name after which the page starts. InvalidArgument when malformed or when the prefix
    differs from the request that produced the token."""
    payload = _decode(token, _LIST_KIND)
    after = payload.get("a")
    if not isinstance(after, str) or not isinstance(payload.get("p"), str):
        raise InvalidArgument("page_token", "malformed page token")
    if payload["p"] != prefix:
        raise InvalidArgument("page_token", "page token was issued for another prefix")
    return after


def encode_peek_token(
    cursor: base.PeekCursor, channel_filter: str, include_leased: bool, include_delayed: bool
) -> str:
    visible_at, key = cursor
    # repr() of a float round-trips exactly through JSON, so the cursor position is not rounded.
    return _encode(
        {
            "k": _PEEK_KIND,
            "v": visible_at,
            "i": key,
            "f": [channel_filter, include_leased, include_delayed],
        }
    )


def decode_peek_token(
    token: str, channel_filter: str, include_leased: bool, include_delayed: bool
) -> base.PeekCursor:
    payload = _decode(token, _PEEK_KIND)
    visible_at, key = payload.get("v"), payload.get("i")
    if (
        isinstance(visible_at, bool)
        or not isinstance(visible_at, (int, float))
        or not math.isfinite(visible_at)
        or isinstance(key, bool)
        or not isinstance(key, int)
        or not 0 <= key < 2**63  # store keys are SQL integers; anything else cannot be ours
    ):
        raise InvalidArgument("page_token", "malformed page token")
    if payload.get("f") != [channel_filter, include_leased, include_delayed]:
        raise InvalidArgument(
            "page_token",
            "page token was issued for another channel_filter / include_leased / include_delayed",
        )
    return float(visible_at), key
