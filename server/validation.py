"""Every range and shape check of a request, in one place (API.md "Queue configuration",
"Messages", "GetMessages").

Each function reads one request message and returns plain values for the store, or raises
`OutOfRange` (a numeric value outside its range: the client gets the field, the value and both
bounds) or `InvalidArgument` (anything else malformed). Field names in errors are the request's
field paths ("max_messages", "config.visibility_timeout", "entries[3].delay"), so a caller can
point at the culprit. Duration values in OUT_OF_RANGE metadata are written as proto3 JSON writes
Durations ("43200s", "0.500s").

Only checks that need nothing but the request (and, where said, the queue's configuration) live
here; what only the store knows (a missing queue, a dead letter queue that does not exist, an
updated body too big for the message's current attributes) stays with the store.

Decisions (API.md leaves them open):
- max_messages of GetMessages and PeekMessages: 0 is out of range (minimum 1), as API.md's error
  example says; clients always send a value.
- max_outstanding 0 and page_size 0 mean the documented defaults (1,000 and 100); out-of-range
  reports show the documented range (minimum 1).
- Send: batch shape errors (count, duplicate entry ids, queue name) fail the request; every
  problem of a single entry becomes that entry's error and the other entries are sent.
- follow with an effective visibility_timeout of 0 is refused: without a lease, every receive
  would deliver the same visible messages again, and the stream would spin without end.
- An explicitly present but empty `dead_letter_queue` means "none".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

from google.protobuf import duration_pb2
from google.protobuf.message import Message

from leaseq.v1 import queue_service_pb2 as pb

from .convert import duration_to_seconds, format_seconds
from .errors import InvalidArgument, OutOfRange, clip
from .page_tokens import PageTokens
from .store import base

# --- ranges (API.md) --------------------------------------------------------------------------

NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,80}")
MAX_NAME = 80

MIN_BATCH, MAX_BATCH = 1, base.MAX_BATCH
MAX_OUTSTANDING = 100_000
DEFAULT_MAX_OUTSTANDING = 1_000
MAX_PAGE_SIZE = 1_000
DEFAULT_PAGE_SIZE = 100
MAX_ATTRIBUTES = 16
MAX_CHANNEL = 64
MAX_DEDUP_ID = 128
MAX_ATTEMPT_ID = 128
MAX_REASON = 1024  # a release reason is kept as last_error on every later delivery: keep it small
# Leases of up to 7 days: Azure Queue Storage's bound (12 h before issue 18), so that every
# dialect has one range; SQS's own VisibilityTimeout stays at most 12 h in frontends/sqs.
MAX_VISIBILITY = 7 * 86400.0
MAX_WAIT = 30.0
MIN_TTL = 1.0
MAX_INT64 = 2**63 - 1

# QueueConfig duration fields: (minimum, maximum) in seconds. default_delay's maximum is the
# retention, checked once the retention is known.
_CONFIG_DURATIONS: dict[str, tuple[float, float]] = {
    "visibility_timeout": (0.0, MAX_VISIBILITY),
    "receive_wait_time": (0.0, MAX_WAIT),
    "message_retention": (60.0, 14 * 86400.0),
    "default_delay": (0.0, 14 * 86400.0),
    "dedup_window": (0.0, 3600.0),
}
_CONFIG_INTS: dict[str, tuple[int, int]] = {
    "max_message_bytes": (1024, 8 * 1024 * 1024),
    "max_delivery_count": (1, 1000),
    "max_in_flight": (1, 10_000_000),
}
# In declaration order, so the first bad field reported is stable.
CONFIG_FIELDS = tuple(f.name for f in fields(base.QueueConfig))

# Duration's own limits (google/protobuf/duration.proto): about 10,000 years.
_DURATION_MAX_SECONDS = 315_576_000_000


# --- small checks ------------------------------------------------------------------------------


def queue_name(name: str, field: str = "name") -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidArgument(field, "a queue name is 1-80 characters of A-Z a-z 0-9 _ -")
    return name


def int_range(value: int, field: str, minimum: int, maximum: int) -> int:
    if not minimum <= value <= maximum:
        raise OutOfRange(field, value, minimum, maximum)
    return value


def duration(value: duration_pb2.Duration, field: str, minimum: float, maximum: float) -> float:
    """Seconds of a well-formed Duration within [minimum, maximum]."""
    seconds, nanos = value.seconds, value.nanos
    if (
        abs(seconds) > _DURATION_MAX_SECONDS
        or abs(nanos) > 999_999_999
        or (seconds > 0 and nanos < 0)
        or (seconds < 0 and nanos > 0)
    ):
        raise InvalidArgument(
            field, "malformed Duration: seconds and nanos must share a sign, |nanos| < 1e9"
        )
    result = duration_to_seconds(value)
    if not minimum <= result <= maximum:
        raise OutOfRange(
            field, format_seconds(result), format_seconds(minimum), format_seconds(maximum)
        )
    return result


def optional_duration(
    message: Message, name: str, prefix: str, minimum: float, maximum: float
) -> float | None:
    """None when the Duration field `name` of message is unset (message fields have presence)."""
    if not message.HasField(name):
        return None
    return duration(getattr(message, name), prefix + name, minimum, maximum)


NUL = "\x00"


def max_length(value: str, field: str, limit: int) -> str:
    """A text field the store keeps or matches: at most limit characters, and no U+0000 (see
    `no_nul`)."""
    if len(value) > limit:
        raise InvalidArgument(field, f"at most {limit} characters (got {len(value)})")
    return no_nul(value, field)


def no_nul(value: str, field: str) -> str:
    """U+0000 is refused in every text field, on every store: PostgreSQL's text cannot hold it
    (it answered INTERNAL, and failed a whole send batch for one entry), and one rule for all
    stores keeps a message portable between them."""
    if NUL in value:
        raise InvalidArgument(field, "must not contain U+0000 (NUL)")
    return value


RESERVED_ATTRIBUTE_PREFIXES = ("sqs:",)
"""Attribute names a front end keeps for itself ("sqs:types": the SQS types of the message's
attributes, frontends/sqs/message_attributes.py). Only that front end may write them: a value
another sender wrote would be read by the dialect as its own (a poison message for its readers)."""


def attributes(values: dict[str, str], field: str, owned_prefix: str = "") -> dict[str, str]:
    """Message attributes: at most MAX_ATTRIBUTES, no U+0000 in a key or a value, no reserved
    name (RESERVED_ATTRIBUTE_PREFIXES) unless under owned_prefix, the caller's own."""
    if len(values) > MAX_ATTRIBUTES:
        raise InvalidArgument(field, f"at most {MAX_ATTRIBUTES} attributes")
    for key, value in values.items():
        if NUL in key or NUL in value:
            raise InvalidArgument(field, "must not contain U+0000 (NUL) in a key or a value")
        if key.startswith(RESERVED_ATTRIBUTE_PREFIXES) and not (
            owned_prefix and key.startswith(owned_prefix)
        ):
            raise InvalidArgument(
                field,
                f"attribute name {clip(key)!r} is reserved: names starting with "
                f"{' or '.join(RESERVED_ATTRIBUTE_PREFIXES)} are kept by a front end",
            )
    return values


