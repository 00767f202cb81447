"""The gRPC front end's reading of requests: each protobuf request to one checked command.

The rules and ranges themselves are the domain's (`domain.rules`, `domain.limits`: one definition
for every front end); this module reads protobuf (presence, malformed Durations, update masks,
page tokens) and applies them. Each function reads one request message and returns plain values
for the core, or raises
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

from dataclasses import dataclass, replace
from typing import Any

from google.protobuf import duration_pb2
from google.protobuf.message import Message

from leaseq.v1 import queue_service_pb2 as pb

from . import domain
from .convert import duration_to_seconds
from .domain import limits, rules
from .domain.commands import PeekParams, ReceiveParams
from .domain.limits import (
    DEFAULT_MAX_OUTSTANDING,
    DEFAULT_PAGE_SIZE,
    MAX_ATTEMPT_ID,
    MAX_INT64,
    MAX_OUTSTANDING,
    MAX_PAGE_SIZE,
    MAX_REASON,
    MAX_VISIBILITY,
    MAX_WAIT,
    NAME_PATTERN,
)
from .domain.rules import (
    CONFIG_FIELDS,
    attributes,
    batch_size,
    channel_filter,
    int_range,
    max_length,
    queue_name,
)
from .errors import InvalidArgument, clip
from .page_tokens import PageTokens

# Duration's own limits (google/protobuf/duration.proto): about 10,000 years.
_DURATION_MAX_SECONDS = 315_576_000_000


# --- protobuf values ---------------------------------------------------------------------------


def well_formed_seconds(value: duration_pb2.Duration, field: str) -> float:
    """Seconds of a well-formed Duration (any value: the range is the caller's rule)."""
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
    return duration_to_seconds(value)


def duration(value: duration_pb2.Duration, field: str, minimum: float, maximum: float) -> float:
    """Seconds of a well-formed Duration within [minimum, maximum]."""
    return rules.seconds_range(well_formed_seconds(value, field), field, minimum, maximum)


def optional_duration(
    message: Message, name: str, prefix: str, minimum: float, maximum: float
) -> float | None:
    """None when the Duration field `name` of message is unset (message fields have presence)."""
    if not message.HasField(name):
        return None
    return duration(getattr(message, name), prefix + name, minimum, maximum)


# --- queues -----------------------------------------------------------------------------------


def _config_field(config: pb.QueueConfig, name: str) -> Any:
    """The validated value of one present QueueConfig field."""
    path = f"config.{name}"
    if name in limits.CONFIG_DURATIONS:
        low, high = limits.CONFIG_DURATIONS[name]
        return duration(getattr(config, name), path, low, high)
    if name in limits.CONFIG_INTS:
        low, high = limits.CONFIG_INTS[name]
        return int_range(getattr(config, name), path, low, high)
    if name == "ordering":
        return _enum_value(config.ordering, path, domain.Ordering)
    if name == "dedup_scope":
        return _enum_value(config.dedup_scope, path, domain.DedupScope)
    if name == "content_based_dedup":
        return config.content_based_dedup
    if name == "retry_policy":
        return retry_policy(config.retry_policy, path)
    # dead_letter_queue: present and empty means none.
    value = config.dead_letter_queue
    return queue_name(value, path) if value else None


def _enum_value(number: int, path: str, kind: Any) -> Any:
    """A proto enum's number as the domain's enum; 0 (UNSPECIFIED) is the first value."""
    if number == 0:
        return next(iter(kind))
    try:
        return kind(number)
    except ValueError:
        raise InvalidArgument(path, f"unknown value {number}") from None


def retry_policy(policy: pb.RetryPolicy, path: str) -> domain.RetryPolicy:
    """A RetryPolicy: unset backoffs take Pub/Sub's defaults (10 s, 600 s)."""
    low, high = limits.RETRY_BACKOFF
    defaults = domain.RetryPolicy()
    values = {
        name: getattr(defaults, name)
        if not policy.HasField(name)
        else well_formed_seconds(getattr(policy, name), f"{path}.{name}")
        for name in ("minimum_backoff", "maximum_backoff")
    }
    return rules.retry_policy(domain.RetryPolicy(**values), path)


def _present_config_fields(config: pb.QueueConfig) -> list[str]:
    return [name for name in CONFIG_FIELDS if config.HasField(name)]


def create_queue(request: pb.CreateQueueRequest) -> tuple[str, domain.QueueConfig]:
    """The name and the full configuration: unset fields take API.md's defaults."""
    name = queue_name(request.name)
    values = {f: _config_field(request.config, f) for f in _present_config_fields(request.config)}
    return name, rules.check_config_relations(name, domain.QueueConfig(**values))


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


def update_queue(request: pb.UpdateQueueRequest, current: domain.QueueConfig) -> domain.QueueConfig:
    """The merged configuration: masked fields take the request's value, or their default when
    unset in the request; other fields keep their current value."""
    name = queue_name(request.name)
    defaults = domain.QueueConfig()
    changes: dict[str, Any] = {}
    for field in update_mask_paths(request):
        if request.config.HasField(field):
            changes[field] = _config_field(request.config, field)
        else:
            changes[field] = getattr(defaults, field)
    return rules.check_config_relations(name, replace(current, **changes))


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


def send_entry(entry: pb.SendEntry, index: int) -> domain.NewMessage | InvalidArgument:
    """One entry as the message to send, or the InvalidArgument that fails only this entry (a
    malformed Duration). Its ranges and its queue's limits are the core's check
    (`rules.check_message`, the one definition of a valid message).

    Runs once per message sent, so the common entry (a body and perhaps an id, nothing else)
    takes the short way: one ListFields() call tells that, instead of reading every field."""
    fields = entry.ListFields()  # the set fields, in field number order
    if (
        fields
        and fields[-1][0] is _ENTRY_BODY
        and (len(fields) == 1 or (len(fields) == 2 and fields[0][0] is _ENTRY_ID))
    ):
        return domain.NewMessage(fields[-1][1], {}, "", None, None, "")
    try:
        delay = ttl = None
        if entry.HasField("delay"):
            delay = well_formed_seconds(entry.delay, f"entries[{index}].delay")
        if entry.HasField("ttl"):
            ttl = well_formed_seconds(entry.ttl, f"entries[{index}].ttl")
    except InvalidArgument as error:
        return error
    return domain.NewMessage(
        entry.body,
        dict(entry.attributes) if entry.attributes else {},
        entry.channel,
        delay,
        ttl,
        entry.dedup_id,
        entry.group,
    )


# --- receive / peek ---------------------------------------------------------------------------


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


def change_visibility(
    request: pb.ChangeVisibilityRequest,
) -> tuple[str, list[domain.VisibilityChange]]:
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
        changes.append(domain.VisibilityChange(entry.receipt, vt, entry.reason))
    return name, changes


def dead_letter_messages(request: pb.DeadLetterMessagesRequest) -> tuple[str, list[str], str]:
    name = queue_name(request.queue, "queue")
    batch_size(len(request.receipts), "receipts")
    max_length(request.reason, "reason", MAX_REASON)
    return name, list(request.receipts), request.reason


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
                    "update_mask",
                    f"unknown path {clip(path)!r}: body, attributes, visibility_timeout",
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
