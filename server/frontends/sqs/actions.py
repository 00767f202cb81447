"""Each SQS action as calls of `core.QueueCore`.

An action takes the request's parameters in the JSON protocol's shape (protocol_query converts
form parameters to it) and returns the result in that shape; errors are `SqsError`s, or domain
errors that app.py maps with `errors.from_domain`.

Choices where SQS and leaseq differ (README "Use it from SQS code" lists them all):
- DeleteMessage of a message already gone (deleted, expired, purged, moved to the dead letter
  queue) succeeds, as in SQS. A receipt of an older delivery (the message was received again
  since) does NOT delete: SQS may delete then, leaseq's fencing refuses (ReceiptHandleIsInvalid,
  "superseded"), so a slow consumer never deletes the message another consumer now holds.
- ChangeMessageVisibility on a message whose lease ended: MessageNotInflight (SQS's code for it).
- ReceiveRequestAttemptId is ignored, as SQS does on standard queues.
- StartMessageMoveTask runs the whole move at once (MaxNumberOfMessagesPerSecond is checked and
  ignored); the task is COMPLETED when the call returns; ListMessageMoveTasks reports the tasks
  this server ran since it started.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ...auth import Principal
from ...core import QueueCore
from ...domain.types import LeaseStatus, NewMessage, VisibilityChange
from ...errors import InvalidArgument, QueueAlreadyExists
from . import md5
from . import message_attributes as mattrs
from . import queue_attributes as qattrs
from .errors import (
    BATCH_ENTRY_IDS_NOT_DISTINCT,
    BATCH_REQUEST_TOO_LONG,
    EMPTY_BATCH,
    INVALID_BATCH_ENTRY_ID,
    INVALID_MESSAGE_CONTENTS,
    INVALID_PARAMETER_VALUE,
    MESSAGE_NOT_INFLIGHT,
    QUEUE_NAME_EXISTS,
    RECEIPT_HANDLE_IS_INVALID,
    RESOURCE_NOT_FOUND,
    TOO_MANY_ENTRIES,
    UNSUPPORTED_OPERATION,
    SqsError,
    invalid_value,
    missing,
)

MAX_BATCH = 10  # entries of an SQS batch request
MAX_BATCH_BYTES = 1_048_576  # sum of a SendMessageBatch's messages (SQS's limit)
MAX_RECEIVE = 10
MAX_WAIT_SECONDS = 20
MAX_VISIBILITY_SECONDS = 43_200
MAX_DELAY_SECONDS = 900
MAX_LIST_RESULTS = 1000
SYSTEM_ATTRIBUTES = (
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
)
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


@dataclass
class Context:
    """What an action knows of its request besides the parameters."""

    core: QueueCore
    principal: Principal | None
    base_url: str  # scheme://host[:port] as the client addressed us
    region: str
    move_tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The answer is XML 1.0 (the query protocol): message text is made xml_safe before its
    # MD5s are taken, so that SDKs find the checksums of the text they receive.
    xml_answer: bool = False


Action = Callable[[Context, dict[str, Any]], Awaitable[dict[str, Any]]]

# --- parameters ---------------------------------------------------------------------------------


def _string(params: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        if required:
            raise missing(name)
        return None
    if not isinstance(value, str):
        raise invalid_value(name, value, "must be a string.")
    return value


def _integer(
    params: dict[str, Any], name: str, low: int, high: int, *, required: bool = False
) -> int | None:
    """An integer parameter: a JSON number, or digits (the query protocol sends text)."""
    value = params.get(name)
    if value is None or value == "":
        if required:
            raise missing(name)
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise invalid_value(name, value, f"Must be an integer between {low} and {high}.")
    if isinstance(value, str):
        if not re.fullmatch(r"[+-]?\d{1,19}", value.strip()):
            raise invalid_value(name, value, f"Must be an integer between {low} and {high}.")
        value = int(value)
    if not low <= value <= high:
        raise invalid_value(name, value, f"Must be between {low} and {high}, if provided.")
    return value


def _names(params: dict[str, Any], name: str) -> list[str]:
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid_value(name, "(not a list of strings)", "a list of names.")
    return value


def _queue(params: dict[str, Any]) -> str:
    return qattrs.name_from_url(_string(params, "QueueUrl"))


def _entries(params: dict[str, Any]) -> list[dict[str, Any]]:
    """A batch's Entries: 1..10 structures with distinct valid Ids."""
    entries = params.get("Entries")
    if entries is None or entries == []:
        raise SqsError(EMPTY_BATCH, "There should be at least one entry in the request.")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid_value("Entries", "(not a list)", "a list of entries.")
    if len(entries) > MAX_BATCH:
        raise SqsError(
            TOO_MANY_ENTRIES,
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}.",
        )
    seen: set[str] = set()
    for entry in entries:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not _ENTRY_ID.fullmatch(entry_id):
            raise SqsError(
                INVALID_BATCH_ENTRY_ID,
                "A batch entry id can only contain alphanumeric characters, hyphens and "
                "underscores. It can be at most 80 letters long.",
            )
        if entry_id in seen:
            raise SqsError(BATCH_ENTRY_IDS_NOT_DISTINCT, f"Id {entry_id} repeated.")
        seen.add(entry_id)
    return entries