def channel_filter(value: str, field: str = "channel_filter") -> str:
    """An exact channel, or a prefix ending in '*'; empty means every channel."""
    prefix = value[:-1] if value.endswith("*") else value
    if "*" in prefix:
        raise InvalidArgument(field, "'*' is allowed only as the last character (a prefix)")
    max_length(prefix, field, MAX_CHANNEL)
    return value


def batch_size(count: int, field: str) -> int:
    return int_range(count, field, MIN_BATCH, MAX_BATCH)


# --- queues -----------------------------------------------------------------------------------


def _config_field(config: pb.QueueConfig, name: str) -> Any:
    """The validated value of one present QueueConfig field."""
    path = f"config.{name}"
    if name in _CONFIG_DURATIONS:
        low, high = _CONFIG_DURATIONS[name]
        return duration(getattr(config, name), path, low, high)
    if name in _CONFIG_INTS:
        low, high = _CONFIG_INTS[name]
        return int_range(getattr(config, name), path, low, high)
    # dead_letter_queue: present and empty means none.
    value = config.dead_letter_queue
    return queue_name(value, path) if value else None


def _check_config(name: str, config: base.QueueConfig) -> base.QueueConfig:
    """The checks that involve more than one field."""
    if config.default_delay > config.message_retention:
        raise OutOfRange(
            "config.default_delay",
            format_seconds(config.default_delay),
            format_seconds(0.0),
            format_seconds(config.message_retention),
        )
    if (config.dead_letter_queue is None) != (config.max_delivery_count is None):
        missing = "max_delivery_count" if config.max_delivery_count is None else "dead_letter_queue"
        raise InvalidArgument(
            f"config.{missing}", "dead_letter_queue and max_delivery_count are set together"
        )
    if config.dead_letter_queue == name:
        raise InvalidArgument(
            "config.dead_letter_queue", "a queue cannot be its own dead letter queue"
        )
    return config


