"""The OCI messages API (QueueClient) as calls of `core.QueueCore`.

OCI's message content is a string: it is sent as the UTF-8 body; a body that is not UTF-8 (sent
through gRPC) reaches an OCI consumer with U+FFFD in place of the bytes that are not. A message's
customProperties are leaseq's attributes and its channelId leaseq's channel.
"""

from __future__ import annotations

from ...domain import limits, rules
from ...domain.types import LeaseStatus, NewMessage, VisibilityChange
from ...errors import InvalidArgument
from . import ids, inputs
from .context import Answer, Request
from .errors import invalid, not_found

MAX_BATCH = 20  # messages per PutMessages, GetMessages, UpdateMessages and DeleteMessages (OCI)
MAX_VISIBILITY = 43_200  # 12 hours: OCI's longest visibility
MAX_TIMEOUT = 30  # seconds: OCI's longest long poll (leaseq's too)
MAX_CHANNEL = limits.MAX_CHANNEL  # OCI allows 256 characters; leaseq keeps 64


def _name(request: Request) -> str:
    return ids.queue_name(request.route.queue_id)


def _time(value: float | None) -> str | None:
    return None if value is None else ids.rfc3339(value)


async def put_messages(request: Request) -> Answer:
    name = _name(request)
    data = inputs.json_object(request.body)
    entries = inputs.entries(data, "messages", MAX_BATCH)
    new: list[NewMessage] = []
    for index, entry in enumerate(entries):
        where = f"messages[{index}]."
        content = inputs.required(
            inputs.text(entry, "content", limits.LARGEST_MESSAGE_BYTES, where), where + "content"
        )
        if not content:
            raise invalid(f"{where}content must not be empty.")
        metadata = entry.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise invalid(f"{where}metadata must be an object.")
        channel = inputs.text(metadata, "channelId", MAX_CHANNEL, where + "metadata.") or ""
        properties = inputs.string_map(
            metadata.get("customProperties"), where + "metadata.customProperties"
        )
        new.append(NewMessage(content.encode("utf-8", "surrogatepass"), dict(properties), channel))
    info = await request.core.get_queue(request.principal, name)
    # OCI's PutMessages is all or nothing: every entry is checked (the one rule, domain.rules)
    # before any is sent, and the first refused one fails the request.
    for index, message in enumerate(new):
        try:
            rules.check_message(message, index, info.config)
        except InvalidArgument as error:
            raise invalid(f"messages[{index}]: {error}") from None
    now = request.core.now()
    outcomes = await request.core.send(request.principal, name, new)
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, InvalidArgument):  # pragma: no cover - checked above
            raise invalid(f"messages[{index}]: {outcome}")
    expire = ids.rfc3339(now + info.config.message_retention)
    sent = [
        {"id": ids.message_number(o.message_id), "expireAfter": expire}
        for o in outcomes
        if not isinstance(o, InvalidArgument)
    ]
    return Answer(200, {"messages": sent}, counted=("sent", len(sent)))


async def get_messages(request: Request) -> Answer:
    name = _name(request)
    query = request.query
    limit = inputs.query_int(query, "limit", 1, MAX_BATCH) or 1
    visibility = inputs.query_int(query, "visibilityInSeconds", 0, MAX_VISIBILITY)
    timeout = inputs.query_int(query, "timeoutInSeconds", 0, MAX_TIMEOUT)
    channel_filter = query.get("channelFilter", "")
    if len(channel_filter) > MAX_CHANNEL + 1:
        raise invalid(f"channelFilter is longer than {MAX_CHANNEL} characters.")
    if "consumerGroupId" in query:
        raise invalid("leaseq has no consumer groups (consumerGroupId).")
    delivered = await request.core.receive(
        request.principal,
        name,
        limit,
        visibility_timeout=None if visibility is None else float(visibility),
        wait_time=None if timeout is None else float(timeout),
        channel_filter=channel_filter,
    )
    messages = []
    for m in delivered:
        number = ids.message_number(m.message_id)
        messages.append(
            {
                "id": number,
                "content": m.body.decode("utf-8", "replace"),
                "receipt": ids.receipt(m.receipt, number),
                "deliveryCount": m.delivery_count,
                "visibleAfter": ids.rfc3339(m.visible_at),
                "expireAfter": ids.rfc3339(m.expires_at),
                "createdAt": ids.rfc3339(m.enqueued_at),
                "metadata": {"channelId": m.channel, "customProperties": m.attributes},
            }
        )
    return Answer(200, {"messages": messages}, counted=("received", len(messages)))


