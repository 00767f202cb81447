"""The SQS actions on messages: send, receive, delete, change visibility (and their batches), as
calls of `core.QueueCore`.

Choices where SQS and leaseq differ (docs/sqs.md "Differences" lists them all):
- DeleteMessage with the receipt of an older delivery (the message was received again since)
  answers success, as SQS documents ("the request succeeds, but the message will not be
  deleted"): leaseq's fencing keeps the message for the consumer that holds it now. Deleting a
  message already gone (deleted, expired, purged, dead-lettered) succeeds too.
- ChangeMessageVisibility on a message whose lease ended: MessageNotInflight (SQS's code for it);
  with an older receipt, InvalidParameterValue ("The receipt handle has expired").
- FIFO queues and MessageGroupId: fifo.py.
- Message ids are leaseq's 128-bit ids written in the UUID form SQS uses.
"""

from __future__ import annotations

from typing import Any

from ...domain.types import (
    DeliveredMessage,
    LeaseStatus,
    NewMessage,
    SendOutcome,
    VisibilityChange,
)
from ...errors import InvalidArgument
from . import fifo, md5
from . import message_attributes as mattrs
from .errors import (
    BATCH_REQUEST_TOO_LONG,
    INVALID_MESSAGE_CONTENTS,
    INVALID_PARAMETER_VALUE,
    MESSAGE_NOT_INFLIGHT,
    RECEIPT_HANDLE_IS_INVALID,
    SqsError,
    invalid_value,
    missing,
)
from .params import Context, entries, failure, integer, names, queue, required_string

MAX_BATCH_BYTES = 1_048_576  # sum of a SendMessageBatch's messages (SQS's limit)
MAX_RECEIVE = 10
MAX_WAIT_SECONDS = 20
MAX_VISIBILITY_SECONDS = 43_200
MAX_DELAY_SECONDS = 900
TRACE_HEADER = "AWSTraceHeader"
TRACE_KEY = mattrs.RESERVED_PREFIX + "trace"  # where a message's AWSTraceHeader is kept
DEDUP_KEY = mattrs.RESERVED_PREFIX + "dedup"  # and a FIFO message's MessageDeduplicationId
MAX_TRACE_HEADER = 2048
SYSTEM_ATTRIBUTES = (
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    TRACE_HEADER,
)
GROUP_ATTRIBUTES = ("MessageGroupId", "MessageDeduplicationId", "SequenceNumber")


def sqs_message_id(message_id: str) -> str:
    """leaseq's 32 hex digits as SQS writes a message id (8-4-4-4-12); other ids as they are."""
    if len(message_id) != 32:
        return message_id
    m = message_id
    return f"{m[:8]}-{m[8:12]}-{m[12:16]}-{m[16:20]}-{m[20:]}"


# --- sends --------------------------------------------------------------------------------------


def _trace_header(entry: dict[str, Any]) -> str | None:
    """MessageSystemAttributes: AWSTraceHeader (a String) is the only one SQS takes."""
    raw = entry.get("MessageSystemAttributes")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise invalid_value("MessageSystemAttributes", "(not a map)", "a map of name to value.")
    for name in raw:
        if name != TRACE_HEADER:
            raise invalid_value(
                "MessageSystemAttributes",
                name,
                f"{TRACE_HEADER} is the only supported message system attribute.",
            )
    value = raw[TRACE_HEADER]
    if (
        not isinstance(value, dict)
        or value.get("DataType") != "String"
        or not isinstance(value.get("StringValue"), str)
        or not value["StringValue"]
        or len(value["StringValue"]) > MAX_TRACE_HEADER
    ):
        raise invalid_value(
            "MessageSystemAttributes",
            TRACE_HEADER,
            f"{TRACE_HEADER} is a String of 1 to {MAX_TRACE_HEADER} characters.",
        )
    return str(value["StringValue"])


