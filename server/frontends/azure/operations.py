"""Each Azure Queue operation as calls of `core.QueueCore`.

An operation takes the request (`Request`: route, query, headers, body, caller) and returns an
`Answer` (status, XML body, headers); errors are `AzureError`s, or domain errors that app.py maps
with `errors.from_domain`. README "Use it from Azure code" lists where this differs from Azure.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from ...auth import Principal
from ...core import QueueCore
from ...domain import limits
from ...domain.types import NewMessage, QueueConfig, QueueInfo
from ...errors import InvalidArgument, LeaseRejected, QueueNotFound
from . import metadata as meta
from . import parameters as params
from . import pop_receipts, xml_bodies
from .errors import (
    QUEUE_ALREADY_EXISTS,
    REQUEST_BODY_TOO_LARGE,
    AzureError,
    invalid_name,
    invalid_query,
    missing_query,
    name_length,
)
from .routing import Route
from .times import rfc1123

# Azure's queue names (Create Queue): 3-63 of a-z 0-9 -, alphanumeric at both ends, no "--".
_AZURE_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_AZURE_LENGTH = (3, 63)
_LEASEQ_NAME = re.compile(r"[A-Za-z0-9_-]+")
_LEASEQ_LENGTH = (1, limits.MAX_NAME)
AZURE_MAX_MESSAGE_BYTES = 64 * 1024  # Azure's limit of a message's text (UTF-8 bytes)

AZURE_QUEUE = QueueConfig(
    message_retention=limits.CONFIG_DURATIONS["message_retention"][1],
    max_message_bytes=AZURE_MAX_MESSAGE_BYTES,
)
"""A queue created through Azure: leaseq's defaults, except Azure's 64 KiB message size and the
longest retention leaseq allows (14 days: the largest messagettl other than -1); a message
without messagettl lives Azure's 7 days."""


@dataclass
class Request:
    route: Route
    query: dict[str, str]
    headers: Mapping[str, str]
    body: bytes
    principal: Principal | None
    core: QueueCore
    service_endpoint: str  # "http://host:port/<account>/", for List Queues
    receipts: pop_receipts.PopReceipts  # pop receipts of this store


@dataclass
class Answer:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    counted: tuple[str, int] | None = None  # (Metrics counter, messages) for the metrics


Operation = Callable[[Request], Awaitable[Answer]]


def queue_name(request: Request) -> str:
    """The URL's queue: any name leaseq allows (queues made through gRPC or SQS may use capitals
    and underscores), Azure's stricter rule only for Create Queue."""
    name = request.route.queue
    _check_name(name, _LEASEQ_NAME, _LEASEQ_LENGTH)
    return name


def _check_name(name: str, pattern: re.Pattern[str], length: tuple[int, int]) -> None:
    """Azure's order: the length first (OutOfRangeInput), then the characters."""
    if not length[0] <= len(name) <= length[1]:
        raise name_length()
    if not pattern.fullmatch(name):
        raise invalid_name()


def _message_text(body: bytes, config: QueueConfig) -> bytes:
    data = xml_bodies.parse_message_text(body).encode("utf-8")
    if len(data) > config.max_message_bytes:
        raise AzureError(
            REQUEST_BODY_TOO_LARGE,
            "The request body is too large and exceeds the maximum permissible limit.",
            {"MaxLimit": str(config.max_message_bytes)},
        )
    return data


# --- queues -------------------------------------------------------------------------------------


async def create_queue(request: Request) -> Answer:
    name = request.route.queue
    _check_name(name, _AZURE_NAME, _AZURE_LENGTH)
    metadata = meta.from_headers(request.headers)
    core = request.core
    try:
        info: QueueInfo | None = await core.get_queue(request.principal, name)
    except QueueNotFound:
        info = None
    if info is None:
        await core.create_queue(request.principal, name, AZURE_QUEUE)
        if metadata:
            await core.set_queue_metadata(request.principal, name, metadata)
        return Answer(201)
    # Azure: an existing queue with the same metadata is 204 (the SDK raises ResourceExistsError
    # for it), with other metadata 409 QueueAlreadyExists.
    existing = await core.queue_metadata(request.principal, [name])
    if existing.get(name, {}) != metadata:
        raise AzureError(QUEUE_ALREADY_EXISTS, "The specified queue already exists.")
    return Answer(204)