_REFUSED = {
    LeaseStatus.LEASE_EXPIRED: (404, "the message's visibility ended: it may be delivered again"),
    LeaseStatus.RECEIPT_SUPERSEDED: (404, "the message was delivered again since this receipt"),
    LeaseStatus.MESSAGE_NOT_FOUND: (
        404,
        "the message is gone (deleted, expired, purged or dead-lettered)",
    ),
    LeaseStatus.INVALID_RECEIPT: (400, "the receipt is not one this queue issued"),
    LeaseStatus.ALREADY_DELETED: (404, "the message was deleted"),
}


async def _change(request: Request, changes: list[tuple[str, int, int]]) -> list[dict[str, object]]:
    """(leaseq receipt, OCI id, visibility) -> the UpdateMessages result entries."""
    results = await request.core.change_visibility(
        request.principal,
        _name(request),
        [VisibilityChange(receipt, float(visibility)) for receipt, _, visibility in changes],
    )
    entries: list[dict[str, object]] = []
    for (_, number, _), result in zip(changes, results):
        if result.status == LeaseStatus.OK:
            entries.append({"id": number, "visibleAfter": _time(result.visible_at)})
        else:
            code, reason = _REFUSED[result.status]
            entries.append(
                {"errorCode": code, "errorMessage": f"The receipt was refused: {reason}."}
            )
    return entries


def _visibility(data: dict[str, object], where: str = "") -> int:
    value = inputs.integer(data, "visibilityInSeconds", 0, MAX_VISIBILITY, where)
    return int(inputs.required(value, where + "visibilityInSeconds"))


async def update_message(request: Request) -> Answer:
    receipt, number = ids.split_receipt(request.route.receipt, "messageReceipt")
    visibility = _visibility(inputs.json_object(request.body))
    [entry] = await _change(request, [(receipt, number, visibility)])
    if "errorCode" in entry:
        raise (invalid if entry["errorCode"] == 400 else _gone)(str(entry["errorMessage"]))
    return Answer(200, entry)


def _gone(message: str) -> Exception:
    error = not_found("message")
    error.message = message
    return error


async def update_messages(request: Request) -> Answer:
    data = inputs.json_object(request.body)
    changes = []
    for index, entry in enumerate(inputs.entries(data, "entries", MAX_BATCH)):
        receipt, number = ids.split_receipt(entry.get("receipt"), f"entries[{index}].receipt")
        changes.append((receipt, number, _visibility(entry, f"entries[{index}].")))
    entries = await _change(request, changes)
    failures = sum(1 for e in entries if "errorCode" in e)
    return Answer(200, {"serverFailures": 0, "clientFailures": failures, "entries": entries})


async def _delete(request: Request, receipts: list[str]) -> list[dict[str, object]]:
    outcome = await request.core.delete(request.principal, _name(request), receipts)
    entries: list[dict[str, object]] = []
    for result in outcome.results:
        if result.status in (LeaseStatus.OK, LeaseStatus.ALREADY_DELETED):
            entries.append({})
        else:
            code, reason = _REFUSED[result.status]
            entries.append(
                {"errorCode": code, "errorMessage": f"The receipt was refused: {reason}."}
            )
    return entries


async def delete_message(request: Request) -> Answer:
    receipt, _ = ids.split_receipt(request.route.receipt, "messageReceipt")
    [entry] = await _delete(request, [receipt])
    if entry:
        raise (invalid if entry["errorCode"] == 400 else _gone)(str(entry["errorMessage"]))
    return Answer(200, counted=("deleted", 1))


async def delete_messages(request: Request) -> Answer:
    data = inputs.json_object(request.body)
    receipts = [
        ids.split_receipt(entry.get("receipt"), f"entries[{index}].receipt")[0]
        for index, entry in enumerate(inputs.entries(data, "entries", MAX_BATCH))
    ]
    entries = await _delete(request, receipts)
    failures = sum(1 for e in entries if e)
    return Answer(
        200,
        {"serverFailures": 0, "clientFailures": failures, "entries": entries},
        counted=("deleted", len(entries) - failures),
    )