def _present_config_fields(config: pb.QueueConfig) -> list[str]:
    return [name for name in CONFIG_FIELDS if config.HasField(name)]


def create_queue(request: pb.CreateQueueRequest) -> tuple[str, base.QueueConfig]:
    """The name and the full configuration: unset fields take API.md's defaults."""
    name = queue_name(request.name)
    values = {f: _config_field(request.config, f) for f in _present_config_fields(request.config)}
    return name, _check_config(name, base.QueueConfig(**values))


def update_mask_paths(request: pb.UpdateQueueRequest) -> list[str]:
    """QueueConfig fields the update changes. Paths may name the field ("visibility_timeout") or
    its path in the Queue resource ("config.visibility_timeout", AIP-134); "config" or "*" means
    every field. An empty mask means the fields set in config."""
    if not request.update_mask.paths:
        return _present_config_fields(request.config)
    chosen: list[str] = []
    for path in request.update_mask.paths:
        if path in ("*", "config"):
            return list(CONFIG_FIELDS)
        name = path.removeprefix("config.")
        if name not in CONFIG_FIELDS:
            raise InvalidArgument(
                "update_mask", f"unknown path {clip(path)!r}: name QueueConfig fields"
            )
        if name not in chosen:
            chosen.append(name)
    return chosen


def update_queue(request: pb.UpdateQueueRequest, current: base.QueueConfig) -> base.QueueConfig:
    """The merged configuration: masked fields take the request's value, or their default when
    unset in the request; other fields keep their current value."""
    name = queue_name(request.name)
    defaults = base.QueueConfig()
    changes: dict[str, Any] = {}
    for field in update_mask_paths(request):
        if request.config.HasField(field):
            changes[field] = _config_field(request.config, field)
        else:
            changes[field] = getattr(defaults, field)
    return _check_config(name, replace(current, **changes))


@dataclass(frozen=True)
class ListParams:
    prefix: str
    after: str | None
    limit: int


def list_queues(request: pb.ListQueuesRequest, tokens: PageTokens) -> ListParams:
    prefix = request.prefix
    if prefix and not NAME_PATTERN.fullmatch(prefix):
        raise InvalidArgument("prefix", "a prefix of a queue name: up to 80 of A-Z a-z 0-9 _ -")
    limit = request.page_size or DEFAULT_PAGE_SIZE
    int_range(limit, "page_size", 1, MAX_PAGE_SIZE)
    after = tokens.decode_list(request.page_token, prefix) if request.page_token else None
    return ListParams(prefix, after, limit)


# --- send -------------------------------------------------------------------------------------


def send_request(request: pb.SendMessagesRequest) -> str:
    """Batch-level checks; returns the queue name. Entries are checked one by one (send_entry)."""
    name = queue_name(request.queue, "queue")
    batch_size(len(request.entries), "entries")
    seen: dict[str, int] = {}
    for index, entry in enumerate(request.entries):
        if not entry.id:
            continue
        if entry.id in seen:
            raise InvalidArgument(
                f"entries[{index}].id", f"repeats the id of entries[{seen[entry.id]}]"
            )
        seen[entry.id] = index
    return name


# An entry with only these fields set needs no check but the body's size (send_entry).
_ENTRY_ID = pb.SendEntry.DESCRIPTOR.fields_by_name["id"]
_ENTRY_BODY = pb.SendEntry.DESCRIPTOR.fields_by_name["body"]