def _failure(entry_id: str, error: SqsError) -> dict[str, Any]:
    return {
        "Id": entry_id,
        "SenderFault": error.kind.sender,
        "Code": error.kind.code,
        "Message": error.message,
    }


def _page_token(ctx: Context, prefix: str, token: str | None) -> str | None:
    if token is None:
        return None
    try:
        return ctx.core.tokens.decode_list(token, prefix)
    except InvalidArgument:
        raise invalid_value("NextToken", token, "Invalid or expired next token.") from None


# --- queues -------------------------------------------------------------------------------------


async def create_queue(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _string(params, "QueueName")
    assert name is not None
    raw_attributes = params.get("Attributes") or {}
    if isinstance(raw_attributes, dict) and "FifoQueue" in raw_attributes:
        qattrs.parse({"FifoQueue": raw_attributes["FifoQueue"]})  # raises InvalidAttributeName
    if not _QUEUE_NAME.fullmatch(name):
        reason = (
            "leaseq has no FIFO queues (.fifo)."
            if name.endswith(".fifo")
            else "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 "
            "in length."
        )
        raise invalid_value("QueueName", name, reason)
    changes = qattrs.parse(raw_attributes)
    config = replace(qattrs.SQS_DEFAULTS, **changes)
    try:
        await ctx.core.create_queue(ctx.principal, name, config)
    except QueueAlreadyExists:
        # SQS compares only the attributes the caller gave.
        info = await ctx.core.get_queue(ctx.principal, name)
        if qattrs.differs(info.config, changes):
            raise SqsError(
                QUEUE_NAME_EXISTS,
                "A queue already exists with the same name and a different value for an attribute.",
            ) from None
    return {"QueueUrl": qattrs.queue_url(ctx.base_url, name)}


async def get_queue_url(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _string(params, "QueueName")
    assert name is not None
    if not _QUEUE_NAME.fullmatch(name):
        raise qattrs.no_queue()
    await ctx.core.get_queue(ctx.principal, name)
    return {"QueueUrl": qattrs.queue_url(ctx.base_url, name)}


async def list_queues(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    prefix = _string(params, "QueueNamePrefix", required=False) or ""
    if prefix and not _QUEUE_NAME.fullmatch(prefix):
        return {}  # no queue name starts so
    limit = _integer(params, "MaxResults", 1, MAX_LIST_RESULTS)
    token = _string(params, "NextToken", required=False)
    if token is not None and limit is None:
        raise invalid_value("NextToken", token, "NextToken needs MaxResults.")
    after = _page_token(ctx, prefix, token)
    page = await ctx.core.list_queues(ctx.principal, prefix, after, limit or MAX_LIST_RESULTS)
    result: dict[str, Any] = {}
    if page.queues:
        result["QueueUrls"] = [qattrs.queue_url(ctx.base_url, q.name) for q in page.queues]
    if page.more and limit is not None:
        result["NextToken"] = ctx.core.tokens.encode_list(prefix, page.queues[-1].name)
    return result


async def delete_queue(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    await ctx.core.delete_queue(ctx.principal, _queue(params))
    return {}


async def purge_queue(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    await ctx.core.purge_queue(ctx.principal, _queue(params))
    return {}


async def get_queue_attributes(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _queue(params)
    names = qattrs.requested(params.get("AttributeNames"))
    info = await ctx.core.get_queue(ctx.principal, name)
    stats = await ctx.core.stats(ctx.principal, name) if qattrs.needs_stats(names) else None
    values = qattrs.render(names, info, stats, ctx.region)
    return {"Attributes": values} if values else {}


async def set_queue_attributes(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _queue(params)
    if "Attributes" not in params:
        raise missing("Attributes")
    changes = qattrs.parse(params.get("Attributes"))
    await ctx.core.update_queue(ctx.principal, name, changes)
    return {}


async def list_dead_letter_source_queues(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _queue(params)
    limit = _integer(params, "MaxResults", 1, MAX_LIST_RESULTS)
    token = _string(params, "NextToken", required=False)
    after = _page_token(ctx, "", token)
    sources = sorted(await ctx.core.dead_letter_sources(ctx.principal, name))
    if after is not None:
        sources = [s for s in sources if s > after]
    page = sources[: limit or MAX_LIST_RESULTS]
    result: dict[str, Any] = {"queueUrls": [qattrs.queue_url(ctx.base_url, s) for s in page]}
    if limit is not None and len(sources) > limit:
        result["NextToken"] = ctx.core.tokens.encode_list("", page[-1])
    return result


async def start_message_move_task(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    source_arn = _string(params, "SourceArn")
    source = qattrs.name_from_arn(source_arn, "SourceArn")
    destination_arn = _string(params, "DestinationArn", required=False)
    destination = (
        qattrs.name_from_arn(destination_arn, "DestinationArn") if destination_arn else None
    )
    _integer(params, "MaxNumberOfMessagesPerSecond", 1, 500)
    started = ctx.core.now()
    if destination is None and not await ctx.core.dead_letter_sources(ctx.principal, source):
        raise invalid_value(
            "SourceArn", source_arn, "Source queue must be configured as a Dead Letter Queue."
        )
    moved = await ctx.core.redrive(ctx.principal, source, destination)
    handle = base64.urlsafe_b64encode(
        json.dumps({"s": source, "t": secrets.token_hex(8)}).encode()
    ).decode()
    task = {
        "TaskHandle": handle,
        "Status": "COMPLETED",
        "SourceArn": source_arn,
        "ApproximateNumberOfMessagesMoved": moved,
        "ApproximateNumberOfMessagesToMove": moved,
        "StartedTimestamp": int(started * 1000),
    }
    if destination_arn:
        task["DestinationArn"] = destination_arn
    ctx.move_tasks[source] = task
    return {"TaskHandle": handle}


async def list_message_move_tasks(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    source_arn = _string(params, "SourceArn")
    source = qattrs.name_from_arn(source_arn, "SourceArn")
    _integer(params, "MaxResults", 1, 10)
    await ctx.core.get_queue(ctx.principal, source)
    task = ctx.move_tasks.get(source)
    return {"Results": [task] if task else []}


async def cancel_message_move_task(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    _string(params, "TaskHandle")
    raise SqsError(RESOURCE_NOT_FOUND, "The task is not running: leaseq completes a move at once.")


# --- messages -----------------------------------------------------------------------------------


def _new_message(entry: dict[str, Any]) -> tuple[NewMessage, str, dict[str, mattrs.AttributeValue]]:
    """The message to send of a SendMessage request or batch entry, its body and attributes."""
    for fifo_only in ("MessageGroupId", "MessageDeduplicationId"):
        if entry.get(fifo_only):
            raise invalid_value(
                fifo_only,
                entry[fifo_only],
                "The request include parameter that is not valid for this queue type "
                "(leaseq has no FIFO queues).",
            )
    body = _string(entry, "MessageBody")
    assert body is not None
    if mattrs.has_invalid_characters(body):
        raise SqsError(
            INVALID_MESSAGE_CONTENTS,
            "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to "
            "#xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )
    delay = _integer(entry, "DelaySeconds", 0, MAX_DELAY_SECONDS)
    attributes = mattrs.parse(entry.get("MessageAttributes"))
    message = NewMessage(
        body.encode("utf-8"),
        mattrs.to_leaseq(attributes),
        delay=float(delay) if delay is not None else None,
    )
    return message, body, attributes


def _sent(
    body: str, attributes: dict[str, mattrs.AttributeValue], message_id: str
) -> dict[str, Any]:
    result: dict[str, Any] = {"MessageId": message_id, "MD5OfMessageBody": md5.of_body(body)}
    digest = md5.of_attributes(attributes)
    if digest is not None:
        result["MD5OfMessageAttributes"] = digest
    return result


def _too_big(error: InvalidArgument) -> SqsError:
    return SqsError(
        INVALID_PARAMETER_VALUE,
        f"One or more parameters are invalid. Reason: {error.description}.",
    )


async def send_message(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _queue(params)
    message, body, attributes = _new_message(params)
    (outcome,) = await ctx.core.send(ctx.principal, name, [message], mattrs.RESERVED_PREFIX)
    if isinstance(outcome, InvalidArgument):
        raise _too_big(outcome)
    return _sent(body, attributes, outcome.message_id)


async def send_message_batch(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _queue(params)
    entries = _entries(params)
    prepared: list[tuple[str, Any]] = []
    total = 0
    for entry in entries:
        try:
            message, body, attributes = _new_message(entry)
            total += len(message.body) + sum(
                len(k.encode()) + len(v.encode()) for k, v in message.attributes.items()
            )
            prepared.append((entry["Id"], (message, body, attributes)))
        except SqsError as error:
            prepared.append((entry["Id"], error))
    if total > MAX_BATCH_BYTES:
        raise SqsError(
            BATCH_REQUEST_TOO_LONG,
            f"Batch requests cannot be longer than {MAX_BATCH_BYTES} bytes. You have sent {total} bytes.",
        )
    to_send = [item[0] for _, item in prepared if not isinstance(item, SqsError)]
    outcomes = iter(
        await ctx.core.send(ctx.principal, name, to_send, mattrs.RESERVED_PREFIX) if to_send else []
    )
    successful, failed = [], []
    for entry_id, item in prepared:
        if isinstance(item, SqsError):
            failed.append(_failure(entry_id, item))
            continue
        outcome = next(outcomes)
        if isinstance(outcome, InvalidArgument):
            failed.append(_failure(entry_id, _too_big(outcome)))
            continue
        _, body, attributes = item
        successful.append({"Id": entry_id, **_sent(body, attributes, outcome.message_id)})
    return {"Successful": successful, "Failed": failed}


async def receive_message(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _queue(params)
    count = _integer(params, "MaxNumberOfMessages", 1, MAX_RECEIVE) or 1
    visibility = _integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY_SECONDS)
    wait = _integer(params, "WaitTimeSeconds", 0, MAX_WAIT_SECONDS)
    system = set(_names(params, "AttributeNames")) | set(
        _names(params, "MessageSystemAttributeNames")
    )
    wanted_system = (
        SYSTEM_ATTRIBUTES if "All" in system else [a for a in SYSTEM_ATTRIBUTES if a in system]
    )
    wanted_user = _names(params, "MessageAttributeNames")
    messages = await ctx.core.receive(
        ctx.principal,
        name,
        count,
        visibility_timeout=float(visibility) if visibility is not None else None,
        wait_time=float(wait) if wait is not None else None,
    )
    if not messages:
        return {}
    now_ms = int(ctx.core.now() * 1000)
    out = []
    for message in messages:
        body = message.body.decode("utf-8", "replace")
        if ctx.xml_answer:
            body = mattrs.xml_safe(body)
        entry: dict[str, Any] = {
            "MessageId": message.message_id,
            "ReceiptHandle": message.receipt,
            "MD5OfBody": md5.of_body(body),
            "Body": body,
        }
        if wanted_system:
            values = {
                "SenderId": qattrs.ACCOUNT,
                "SentTimestamp": str(int(message.enqueued_at * 1000)),
                "ApproximateReceiveCount": str(message.delivery_count),
                # leaseq keeps no first-receive time: exact on the first delivery, the
                # enqueue time after that (README's differences).
                "ApproximateFirstReceiveTimestamp": str(
                    now_ms if message.delivery_count <= 1 else int(message.enqueued_at * 1000)
                ),
            }
            entry["Attributes"] = {k: values[k] for k in wanted_system}
        chosen = mattrs.select(mattrs.from_leaseq(message.attributes), wanted_user)
        if chosen and ctx.xml_answer:
            chosen = mattrs.xml_safe_attributes(chosen)
        if chosen:
            entry["MessageAttributes"] = {k: v.to_wire() for k, v in chosen.items()}
            entry["MD5OfMessageAttributes"] = md5.of_attributes(chosen)
        out.append(entry)
    return {"Messages": out}


def _delete_error(status: LeaseStatus) -> SqsError | None:
    """None: the delete counts as done (SQS answers success for a message already gone)."""
    if status in (LeaseStatus.OK, LeaseStatus.ALREADY_DELETED, LeaseStatus.MESSAGE_NOT_FOUND):
        return None
    if status == LeaseStatus.RECEIPT_SUPERSEDED:
        return SqsError(
            RECEIPT_HANDLE_IS_INVALID,
            "The receipt handle has been superseded: the message was received again since, "
            "and leaseq lets only the latest receipt delete it.",
        )
    return SqsError(RECEIPT_HANDLE_IS_INVALID, "The input receipt handle is invalid.")


def _visibility_error(status: LeaseStatus, receipt: str) -> SqsError | None:
    if status == LeaseStatus.OK:
        return None
    if status == LeaseStatus.LEASE_EXPIRED:
        return SqsError(MESSAGE_NOT_INFLIGHT, "Message does not exist or is not in flight.")
    if status == LeaseStatus.INVALID_RECEIPT:
        return SqsError(RECEIPT_HANDLE_IS_INVALID, "The input receipt handle is invalid.")
    reason = (
        "The receipt handle has expired."
        if status == LeaseStatus.RECEIPT_SUPERSEDED
        else "Message does not exist or is not available for visibility timeout change."
    )
    return SqsError(
        INVALID_PARAMETER_VALUE,
        f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: {reason}",
    )


async def delete_message(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _queue(params)
    receipt = _string(params, "ReceiptHandle")
    assert receipt is not None
    outcome = await ctx.core.delete(ctx.principal, name, [receipt])
    error = _delete_error(outcome.results[0].status)
    if error is not None:
        raise error
    return {}


async def delete_message_batch(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _queue(params)
    entries = _entries(params)
    receipts, ids, failed = [], [], []
    for entry in entries:
        receipt = entry.get("ReceiptHandle")
        if not isinstance(receipt, str) or not receipt:
            failed.append(_failure(entry["Id"], missing("ReceiptHandle")))
            continue
        receipts.append(receipt)
        ids.append(entry["Id"])
    successful = []
    if receipts:
        outcome = await ctx.core.delete(ctx.principal, name, receipts)
        for entry_id, result in zip(ids, outcome.results):
            error = _delete_error(result.status)
            if error is None:
                successful.append({"Id": entry_id})
            else:
                failed.append(_failure(entry_id, error))
    return {"Successful": successful, "Failed": failed}


async def change_message_visibility(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _queue(params)
    receipt = _string(params, "ReceiptHandle")
    assert receipt is not None
    timeout = _integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY_SECONDS, required=True)
    (result,) = await ctx.core.change_visibility(
        ctx.principal, name, [VisibilityChange(receipt, float(timeout or 0))]
    )
    error = _visibility_error(result.status, receipt)
    if error is not None:
        raise error
    return {}


async def change_message_visibility_batch(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = _queue(params)
    entries = _entries(params)
    changes, ids, failed = [], [], []
    for entry in entries:
        try:
            receipt = _string(entry, "ReceiptHandle")
            timeout = _integer(entry, "VisibilityTimeout", 0, MAX_VISIBILITY_SECONDS, required=True)
        except SqsError as error:
            failed.append(_failure(entry["Id"], error))
            continue
        assert receipt is not None
        changes.append(VisibilityChange(receipt, float(timeout or 0)))
        ids.append(entry["Id"])
    successful = []
    if changes:
        results = await ctx.core.change_visibility(ctx.principal, name, changes)
        for entry_id, change, result in zip(ids, changes, results):
            problem = _visibility_error(result.status, change.receipt)
            if problem is None:
                successful.append({"Id": entry_id})
            else:
                failed.append(_failure(entry_id, problem))
    return {"Successful": successful, "Failed": failed}


async def _unsupported(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    raise SqsError(
        UNSUPPORTED_OPERATION, "leaseq does not support this action (README: differences)."
    )


ACTIONS: dict[str, Action] = {
    "CreateQueue": create_queue,
    "GetQueueUrl": get_queue_url,
    "ListQueues": list_queues,
    "DeleteQueue": delete_queue,
    "PurgeQueue": purge_queue,
    "GetQueueAttributes": get_queue_attributes,
    "SetQueueAttributes": set_queue_attributes,
    "ListDeadLetterSourceQueues": list_dead_letter_source_queues,
    "StartMessageMoveTask": start_message_move_task,
    "ListMessageMoveTasks": list_message_move_tasks,
    "CancelMessageMoveTask": cancel_message_move_task,
    "SendMessage": send_message,
    "SendMessageBatch": send_message_batch,
    "ReceiveMessage": receive_message,
    "DeleteMessage": delete_message,
    "DeleteMessageBatch": delete_message_batch,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
    # Real SQS actions leaseq has no counterpart for: UnsupportedOperation, not InvalidAction.
    "AddPermission": _unsupported,
    "RemovePermission": _unsupported,
    "TagQueue": _unsupported,
    "UntagQueue": _unsupported,
    "ListQueueTags": _unsupported,
}