class _Prepared:
    """A send entry read: the message to send, and what its answer needs."""

    def __init__(self, entry: dict[str, Any], kind: fifo.SendRules) -> None:
        body = required_string(entry, "MessageBody")
        if mattrs.has_invalid_characters(body):
            raise SqsError(
                INVALID_MESSAGE_CONTENTS,
                "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to "
                "#xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
            )
        group = kind.group(entry)
        dedup_id, shown_dedup_id = kind.dedup(entry, body)
        delay = integer(entry, "DelaySeconds", 0, MAX_DELAY_SECONDS)
        self.body = body
        self.fifo = kind.fifo
        self.attributes = mattrs.parse(entry.get("MessageAttributes"))
        self.trace = _trace_header(entry)
        stored = mattrs.to_leaseq(self.attributes)
        if self.trace is not None:
            stored[TRACE_KEY] = self.trace
        if shown_dedup_id:
            stored[DEDUP_KEY] = shown_dedup_id
        self.message = NewMessage(
            body.encode("utf-8"),
            stored,
            delay=float(delay) if delay is not None and not kind.fifo else None,
            dedup_id=dedup_id,
            group=group,
        )

    def size(self) -> int:
        return len(self.message.body) + sum(
            len(k.encode()) + len(v.encode()) for k, v in self.message.attributes.items()
        )

    def answer(self, outcome: SendOutcome) -> dict[str, Any]:
        result: dict[str, Any] = {
            "MessageId": sqs_message_id(outcome.message_id),
            "MD5OfMessageBody": md5.of_body(self.body),
        }
        digest = md5.of_attributes(self.attributes)
        if digest is not None:
            result["MD5OfMessageAttributes"] = digest
        if self.fifo and outcome.key is not None:  # a duplicate's first sequence is not known
            result["SequenceNumber"] = str(outcome.key)  # DeliveredMessage.sequence: the key
        if self.trace is not None:
            result["MD5OfMessageSystemAttributes"] = md5.of_attributes(
                {TRACE_HEADER: mattrs.AttributeValue("String", string=self.trace)}
            )
        return result


def _too_big(error: InvalidArgument) -> SqsError:
    return SqsError(
        INVALID_PARAMETER_VALUE,
        f"One or more parameters are invalid. Reason: {error.description}.",
    )


async def _send_rules(ctx: Context, name: str) -> fifo.SendRules:
    """A FIFO queue's rules (its name says it may be one: its config decides), else a standard
    queue's, without reading its config."""
    if not fifo.is_fifo_name(name):
        return fifo.SendRules()
    return fifo.SendRules.of((await ctx.core.get_queue(ctx.principal, name)).config)