def send_entry(entry: pb.SendEntry, index: int, config: base.QueueConfig) -> base.NewMessage:
    """One entry against its queue's configuration. An InvalidArgument here fails only this
    entry (the service reports it in the entry's SendResult).

    Runs once per message sent, so the common entry (a body and perhaps an id, nothing else)
    takes the short way: one ListFields() call tells that, instead of reading every field (half
    the cost); no field path is formatted unless an error needs it."""
    fields = entry.ListFields()  # the set fields, in field number order
    if fields and fields[-1][0] is _ENTRY_BODY and (
        len(fields) == 1 or (len(fields) == 2 and fields[0][0] is _ENTRY_ID)
    ):
        body = fields[-1][1]
        if len(body) <= config.max_message_bytes:
            return base.NewMessage(body, {}, "", None, None, "")
    body = entry.body
    attrs = attributes(dict(entry.attributes), f"entries[{index}].attributes") if entry.attributes else {}
    size = base.message_size(body, attrs) if attrs else len(body)
    if size > config.max_message_bytes:
        raise InvalidArgument(
            f"entries[{index}].body",
            f"body plus attributes is {size} bytes, over the queue's max_message_bytes "
            f"{config.max_message_bytes}",
        )
    channel, dedup_id = entry.channel, entry.dedup_id
    if channel and (len(channel) > MAX_CHANNEL or NUL in channel):
        max_length(channel, f"entries[{index}].channel", MAX_CHANNEL)
    if dedup_id and (len(dedup_id) > MAX_DEDUP_ID or NUL in dedup_id):
        max_length(dedup_id, f"entries[{index}].dedup_id", MAX_DEDUP_ID)
    delay = ttl = None
    if entry.HasField("delay"):
        delay = duration(entry.delay, f"entries[{index}].delay", 0.0, config.message_retention)
    if entry.HasField("ttl"):
        ttl = duration(entry.ttl, f"entries[{index}].ttl", MIN_TTL, config.message_retention)
    return base.NewMessage(body, attrs, channel, delay, ttl, dedup_id)


# --- receive / peek ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceiveParams:
    queue: str
    max_messages: int
    visibility_timeout: float | None  # None: the queue's
    wait_time: float | None  # None: the queue's receive_wait_time (resolve_receive fills it)
    channel_filter: str
    follow: bool
    max_outstanding: int
    attempt_id: str


def get_messages(request: pb.GetMessagesRequest) -> ReceiveParams:
    """The checks that need only the request."""
    name = queue_name(request.queue, "queue")
    max_messages = batch_size(request.max_messages, "max_messages")
    vt = optional_duration(request, "visibility_timeout", "", 0.0, MAX_VISIBILITY)
    wait = optional_duration(request, "wait_time", "", 0.0, MAX_WAIT)
    outstanding = request.max_outstanding or DEFAULT_MAX_OUTSTANDING
    int_range(outstanding, "max_outstanding", 1, MAX_OUTSTANDING)
    attempt_id = max_length(request.receive_attempt_id, "receive_attempt_id", MAX_ATTEMPT_ID)
    if attempt_id and request.follow:
        raise InvalidArgument("receive_attempt_id", "only for non-follow receives")
    return ReceiveParams(
        queue=name,
        max_messages=max_messages,
        visibility_timeout=vt,
        wait_time=wait,
        channel_filter=channel_filter(request.channel_filter),
        follow=request.follow,
        max_outstanding=outstanding,
        attempt_id=attempt_id,
    )


def resolve_receive(params: ReceiveParams, config: base.QueueConfig) -> ReceiveParams:
    """Fill the queue's defaults; refuse a follow stream without leases (module docstring)."""
    wait = config.receive_wait_time if params.wait_time is None else params.wait_time
    vt = config.visibility_timeout if params.visibility_timeout is None else params.visibility_timeout
    if params.follow and vt <= 0:
        raise InvalidArgument(
            "visibility_timeout",
            "follow needs a lease (> 0): without one every receive redelivers the same messages",
        )
    return replace(params, wait_time=wait)


