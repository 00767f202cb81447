"""The SQS actions on queues: create, find, list, delete, purge, attributes, tags, permissions
and dead-letter sources, as calls of `core.QueueCore` (the queue's own SQS state, its tags and
stored attributes, in QueueCore.queue_state namespaces)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ...errors import InvalidArgument, QueueAlreadyExists, QueueNotFound
from . import fifo, policies
from . import queue_attributes as qattrs
from .errors import (
    INVALID_PARAMETER_VALUE,
    MISSING_PARAMETER,
    PURGE_QUEUE_IN_PROGRESS,
    QUEUE_NAME_EXISTS,
    SqsError,
    invalid_value,
    missing,
)
from .params import QUEUE_NAME, Context, integer, names, page_token, queue, string, string_map

MAX_LIST_RESULTS = 1000
_PREFIX = re.compile(r"[A-Za-z0-9_.-]{1,80}")  # a name's first characters (".fi" of ".fifo")
TAGS = "sqs.tags"  # the queue-state namespace of its tags
INTERNAL = "sqs.internal"  # the dialect's own bookkeeping of a queue (the last purge)
MAX_TAGS, MAX_TAG_KEY, MAX_TAG_VALUE = 50, 128, 256
PURGE_INTERVAL = 60.0  # seconds between two PurgeQueue of one queue (SQS's rule)


async def create_queue(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = string(params, "QueueName")
    assert name is not None
    raw_attributes = params.get("Attributes") or {}
    if not QUEUE_NAME.fullmatch(name):
        raise invalid_value(
            "QueueName",
            name,
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in "
            "length (a FIFO queue's ending in .fifo).",
        )
    parsed = qattrs.parse(raw_attributes)
    kind = fifo.creation(name, parsed.fifo)
    parsed.config.update(kind.config)
    parsed.stored.update(kind.stored)
    tags = _tags(params, "tags")
    await _check_redrive_allowed(ctx, name, parsed)
    config = replace(qattrs.SQS_DEFAULTS, **parsed.config)
    try:
        await ctx.core.create_queue(ctx.principal, name, config)
        created = True
    except QueueAlreadyExists:
        created = False
    except InvalidArgument as error:
        raise _dead_letter_error(error) from None
    if not created or not await _fresh(ctx, name):
        existing = await ctx.core.get_queue(ctx.principal, name)
        stored = await ctx.core.queue_state(ctx.principal, name, qattrs.STATE)
        if qattrs.differs(existing.config, stored, parsed):  # SQS compares only those given
            raise SqsError(
                QUEUE_NAME_EXISTS,
                "A queue already exists with the same name and a different value for an attribute.",
            )
        return {"QueueUrl": ctx.url(name)}
    stored_changes = dict(parsed.stored)
    if not stored_changes.get("KmsMasterKeyId"):
        stored_changes.setdefault("SqsManagedSseEnabled", "true")  # SQS's default since 2022
    stored_changes = {k: v for k, v in stored_changes.items() if v is not None}
    if stored_changes:
        await ctx.core.update_queue_state(ctx.principal, name, qattrs.STATE, stored_changes)
    if tags:
        await ctx.core.update_queue_state(ctx.principal, name, TAGS, dict(tags))
    return {"QueueUrl": ctx.url(name)}


def _dead_letter_error(error: InvalidArgument) -> Exception:
    """The core's refusal of a dead letter queue of another type, in SQS's words."""
    if error.field == "config.dead_letter_queue" and (
        "FIFO" in error.description or "FAIR" in error.description
    ):
        return SqsError(
            INVALID_PARAMETER_VALUE,
            "Value for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be same "
            "type of queue as the source.",
        )
    return error


async def _fresh(ctx: Context, name: str) -> bool:
    """Whether the queue a CreateQueue just made (or found with an equal config) is new: a queue
    made through SQS records that it was, in its internal state, the first time only."""
    state = await ctx.core.queue_state(ctx.principal, name, INTERNAL)
    if "made" in state:
        return False
    await ctx.core.update_queue_state(ctx.principal, name, INTERNAL, {"made": "sqs"})
    return True


async def _check_redrive_allowed(ctx: Context, name: str, parsed: qattrs.Parsed) -> None:
    """A RedrivePolicy naming a dead letter queue whose RedriveAllowPolicy refuses this queue
    is InvalidParameterValue (a missing dead letter queue is the core's error)."""
    dlq = parsed.config.get("dead_letter_queue")
    if not dlq:
        return
    try:
        allow = (await ctx.core.queue_state(ctx.principal, dlq, qattrs.STATE)).get(
            "RedriveAllowPolicy"
        )
    except QueueNotFound:
        return
    if not policies.redrive_allowed(allow, name):
        raise SqsError(
            INVALID_PARAMETER_VALUE,
            f"Value {ctx.arn(dlq)} for parameter RedrivePolicy is invalid. Reason: the dead "
            "letter queue's RedriveAllowPolicy does not allow this queue as a source queue.",
        )


async def get_queue_url(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = string(params, "QueueName")
    assert name is not None
    if not QUEUE_NAME.fullmatch(name):
        raise qattrs.no_queue()
    await ctx.core.get_queue(ctx.principal, name)
    return {"QueueUrl": ctx.url(name)}


async def list_queues(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    prefix = string(params, "QueueNamePrefix", required=False) or ""
    if prefix and not _PREFIX.fullmatch(prefix):
        return {}  # no queue name starts so
    limit = integer(params, "MaxResults", 1, MAX_LIST_RESULTS)
    token = string(params, "NextToken", required=False)
    if token is not None and limit is None:
        raise invalid_value("NextToken", token, "NextToken needs MaxResults.")
    after = page_token(ctx, prefix, token)
    page = await ctx.core.list_queues(ctx.principal, prefix, after, limit or MAX_LIST_RESULTS)
    result: dict[str, Any] = {}
    if page.queues:
        result["QueueUrls"] = [ctx.url(q.name) for q in page.queues]
    if page.more and limit is not None:
        result["NextToken"] = ctx.core.tokens.encode_list(prefix, page.queues[-1].name)
    return result


async def delete_queue(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    await ctx.core.delete_queue(ctx.principal, name)
    ctx.move_tasks.forget(name)  # a running task of it ends FAILED at its next step
    return {}


async def purge_queue(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    now = ctx.core.now()
    internal = await ctx.core.queue_state(ctx.principal, name, INTERNAL)
    last = internal.get("purged_at")
    if last is not None and now - float(last) < PURGE_INTERVAL:
        raise SqsError(
            PURGE_QUEUE_IN_PROGRESS,
            f"Only one PurgeQueue operation on {name} is allowed every "
            f"{int(PURGE_INTERVAL)} seconds.",
        )
    await ctx.core.purge_queue(ctx.principal, name)
    await ctx.core.update_queue_state(ctx.principal, name, INTERNAL, {"purged_at": repr(now)})
    return {}


async def get_queue_attributes(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    wanted = qattrs.requested(params.get("AttributeNames"))
    info = await ctx.core.get_queue(ctx.principal, name)
    stats = await ctx.core.stats(ctx.principal, name) if qattrs.needs_stats(wanted) else None
    stored = await ctx.core.queue_state(ctx.principal, name, qattrs.STATE) if wanted else {}
    values = qattrs.render(wanted, info, stats, ctx.region, ctx.account, stored)
    return {"Attributes": values} if values else {}


async def set_queue_attributes(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    if "Attributes" not in params:
        raise missing("Attributes")
    parsed = qattrs.parse(params.get("Attributes"))
    current = await ctx.core.get_queue(ctx.principal, name)  # QueueDoesNotExist before any change
    if parsed.fifo:
        stored = await ctx.core.queue_state(ctx.principal, name, qattrs.STATE)
        kind = fifo.change(current.config, stored, parsed.fifo)
        parsed.config.update(kind.config)
        parsed.stored.update(kind.stored)
    await _check_redrive_allowed(ctx, name, parsed)
    if parsed.config:
        try:
            await ctx.core.update_queue(ctx.principal, name, parsed.config)
        except InvalidArgument as error:
            raise _dead_letter_error(error) from None
    changes = {**parsed.stored, qattrs.LAST_MODIFIED: str(int(ctx.core.now()))}
    await ctx.core.update_queue_state(ctx.principal, name, qattrs.STATE, changes)
    return {}


async def list_dead_letter_source_queues(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    limit = integer(params, "MaxResults", 1, MAX_LIST_RESULTS)
    token = string(params, "NextToken", required=False)
    after = page_token(ctx, "", token)
    sources = sorted(await ctx.core.dead_letter_sources(ctx.principal, name))
    if after is not None:
        sources = [s for s in sources if s > after]
    page = sources[: limit or MAX_LIST_RESULTS]
    result: dict[str, Any] = {"queueUrls": [ctx.url(s) for s in page]}
    if limit is not None and len(sources) > limit:
        result["NextToken"] = ctx.core.tokens.encode_list("", page[-1])
    return result


# --- tags -----------------------------------------------------------------------------------


def _tags(params: dict[str, Any], key: str) -> dict[str, str]:
    tags = string_map(params, key)
    for tag, value in tags.items():
        if not 1 <= len(tag) <= MAX_TAG_KEY or len(value) > MAX_TAG_VALUE:
            raise invalid_value(
                "Tags",
                tag,
                f"Tag keys are 1 to {MAX_TAG_KEY} characters, values at most {MAX_TAG_VALUE}.",
            )
    if len(tags) > MAX_TAGS:
        raise SqsError(INVALID_PARAMETER_VALUE, f"Too many tags: at most {MAX_TAGS} per queue.")
    return tags


async def tag_queue(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    tags = _tags(params, "Tags") or _tags(params, "tags")
    if not tags:
        raise SqsError(MISSING_PARAMETER, "The request must contain the parameter Tags.")
    current = await ctx.core.queue_state(ctx.principal, name, TAGS)
    if len(current.keys() | tags.keys()) > MAX_TAGS:
        raise SqsError(
            INVALID_PARAMETER_VALUE, f"Too many tags added for queue {name}: at most {MAX_TAGS}."
        )
    await ctx.core.update_queue_state(ctx.principal, name, TAGS, dict(tags))
    return {}


async def untag_queue(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    keys = names(params, "TagKeys")
    if not keys:
        raise SqsError(MISSING_PARAMETER, "The request must contain the parameter TagKeys.")
    await ctx.core.update_queue_state(ctx.principal, name, TAGS, dict.fromkeys(keys))
    return {}


async def list_queue_tags(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    tags = await ctx.core.queue_state(ctx.principal, queue(params), TAGS)
    return {"Tags": tags} if tags else {}


# --- permissions (statements of the stored Policy) ------------------------------------------


async def add_permission(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    label = string(params, "Label")
    accounts, actions = names(params, "AWSAccountIds"), names(params, "Actions")
    if not accounts:
        raise missing("AWSAccountIds")
    if not actions:
        raise missing("Actions")
    stored = await ctx.core.queue_state(ctx.principal, name, qattrs.STATE)
    policy = policies.add_permission(stored.get("Policy"), ctx.arn(name), label, accounts, actions)
    await ctx.core.update_queue_state(ctx.principal, name, qattrs.STATE, {"Policy": policy})
    return {}


async def remove_permission(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    name = queue(params)
    label = string(params, "Label")
    stored = await ctx.core.queue_state(ctx.principal, name, qattrs.STATE)
    policy = policies.remove_permission(stored.get("Policy"), label)
    await ctx.core.update_queue_state(ctx.principal, name, qattrs.STATE, {"Policy": policy})
    return {}
