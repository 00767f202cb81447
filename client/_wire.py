"""Everything the sync and async clients share: requests, responses, and the calls in between.

Each client method is a *plan*: a generator that yields the ``Call`` s it needs (one RPC each),
is sent each call's response back, and finally returns the method's result. It does no I/O, so
``QueueClient`` drives plans with blocking stubs and ``AsyncQueueClient`` with ``grpc.aio`` stubs,
and the logic (argument conversion, pagination, per-entry errors, result conversion) exists
once. A driver is a few lines::

    def run(plan):
        try:
            call = next(plan)
            while True:
                call = plan.send(invoke(call))   # invoke: the RPC, with retries
        except StopIteration as done:
            return done.value

(the real drivers also ``plan.throw`` a failed call's ``LeaseqError`` into the plan, so a bulk
plan can turn it into per-row results; plans that do not catch it simply let it through).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import grpc
from google.protobuf import duration_pb2, field_mask_pb2, timestamp_pb2
from google.protobuf.message import Message as ProtoMessage

from ..v1 import queue_service_pb2 as pb
from .errors import error_for_entry, error_for_status, status_code
from .types import (
    Body,
    ChannelStats,
    DeleteResults,
    DurationLike,
    EntryError,
    LeaseResult,
    LeaseStatus,
    Message,
    MessageState,
    PeekedMessage,
    Queue,
    QueueConfig,
    QueueRetryPolicy,
    QueueStats,
    SendEntry,
    SendResult,
    UpdateResult,
    VisibilityChange,
)

T = TypeVar("T")

MAX_MESSAGE_SIZE = 64 * 1024 * 1024
"""Largest gRPC message the client sends or accepts (64 MiB). A batch of 10,000 messages or
one 8 MiB message plus framing stays below it; gRPC's own default (4 MiB) would not."""

MAX_BATCH = 10_000
"""Most entries, receipts or messages one call may carry (API.md)."""

MAX_WAIT_SECONDS = 30.0
"""The longest long-poll wait (API.md); a receive's deadline leaves room for it."""


@dataclass(frozen=True)
class Call:
    """One RPC a plan needs.

    Attributes:
        method: the stub attribute (the RPC's name), e.g. ``"GetQueue"``.
        request: the request message.
        retry: the call is safe to repeat after UNAVAILABLE (it changes nothing twice).
        streaming: a server-streaming RPC: the driver sends back the list of every response.
        extra_timeout: seconds the call may take beyond the client's timeout (a long poll).
        raw: the request is wire bytes and the response(s) come back as wire bytes (the Arrow
            bulk path converts them itself, ``_wire_arrow``).
    """

    method: str
    request: ProtoMessage | bytes
    retry: bool
    streaming: bool = False
    extra_timeout: float = 0.0
    raw: bool = False


SERVICE_PATH = "/leaseq.v1.QueueService/"


def raw_method(channel: Any, call: Call) -> Any:
    """The channel's callable for ``call``'s RPC that takes and gives wire bytes (no
    serializers: gRPC passes bytes through)."""
    path = SERVICE_PATH + call.method
    if call.streaming:
        return channel.unary_stream(path, _registered_method=True)
    return channel.unary_unary(path, _registered_method=True)


Plan = Generator[Call, Any, T]


# --- conversions -----------------------------------------------------------------------------