async def delete_queue(request: Request) -> Answer:
    name = queue_name(request)
    await request.core.delete_queue(request.principal, name)
    return Answer(204)


async def get_queue_metadata(request: Request) -> Answer:
    name = queue_name(request)
    stats = await request.core.stats(request.principal, name)  # QueueNotFound when missing
    stored = await request.core.queue_metadata(request.principal, [name])
    headers = meta.to_headers(stored.get(name, {}))
    # Azure's count includes invisible messages: leaseq's total (visible, leased and delayed).
    headers["x-ms-approximate-messages-count"] = str(stats.total)
    return Answer(200, headers=headers)


async def set_queue_metadata(request: Request) -> Answer:
    name = queue_name(request)
    metadata = meta.from_headers(request.headers)
    # A missing queue is QueueNotFound for whoever may see it, before the admin check.
    await request.core.get_queue(request.principal, name)
    await request.core.set_queue_metadata(request.principal, name, metadata)
    return Answer(204)


async def list_queues(request: Request) -> Answer:
    query = request.query
    prefix = query.get("prefix")
    marker = query.get("marker")
    limit = params.integer(query, "maxresults", 1, params.MAX_LIST_RESULTS)
    include = query.get("include", "")
    if include not in ("", "metadata"):
        raise invalid_query("include", include[:100], "The only value is 'metadata'.")
    after = None
    if marker:
        try:
            after = request.core.tokens.decode_list(marker, prefix or "")
        except InvalidArgument:
            raise invalid_query(
                "marker", marker[:100], "Not a marker this server issued for this prefix."
            ) from None
    if prefix and (len(prefix) > limits.MAX_NAME or not _LEASEQ_NAME.fullmatch(prefix)):
        queues, more = [], False  # no queue name starts so
    else:
        page = await request.core.list_queues(
            request.principal, prefix or "", after, limit or params.MAX_LIST_RESULTS
        )
        queues, more = page.queues, page.more
    names = [q.name for q in queues] if include else []
    stored = await request.core.queue_metadata(request.principal, names) if names else {}
    listed = [(q.name, stored.get(q.name, {}) if include else None) for q in queues]
    next_marker = request.core.tokens.encode_list(prefix or "", queues[-1].name) if more else ""
    body = xml_bodies.queue_list(
        request.service_endpoint,
        listed,
        prefix=prefix,
        marker=marker,
        max_results=limit,
        next_marker=next_marker,
    )
    return Answer(200, body, {"Content-Type": "application/xml"})


# --- messages -----------------------------------------------------------------------------------


async def put_message(request: Request) -> Answer:
    name = queue_name(request)
    info = await request.core.get_queue(request.principal, name)
    config = info.config
    # Azure's order: visibilitytimeout's range, then messagettl, then the two together.
    delay = params.integer(request.query, "visibilitytimeout", 0, params.AZURE_MAX_VISIBILITY)
    ttl = params.message_ttl(request.query, config.message_retention)
    if delay is not None and "messagettl" in request.query and delay >= ttl:
        raise invalid_query(
            "visibilitytimeout", str(delay), "messagettl must be greater than visibilitytimeout."
        )
    body = _message_text(request.body, config)
    now = request.core.now()
    (outcome,) = await request.core.send(
        request.principal,
        name,
        [NewMessage(body, delay=float(delay) if delay is not None else None, ttl=ttl)],
    )
    if isinstance(outcome, InvalidArgument):
        raise outcome
    visible = now + (delay if delay is not None else config.default_delay)
    # The send receipt (a ttl always takes the stores' per-message way, which gives the key):
    # Update and Delete Message accept it at once, as Azure does.
    pop_receipt = (
        request.receipts.for_sent(outcome.message_id)
        if outcome.key is None
        else request.receipts.encode(
            await request.core.send_receipt(name, outcome.key), outcome.message_id
        )
    )
    answer = xml_bodies.sent_message(outcome.message_id, now, now + ttl, pop_receipt, visible)
    return Answer(201, answer, {"Content-Type": "application/xml"}, ("sent", 1))