async def send_message(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    prepared = _Prepared(params, await _send_rules(ctx, name))
    (outcome,) = await ctx.core.send(
        ctx.principal, name, [prepared.message], mattrs.RESERVED_PREFIX
    )
    if isinstance(outcome, InvalidArgument):
        raise _too_big(outcome)
    return prepared.answer(outcome)


async def send_message_batch(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    batch = entries(params)
    kind = await _send_rules(ctx, name)
    items: list[tuple[str, _Prepared | SqsError]] = []
    total = 0
    for entry in batch:
        try:
            prepared = _Prepared(entry, kind)
            total += prepared.size()
            items.append((entry["Id"], prepared))
        except SqsError as error:
            items.append((entry["Id"], error))
    if total > MAX_BATCH_BYTES:
        raise SqsError(
            BATCH_REQUEST_TOO_LONG,
            f"Batch requests cannot be longer than {MAX_BATCH_BYTES} bytes. You have sent {total} bytes.",
        )
    to_send = [item.message for _, item in items if isinstance(item, _Prepared)]
    outcomes = iter(
        await ctx.core.send(ctx.principal, name, to_send, mattrs.RESERVED_PREFIX) if to_send else []
    )
    successful, failed = [], []
    for entry_id, item in items:
        if isinstance(item, SqsError):
            failed.append(failure(entry_id, item))
            continue
        outcome = next(outcomes)
        if isinstance(outcome, InvalidArgument):
            failed.append(failure(entry_id, _too_big(outcome)))
            continue
        successful.append({"Id": entry_id, **item.answer(outcome)})
    return {"Successful": successful, "Failed": failed}


# --- receives -----------------------------------------------------------------------------------


def _system_names(params: dict[str, Any]) -> list[str]:
    asked = set(names(params, "AttributeNames")) | set(names(params, "MessageSystemAttributeNames"))
    if "All" in asked:
        return [*SYSTEM_ATTRIBUTES, *GROUP_ATTRIBUTES]
    return [a for a in (*SYSTEM_ATTRIBUTES, *GROUP_ATTRIBUTES) if a in asked]


async def receive_message(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    count = integer(params, "MaxNumberOfMessages", 1, MAX_RECEIVE) or 1
    visibility = integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY_SECONDS)
    wait = integer(params, "WaitTimeSeconds", 0, MAX_WAIT_SECONDS)
    wanted_system = _system_names(params)
    wanted_user = names(params, "MessageAttributeNames")
    fifo.identifier(params, "ReceiveRequestAttemptId")  # checked on every queue, as SQS does
    attempt = ""
    if wait is None or fifo.is_fifo_name(name):
        config = (await ctx.core.get_queue(ctx.principal, name)).config
        if wait is None:
            # The queue's default, within SQS's 20 s (a queue made over gRPC may say 30).
            wait = min(int(config.receive_wait_time), MAX_WAIT_SECONDS)
        attempt = fifo.attempt_of(params, config)
    messages = await ctx.core.receive(
        ctx.principal,
        name,
        count,
        visibility_timeout=float(visibility) if visibility is not None else None,
        wait_time=float(wait),
        attempt_id=attempt,
    )
    if not messages:
        return {}
    now_ms = int(ctx.core.now() * 1000)
    return {"Messages": [_received(ctx, m, wanted_system, wanted_user, now_ms) for m in messages]}


def _received(
    ctx: Context,
    message: DeliveredMessage,
    wanted_system: list[str],
    wanted_user: list[str],
    now_ms: int,
) -> dict[str, Any]:
    body = message.body.decode("utf-8", "replace")
    if ctx.xml_answer:
        body = mattrs.xml_safe(body)
    entry: dict[str, Any] = {
        "MessageId": sqs_message_id(message.message_id),
        "ReceiptHandle": message.receipt,
        "MD5OfBody": md5.of_body(body),
        "Body": body,
    }
    if wanted_system:
        values = {
            "SenderId": ctx.account,
            "SentTimestamp": str(int(message.enqueued_at * 1000)),
            "ApproximateReceiveCount": str(message.delivery_count),
            # leaseq keeps no first-receive time: exact on the first delivery, the enqueue time
            # after that (docs/sqs.md's differences).
            "ApproximateFirstReceiveTimestamp": str(
                now_ms if message.delivery_count <= 1 else int(message.enqueued_at * 1000)
            ),
        }
        trace = message.attributes.get(TRACE_KEY)
        if trace is not None:
            values[TRACE_HEADER] = mattrs.xml_safe(trace) if ctx.xml_answer else trace
        if message.group:
            values["MessageGroupId"] = message.group
        dedup_id = message.attributes.get(DEDUP_KEY)
        if dedup_id is not None:  # a FIFO queue's message
            values["MessageDeduplicationId"] = mattrs.xml_safe(dedup_id)
            values["SequenceNumber"] = str(message.sequence)
        entry["Attributes"] = {k: values[k] for k in wanted_system if k in values}
    chosen = mattrs.select(mattrs.from_leaseq(message.attributes), wanted_user)
    if chosen and ctx.xml_answer:
        chosen = mattrs.xml_safe_attributes(chosen)
    if chosen:
        entry["MessageAttributes"] = {k: v.to_wire() for k, v in chosen.items()}
        entry["MD5OfMessageAttributes"] = md5.of_attributes(chosen)
    return entry


# --- deletes and visibility ---------------------------------------------------------------------


def _delete_error(status: LeaseStatus) -> SqsError | None:
    """None: the delete counts as done. SQS answers success for a message already gone and for
    the receipt of an older delivery (which leaves the message to the newer one)."""
    if status in (
        LeaseStatus.OK,
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.MESSAGE_NOT_FOUND,
        LeaseStatus.RECEIPT_SUPERSEDED,
    ):
        return None
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
    name = queue(params)
    receipt = required_string(params, "ReceiptHandle")
    outcome = await ctx.core.delete(ctx.principal, name, [receipt])
    error = _delete_error(outcome.results[0].status)
    if error is not None:
        raise error
    return {}


async def delete_message_batch(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    receipts, ids, failed = [], [], []
    for entry in entries(params):
        receipt = entry.get("ReceiptHandle")
        if not isinstance(receipt, str) or not receipt:
            failed.append(failure(entry["Id"], missing("ReceiptHandle")))
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
                failed.append(failure(entry_id, error))
    return {"Successful": successful, "Failed": failed}


async def change_message_visibility(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    receipt = required_string(params, "ReceiptHandle")
    timeout = integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY_SECONDS, required=True)
    (result,) = await ctx.core.change_visibility(
        ctx.principal, name, [VisibilityChange(receipt, float(timeout or 0))]
    )
    error = _visibility_error(result.status, receipt)
    if error is not None:
        raise error
    return {}


async def change_message_visibility_batch(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    changes, ids, failed = [], [], []
    for entry in entries(params):
        try:
            receipt = required_string(entry, "ReceiptHandle")
            timeout = integer(entry, "VisibilityTimeout", 0, MAX_VISIBILITY_SECONDS, required=True)
        except SqsError as error:
            failed.append(failure(entry["Id"], error))
            continue
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
                failed.append(failure(entry_id, problem))
    return {"Successful": successful, "Failed": failed}