@dataclass(frozen=True)
class PeekParams:
    queue: str
    max_messages: int
    channel_filter: str
    include_leased: bool
    include_delayed: bool
    after: base.PeekCursor | None


def peek_messages(request: pb.PeekMessagesRequest, tokens: PageTokens) -> PeekParams:
    name = queue_name(request.queue, "queue")
    max_messages = batch_size(request.max_messages, "max_messages")
    flt = channel_filter(request.channel_filter)
    after = (
        tokens.decode_peek(
            request.page_token, name, flt, request.include_leased, request.include_delayed
        )
        if request.page_token
        else None
    )
    return PeekParams(
        name, max_messages, flt, request.include_leased, request.include_delayed, after
    )


# --- leases -----------------------------------------------------------------------------------


def change_visibility(request: pb.ChangeVisibilityRequest) -> tuple[str, list[base.VisibilityChange]]:
    name = queue_name(request.queue, "queue")
    batch_size(len(request.entries), "entries")
    changes = []
    for index, entry in enumerate(request.entries):
        path = f"entries[{index}].visibility_timeout"
        # Required: an unset Duration silently meaning 0 would release a lease by accident.
        if not entry.HasField("visibility_timeout"):
            raise InvalidArgument(path, "required (0 releases the message)")
        vt = duration(entry.visibility_timeout, path, 0.0, MAX_VISIBILITY)
        max_length(entry.reason, f"entries[{index}].reason", MAX_REASON)
        changes.append(base.VisibilityChange(entry.receipt, vt, entry.reason))
    return name, changes


def delete_messages(request: pb.DeleteMessagesRequest) -> tuple[str, list[str], list[str]]:
    name = queue_name(request.queue, "queue")
    # One batch: receipts and attempt ids count together.
    batch_size(len(request.receipts) + len(request.receive_attempt_ids), "receipts")
    for index, attempt_id in enumerate(request.receive_attempt_ids):
        field = f"receive_attempt_ids[{index}]"
        # An empty id would name every message delivered without an attempt id.
        if not attempt_id:
            raise InvalidArgument(field, "must not be empty")
        max_length(attempt_id, field, MAX_ATTEMPT_ID)
    return name, list(request.receipts), list(request.receive_attempt_ids)


@dataclass(frozen=True)
class UpdateParams:
    queue: str
    receipt: str
    body: bytes | None  # None: keep
    attributes: dict[str, str] | None  # None: keep
    visibility_timeout: float | None  # None: keep the lease's end


_UPDATE_PATHS = ("body", "attributes", "visibility_timeout")


def update_message(request: pb.UpdateMessageRequest) -> UpdateParams:
    name = queue_name(request.queue, "queue")
    if request.update_mask.paths:
        paths = set()
        for path in request.update_mask.paths:
            if path not in _UPDATE_PATHS:
                raise InvalidArgument(
                    "update_mask", f"unknown path {clip(path)!r}: body, attributes, visibility_timeout"
                )
            paths.add(path)
    else:
        paths = {"body", "attributes"}
        if request.HasField("visibility_timeout"):
            paths.add("visibility_timeout")
    attrs = attributes(dict(request.attributes), "attributes") if "attributes" in paths else None
    vt = None
    if "visibility_timeout" in paths:
        if not request.HasField("visibility_timeout"):
            raise InvalidArgument("visibility_timeout", "named in update_mask but not set")
        vt = duration(request.visibility_timeout, "visibility_timeout", 0.0, MAX_VISIBILITY)
    return UpdateParams(
        queue=name,
        receipt=request.receipt,
        body=request.body if "body" in paths else None,
        attributes=attrs,
        visibility_timeout=vt,
    )


@dataclass(frozen=True)
class RedriveParams:
    queue: str
    destination: str | None
    max_messages: int
    channel_filter: str


def redrive_messages(request: pb.RedriveMessagesRequest) -> RedriveParams:
    return RedriveParams(
        queue=queue_name(request.queue, "queue"),
        destination=queue_name(request.destination, "destination") if request.destination else None,
        max_messages=int_range(request.max_messages, "max_messages", 0, MAX_INT64),
        channel_filter=channel_filter(request.channel_filter),
    )