async def get_messages(request: Request) -> Answer:
    name = queue_name(request)
    count = params.integer(request.query, "numofmessages", 1, params.MAX_MESSAGES, 1)
    visibility = params.integer(
        request.query, "visibilitytimeout", 1, params.MAX_VISIBILITY, params.DEFAULT_VISIBILITY
    )
    assert count is not None and visibility is not None
    # Azure's Get Messages never waits: a long poll of zero.
    messages = await request.core.receive(
        request.principal, name, count, visibility_timeout=float(visibility), wait_time=0.0
    )
    body = xml_bodies.received_messages(
        (m, request.receipts.encode(m.receipt, m.message_id)) for m in messages
    )
    return Answer(200, body, {"Content-Type": "application/xml"}, ("received", len(messages)))


async def peek_messages(request: Request) -> Answer:
    name = queue_name(request)
    count = params.integer(request.query, "numofmessages", 1, params.MAX_MESSAGES, 1)
    assert count is not None
    page = await request.core.peek(request.principal, name, count)
    return Answer(
        200, xml_bodies.peeked_messages(page.messages), {"Content-Type": "application/xml"}
    )


async def clear_messages(request: Request) -> Answer:
    await request.core.purge_queue(request.principal, queue_name(request))
    return Answer(204)


async def delete_message(request: Request) -> Answer:
    name = queue_name(request)
    receipt = request.receipts.decode(request.query.get("popreceipt"), request.route.message_id)
    outcome = await request.core.delete(request.principal, name, [receipt])
    error = pop_receipts.rejected(outcome.results[0].status)
    if error is not None:
        raise error
    return Answer(204, counted=("deleted", 1))


async def update_message(request: Request) -> Answer:
    name = queue_name(request)
    # Azure checks the query's values before the pop receipt names a message.
    if "visibilitytimeout" not in request.query:
        raise missing_query("visibilitytimeout")
    visibility = params.integer(request.query, "visibilitytimeout", 0, params.MAX_VISIBILITY)
    receipt = request.receipts.decode(request.query.get("popreceipt"), request.route.message_id)
    body = None
    if request.body:
        info = await request.core.get_queue(request.principal, name)
        body = _message_text(request.body, info.config)
    try:
        updated = await request.core.update_message(
            request.principal, name, receipt, body=body, visibility_timeout=float(visibility or 0)
        )
    except LeaseRejected as rejected:
        error = pop_receipts.rejected(rejected.status, updating=True)
        if error is None:  # pragma: no cover - the store raises only for a refused receipt
            raise
        raise error from None
    return Answer(
        204,
        headers={
            "x-ms-popreceipt": request.receipts.encode(updated.receipt, request.route.message_id),
            "x-ms-time-next-visible": rfc1123(updated.visible_at),
        },
    )


OPERATIONS: dict[str, Operation] = {
    "ListQueues": list_queues,
    "CreateQueue": create_queue,
    "DeleteQueue": delete_queue,
    "GetQueueMetadata": get_queue_metadata,
    "SetQueueMetadata": set_queue_metadata,
    "PutMessage": put_message,
    "GetMessages": get_messages,
    "PeekMessages": peek_messages,
    "ClearMessages": clear_messages,
    "DeleteMessage": delete_message,
    "UpdateMessage": update_message,
}