def seconds(value: DurationLike) -> float:
    """Seconds of a duration given as int/float seconds or ``timedelta``."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    # bool is an int; True as a duration is almost certainly a mistaken argument.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a duration must be seconds or a timedelta, not {type(value).__name__}")
    return float(value)


def to_duration(value: DurationLike) -> duration_pb2.Duration:
    out = duration_pb2.Duration()
    if isinstance(value, timedelta):
        out.FromTimedelta(value)
    else:
        out.FromNanoseconds(round(seconds(value) * 1e9))
    return out


def to_timedelta(value: duration_pb2.Duration) -> timedelta:
    return value.ToTimedelta()


def to_datetime(value: timestamp_pb2.Timestamp) -> datetime:
    return value.ToDatetime(tzinfo=UTC)


def optional_datetime(message: ProtoMessage, name: str) -> datetime | None:
    return to_datetime(getattr(message, name)) if message.HasField(name) else None


def to_body(body: Body) -> bytes:
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"a body must be bytes or str, not {type(body).__name__}")


def lease_status(value: int) -> LeaseStatus:
    try:
        return LeaseStatus(value)
    except ValueError:  # a newer server's status: report it as unspecified rather than fail
        return LeaseStatus.UNSPECIFIED


def field_mask(paths: Iterable[str]) -> field_mask_pb2.FieldMask:
    return field_mask_pb2.FieldMask(paths=list(paths))


_DURATION_FIELDS = (
    "visibility_timeout",
    "receive_wait_time",
    "message_retention",
    "default_delay",
    "dedup_window",
)
_SCALAR_FIELDS = ("max_message_bytes", "dead_letter_queue", "max_delivery_count", "max_in_flight")
_ENUM_FIELDS: dict[str, dict[str, int]] = {
    "ordering": {"none": pb.ORDERING_NONE, "fifo": pb.ORDERING_FIFO, "fair": pb.ORDERING_FAIR},
    "dedup_scope": {"queue": pb.DEDUP_SCOPE_QUEUE, "group": pb.DEDUP_SCOPE_GROUP},
}
CONFIG_FIELDS = (
    *_DURATION_FIELDS,
    *_SCALAR_FIELDS,
    "retry_policy",
    "ordering",
    "content_based_dedup",
    "dedup_scope",
)
"""The keyword arguments ``create_queue`` and ``update_queue`` accept."""


def to_queue_config(options: Mapping[str, Any]) -> pb.QueueConfig:
    """A wire QueueConfig with the given options set; None leaves a field unset."""
    unknown = sorted(set(options) - set(CONFIG_FIELDS))
    if unknown:
        raise TypeError(f"unknown queue option(s): {', '.join(unknown)}")
    config = pb.QueueConfig()
    for name, value in options.items():
        if value is None:
            continue
        if name in _DURATION_FIELDS:
            getattr(config, name).CopyFrom(to_duration(value))
        elif name == "retry_policy":
            config.retry_policy.CopyFrom(to_retry_policy(value))
        elif name in _ENUM_FIELDS:
            numbers = _ENUM_FIELDS[name]
            if value not in numbers:
                raise ValueError(f"{name}: one of {', '.join(numbers)}, got {value!r}")
            setattr(config, name, numbers[value])
        else:
            setattr(config, name, value)
    return config


def to_retry_policy(value: Any) -> pb.RetryPolicy:
    """A QueueRetryPolicy, a (minimum, maximum) pair or a mapping of those names, on the wire."""
    if isinstance(value, QueueRetryPolicy):
        minimum, maximum = value.minimum_backoff, value.maximum_backoff
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - {"minimum_backoff", "maximum_backoff"})
        if unknown:
            raise TypeError(f"unknown retry_policy key(s): {', '.join(unknown)}")
        defaults = QueueRetryPolicy()
        minimum = value.get("minimum_backoff", defaults.minimum_backoff)
        maximum = value.get("maximum_backoff", defaults.maximum_backoff)
    elif isinstance(value, tuple) and len(value) == 2:
        minimum, maximum = value
    else:
        raise TypeError(
            "retry_policy must be a QueueRetryPolicy, a (minimum, maximum) pair or a mapping"
        )
    return pb.RetryPolicy(
        minimum_backoff=to_duration(minimum), maximum_backoff=to_duration(maximum)
    )


def from_queue_config(config: pb.QueueConfig) -> QueueConfig:
    defaults = QueueConfig()
    values: dict[str, Any] = {}
    for name in CONFIG_FIELDS:
        if name == "retry_policy":
            policy = config.retry_policy
            values[name] = (
                QueueRetryPolicy(
                    to_timedelta(policy.minimum_backoff), to_timedelta(policy.maximum_backoff)
                )
                if config.HasField(name)
                else None
            )
        elif config.HasField(name):
            value = getattr(config, name)
            if name in _ENUM_FIELDS:
                names = {n: k for k, n in _ENUM_FIELDS[name].items()}
                values[name] = names.get(value, getattr(defaults, name))
            else:
                values[name] = to_timedelta(value) if name in _DURATION_FIELDS else value
        else:
            values[name] = getattr(defaults, name)
    return QueueConfig(**values)


def from_queue(queue: pb.Queue) -> Queue:
    return Queue(
        name=queue.name,
        config=from_queue_config(queue.config),
        create_time=to_datetime(queue.create_time),
    )


def from_stats(stats: pb.QueueStats) -> QueueStats:
    return QueueStats(
        visible=stats.visible,
        leased=stats.leased,
        delayed=stats.delayed,
        total=stats.total,
        oldest_visible_age=to_timedelta(stats.oldest_visible_age),
        dead_lettered_total=stats.dead_lettered_total,
        expired_total=stats.expired_total,
        deleted_total=stats.deleted_total,
        channels=tuple(
            ChannelStats(c.channel, c.visible, c.leased, c.delayed, c.total) for c in stats.channels
        ),
        groups=stats.groups,
        blocked_groups=stats.blocked_groups,
    )


def to_attributes(attributes: Mapping[str, str], where: str) -> dict[str, str]:
    """``attributes`` as the wire's string map; anything else is a TypeError that names the
    attribute (protobuf's own says only "bad argument type for built-in operation")."""
    if not isinstance(attributes, Mapping):
        raise TypeError(f"{where}: a mapping of str to str, got {type(attributes).__name__}")
    for key, value in attributes.items():
        if not isinstance(key, str):
            raise TypeError(f"{where}: keys must be str, got {type(key).__name__} {key!r}")
        if not isinstance(value, str):
            raise TypeError(f"{where}: values must be str, got {type(value).__name__} for {key!r}")
    return dict(attributes)


def to_send_entry(entry: SendEntry | Body, index: int) -> pb.SendEntry:
    if not isinstance(entry, SendEntry):
        entry = SendEntry(entry)
    out = pb.SendEntry(
        id=entry.id or str(index),
        body=to_body(entry.body),
        attributes=to_attributes(entry.attributes, f"entries[{index}].attributes"),
        channel=entry.channel,
        dedup_id=entry.dedup_id,
        group=entry.group,
    )
    if entry.delay is not None:
        out.delay.CopyFrom(to_duration(entry.delay))
    if entry.ttl is not None:
        out.ttl.CopyFrom(to_duration(entry.ttl))
    return out


def from_send_result(result: pb.SendResult) -> SendResult:
    error = None
    if result.HasField("error"):
        error = EntryError(status_code(result.error.code), result.error.message)
    return SendResult(
        id=result.id, message_id=result.message_id, duplicate=result.duplicate, error=error
    )


def from_received(message: pb.ReceivedMessage, server_time: datetime | None) -> Message:
    return Message(
        message_id=message.message_id,
        receipt=message.receipt,
        body=message.body,
        attributes=dict(message.attributes),
        channel=message.channel,
        enqueued_at=to_datetime(message.enqueued_at),
        expires_at=to_datetime(message.expires_at),
        visible_at=to_datetime(message.visible_at),
        delivery_count=message.delivery_count,
        last_error=message.last_error,
        server_time=server_time,
        group=message.group,
        sequence=message.sequence,
    )


def messages_of(response: pb.GetMessagesResponse) -> list[Message]:
    """The messages of one streamed GetMessages batch."""
    server_time = optional_datetime(response, "server_time")
    return [from_received(m, server_time) for m in response.messages]


def from_peeked(message: pb.PeekedMessage) -> PeekedMessage:
    try:
        state = MessageState(message.state)
    except ValueError:
        state = MessageState.UNSPECIFIED
    return PeekedMessage(
        message_id=message.message_id,
        body=message.body,
        attributes=dict(message.attributes),
        channel=message.channel,
        enqueued_at=to_datetime(message.enqueued_at),
        expires_at=to_datetime(message.expires_at),
        visible_at=to_datetime(message.visible_at),
        delivery_count=message.delivery_count,
        last_error=message.last_error,
        state=state,
        group=message.group,
        sequence=message.sequence,
    )


def receipt_of(value: str | Message) -> str:
    if isinstance(value, Message):
        return value.receipt
    if isinstance(value, str):
        return value
    raise TypeError(f"a receipt must be a str or a Message, not {type(value).__name__}")


ReceiptsLike = str | Message | Iterable[str | Message]


def receipts_of(receipts: ReceiptsLike) -> list[str]:
    # A single str is iterable too; taking it apart into characters is never what was meant.
    if isinstance(receipts, (str, Message)):
        return [receipt_of(receipts)]
    return [receipt_of(r) for r in receipts]


def to_visibility_entry(
    change: VisibilityChange | tuple[Any, ...],
) -> pb.ChangeVisibilityEntry:
    if not isinstance(change, VisibilityChange):
        change = VisibilityChange(*change)
    return pb.ChangeVisibilityEntry(
        receipt=receipt_of(change.receipt),
        visibility_timeout=to_duration(change.visibility_timeout),
        reason=change.reason or "",
    )


def from_visibility_result(result: pb.ChangeVisibilityResult) -> LeaseResult:
    return LeaseResult(
        receipt=result.receipt,
        status=lease_status(result.status),
        visible_at=optional_datetime(result, "visible_at"),
    )


# --- plans: one per client method ------------------------------------------------------------


def create_queue(name: str, options: Mapping[str, Any]) -> Plan[Queue]:
    request = pb.CreateQueueRequest(name=name, config=to_queue_config(options))
    # Creating with the same config again is a no-op that returns the queue: safe to retry.
    response = yield Call("CreateQueue", request, retry=True)
    return from_queue(response.queue)


def get_queue(name: str) -> Plan[Queue]:
    response = yield Call("GetQueue", pb.GetQueueRequest(name=name), retry=True)
    return from_queue(response.queue)


def list_queues(prefix: str, page_size: int) -> Plan[list[Queue]]:
    queues: list[Queue] = []
    token = ""
    while True:
        request = pb.ListQueuesRequest(prefix=prefix, page_size=page_size, page_token=token)
        response = yield Call("ListQueues", request, retry=True)
        queues.extend(from_queue(q) for q in response.queues)
        token = response.next_page_token
        if not token:
            return queues


def update_queue(name: str, options: Mapping[str, Any]) -> Plan[Queue]:
    # The mask lists exactly the given keys, so a key given as None returns to its default and
    # keys not given stay as they are.
    request = pb.UpdateQueueRequest(
        name=name, config=to_queue_config(options), update_mask=field_mask(options)
    )
    # Setting fields to given values is idempotent.
    response = yield Call("UpdateQueue", request, retry=True)
    return from_queue(response.queue)


def delete_queue(name: str) -> Plan[None]:
    # Not retried: if the first attempt deleted the queue, a retry would report NOT_FOUND.
    yield Call("DeleteQueue", pb.DeleteQueueRequest(name=name), retry=False)


def purge_queue(name: str) -> Plan[int]:
    # Not retried: a retry after a lost answer would report 0 purged instead of the real count.
    response = yield Call("PurgeQueue", pb.PurgeQueueRequest(name=name), retry=False)
    return int(response.purged_count)


def stats(name: str) -> Plan[QueueStats]:
    response = yield Call("GetQueueStats", pb.GetQueueStatsRequest(name=name), retry=True)
    return from_stats(response.stats)


def send_batch(queue: str, entries: Iterable[SendEntry | Body]) -> Plan[list[SendResult]]:
    wire = [to_send_entry(e, i) for i, e in enumerate(entries)]
    # A lost answer to a send without dedup ids cannot be told from a failed send: retrying
    # could enqueue twice. With a dedup_id on every entry the server drops the repeats.
    retry = bool(wire) and all(e.dedup_id for e in wire)
    response = yield Call(
        "SendMessages", pb.SendMessagesRequest(queue=queue, entries=wire), retry=retry
    )
    return [from_send_result(r) for r in response.results]


def send(queue: str, body: Body, options: Mapping[str, Any]) -> Plan[str]:
    entry = SendEntry(body, **options)
    results = yield from send_batch(queue, [entry])
    if len(results) != 1:
        raise error_for_status(
            grpc.StatusCode.INTERNAL, f"expected 1 send result, got {len(results)}"
        )
    error = results[0].error
    if error is not None:
        raise error_for_entry(error.code, error.message)
    return results[0].message_id


def receive_request(
    queue: str,
    max_messages: int,
    *,
    visibility_timeout: DurationLike | None = None,
    wait_time: DurationLike | None = None,
    channel: str | None = None,
    attempt_id: str | None = None,
    follow: bool = False,
    max_outstanding: int = 0,
) -> pb.GetMessagesRequest:
    request = pb.GetMessagesRequest(
        queue=queue,
        max_messages=max_messages,
        channel_filter=channel or "",
        follow=follow,
        max_outstanding=max_outstanding,
        receive_attempt_id=attempt_id or "",
    )
    # Unset (not zero) means the queue's default: only set what was given.
    if visibility_timeout is not None:
        request.visibility_timeout.CopyFrom(to_duration(visibility_timeout))
    if wait_time is not None:
        request.wait_time.CopyFrom(to_duration(wait_time))
    return request


def receive(
    queue: str,
    max_messages: int,
    *,
    visibility_timeout: DurationLike | None,
    wait_time: DurationLike | None,
    channel: str | None,
    attempt_id: str | None,
) -> Plan[list[Message]]:
    request = receive_request(
        queue,
        max_messages,
        visibility_timeout=visibility_timeout,
        wait_time=wait_time,
        channel=channel,
        attempt_id=attempt_id,
    )
    wait = MAX_WAIT_SECONDS if wait_time is None else seconds(wait_time)
    # Retried: the leases of a lost answer end after their visibility timeout and the messages
    # are delivered again (at-least-once, as after a consumer crash). With an attempt_id a retry
    # even returns the very same messages and receipts.
    responses = yield Call("GetMessages", request, retry=True, streaming=True, extra_timeout=wait)
    return [m for response in responses for m in messages_of(response)]


def peek(
    queue: str,
    max_messages: int,
    *,
    include_leased: bool,
    include_delayed: bool,
    channel: str | None,
) -> Plan[list[PeekedMessage]]:
    # The server may answer in pages smaller than asked; follow them up to max_messages.
    out: list[PeekedMessage] = []
    token = ""
    while True:
        request = pb.PeekMessagesRequest(
            queue=queue,
            max_messages=max_messages - len(out),
            channel_filter=channel or "",
            include_leased=include_leased,
            include_delayed=include_delayed,
            page_token=token,
        )
        response = yield Call("PeekMessages", request, retry=True)
        out.extend(from_peeked(m) for m in response.messages)
        token = response.next_page_token
        if not token or len(out) >= max_messages or not response.messages:
            return out


def change_visibility(
    queue: str, entries: Iterable[VisibilityChange | tuple[Any, ...]]
) -> Plan[list[LeaseResult]]:
    request = pb.ChangeVisibilityRequest(
        queue=queue, entries=[to_visibility_entry(e) for e in entries]
    )
    # Retried: the lease ends visibility_timeout after the call that lands, so a repeat only
    # moves the end by the time the retry took; a repeated release reports LEASE_EXPIRED.
    response = yield Call("ChangeVisibility", request, retry=True)
    return [from_visibility_result(r) for r in response.results]


def change_one(
    queue: str, receipt: str | Message, timeout: DurationLike, reason: str | None
) -> Plan[LeaseResult]:
    results = yield from change_visibility(
        queue, [VisibilityChange(receipt_of(receipt), timeout, reason or "")]
    )
    if len(results) != 1:
        raise error_for_status(
            grpc.StatusCode.INTERNAL, f"expected 1 visibility result, got {len(results)}"
        )
    return results[0]


def delete(queue: str, receipts: ReceiptsLike, attempt_ids: Iterable[str]) -> Plan[DeleteResults]:
    request = pb.DeleteMessagesRequest(
        queue=queue, receipts=receipts_of(receipts), receive_attempt_ids=list(attempt_ids)
    )
    # Retried: a repeated delete with the same receipt answers ALREADY_DELETED and deletes
    # nothing else.
    response = yield Call("DeleteMessages", request, retry=True)
    return DeleteResults(
        results=tuple(LeaseResult(r.receipt, lease_status(r.status)) for r in response.results),
        attempt_results={a.receive_attempt_id: a.deleted_count for a in response.attempt_results},
    )


def dead_letter(queue: str, receipts: ReceiptsLike, reason: str) -> Plan[list[LeaseResult]]:
    request = pb.DeadLetterMessagesRequest(
        queue=queue, receipts=receipts_of(receipts), reason=reason
    )
    # Retried: a repeat moves nothing more (a moved message's receipt answers MESSAGE_NOT_FOUND).
    response = yield Call("DeadLetterMessages", request, retry=True)
    return [LeaseResult(r.receipt, lease_status(r.status)) for r in response.results]


def update_message(
    queue: str,
    receipt: str | Message,
    *,
    body: Body | None,
    attributes: Mapping[str, str] | None,
    visibility_timeout: DurationLike | None,
) -> Plan[UpdateResult]:
    request = pb.UpdateMessageRequest(queue=queue, receipt=receipt_of(receipt))
    paths = []
    if body is not None:
        request.body = to_body(body)
        paths.append("body")
    if attributes is not None:
        request.attributes.update(to_attributes(attributes, "attributes"))
        paths.append("attributes")
    if visibility_timeout is not None:
        request.visibility_timeout.CopyFrom(to_duration(visibility_timeout))
        paths.append("visibility_timeout")
    if not paths:
        # An empty mask would mean "body and attributes" on the server: replace them by empty
        # values. Refuse instead of doing that by accident.
        raise ValueError("update_message needs body, attributes or visibility_timeout")
    request.update_mask.CopyFrom(field_mask(paths))
    # Not retried: the update supersedes the receipt, so a repeat fails with
    # RECEIPT_SUPERSEDED even though the first attempt succeeded.
    response = yield Call("UpdateMessage", request, retry=False)
    return UpdateResult(receipt=response.receipt, visible_at=to_datetime(response.visible_at))


def redrive(
    queue: str, *, destination: str | None, max_messages: int, channel: str | None
) -> Plan[int]:
    request = pb.RedriveMessagesRequest(
        queue=queue,
        destination=destination or "",
        max_messages=max_messages,
        channel_filter=channel or "",
    )
    # Not retried: with max_messages a repeat after a lost answer would move more messages.
    response = yield Call("RedriveMessages", request, retry=False)
    return int(response.moved_count)
