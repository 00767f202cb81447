"""The OCI queue administration API (QueueAdminClient), GetStats and ListChannels, and the work
requests, as calls of `core.QueueCore`.

A queue's OCI settings map onto leaseq's configuration: retentionInSeconds -> message_retention,
visibilityInSeconds -> visibility_timeout, timeoutInSeconds -> receive_wait_time, and
deadLetterQueueDeliveryCount N > 0 -> a dead letter queue "<name>-dlq" made beside it with
max_delivery_count N (OCI's dead letter queue is part of its queue; leaseq's is a queue of its
own). What leaseq has no place for (compartmentId, customEncryptionKeyId, channelConsumptionLimit,
freeformTags) is kept in the queue's metadata under oci_* names and returned; it changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

from ...core import PermissionDenied
from ...domain import limits, rules
from ...domain.types import QueueConfig, QueueInfo
from ...errors import InvalidArgument, QueueAlreadyExists, QueueNotFound
from . import ids, inputs
from .context import Answer, Request
from .errors import CONFLICT, OciError, invalid, not_found
from .messages import MAX_TIMEOUT, MAX_VISIBILITY

MIN_RETENTION, MAX_RETENTION = 60, 7 * 86400  # OCI: 10 s .. 7 days; leaseq keeps a message >= 60 s
DEFAULT_RETENTION = 86400  # OCI's default: one day
MAX_DLQ_DELIVERY_COUNT = 20  # OCI's range: 0 (no dead letter queue) .. 20
MAX_LIST = 1000
DEFAULT_LIST = 100
DLQ_SUFFIX = "-dlq"
_META = {
    "compartmentId": "oci_compartment_id",
    "customEncryptionKeyId": "oci_custom_encryption_key_id",
    "channelConsumptionLimit": "oci_channel_consumption_limit",
    "freeformTags": "oci_freeform_tags",
}
_DLQ_OF = "oci_dead_letter_queue_of"


def _owner(request: Request) -> str:
    return request.principal.name if request.principal is not None else ""


def _accepted(request: Request, operation: str, action: str, name: str, compartment: str) -> Answer:
    work = request.work_requests.add(
        operation, action, ids.queue_ocid(name), compartment, _owner(request), request.core.now()
    )
    return Answer(202, headers={"opc-work-request-id": work.id})


def _dlq_name(name: str) -> str:
    return name[: limits.MAX_NAME - len(DLQ_SUFFIX)] + DLQ_SUFFIX


def _settings(data: dict[str, Any]) -> dict[str, Any]:
    """The queue settings of a CreateQueue or UpdateQueue body, checked against OCI's ranges."""
    return {
        "retention": inputs.integer(data, "retentionInSeconds", MIN_RETENTION, MAX_RETENTION),
        "visibility": inputs.integer(data, "visibilityInSeconds", 0, MAX_VISIBILITY),
        "timeout": inputs.integer(data, "timeoutInSeconds", 0, MAX_TIMEOUT),
        "dlq_count": inputs.integer(
            data, "deadLetterQueueDeliveryCount", 0, MAX_DLQ_DELIVERY_COUNT
        ),
        "channel_limit": inputs.integer(data, "channelConsumptionLimit", 1, 100),
        "key_id": inputs.text(data, "customEncryptionKeyId", 255),
        "compartment": inputs.text(data, "compartmentId", 255),
        "tags": inputs.string_map(data.get("freeformTags"), "freeformTags")
        if "freeformTags" in data
        else None,
    }


def _metadata_changes(settings: dict[str, Any]) -> dict[str, str]:
    changes: dict[str, str] = {}
    if settings["compartment"] is not None:
        changes[_META["compartmentId"]] = settings["compartment"]
    if settings["key_id"] is not None:
        changes[_META["customEncryptionKeyId"]] = settings["key_id"]
    if settings["channel_limit"] is not None:
        changes[_META["channelConsumptionLimit"]] = str(settings["channel_limit"])
    if settings["tags"] is not None:
        changes[_META["freeformTags"]] = json.dumps(settings["tags"], separators=(",", ":"))
    return changes


async def _merge_metadata(request: Request, name: str, changes: dict[str, str]) -> None:
    if not changes:
        return
    stored = (await request.core.queue_metadata(request.principal, [name])).get(name, {})
    await request.core.set_queue_metadata(request.principal, name, {**stored, **changes})


def _queue_name_from_display(display: str) -> str:
    if not limits.NAME_PATTERN.fullmatch(display):
        raise invalid(
            "displayName must be 1 to 80 letters, digits, '_' or '-' (it is the leaseq queue's name)."
        )
    return display


async def create_queue(request: Request) -> Answer:
    data = inputs.json_object(request.body)
    display = inputs.required(inputs.text(data, "displayName", 255), "displayName")
    compartment = inputs.required(inputs.text(data, "compartmentId", 255), "compartmentId")
    name = _queue_name_from_display(display)
    settings = _settings(data)
    retention = float(settings["retention"] or DEFAULT_RETENTION)
    config = QueueConfig(
        visibility_timeout=float(30 if settings["visibility"] is None else settings["visibility"]),
        receive_wait_time=float(30 if settings["timeout"] is None else settings["timeout"]),
        message_retention=retention,
    )
    core = request.core
    try:
        await core.get_queue(request.principal, name)
    except QueueNotFound:
        pass
    else:  # before anything is made or changed for it
        raise OciError(
            CONFLICT,
            f"A queue named {name} exists already (the displayName is leaseq's queue name).",
        )
    if settings["dlq_count"]:
        dlq = _dlq_name(name)
        try:
            await core.create_queue(
                request.principal, dlq, QueueConfig(message_retention=retention)
            )
        except QueueAlreadyExists:
            pass  # made by an earlier CreateQueue of this name that failed later: reuse it
        await _merge_metadata(request, dlq, {_DLQ_OF: name})
        config = QueueConfig(
            visibility_timeout=config.visibility_timeout,
            receive_wait_time=config.receive_wait_time,
            message_retention=retention,
            dead_letter_queue=dlq,
            max_delivery_count=settings["dlq_count"],
        )
    try:
        await core.create_queue(request.principal, name, config)
    except QueueAlreadyExists:
        raise OciError(
            CONFLICT,
            f"A queue named {name} exists already (the displayName is leaseq's queue name).",
        ) from None
    await _merge_metadata(request, name, _metadata_changes(settings))
    return _accepted(request, "CREATE_QUEUE", "CREATED", name, compartment)


def _description(request: Request, info: QueueInfo, metadata: dict[str, str]) -> dict[str, Any]:
    ocid = ids.queue_ocid(info.name)
    created = ids.rfc3339(info.create_time)
    try:
        tags = json.loads(metadata.get(_META["freeformTags"], "{}"))
    except ValueError:
        tags = {}
    try:
        channel_limit = int(metadata.get(_META["channelConsumptionLimit"], "100"))
    except ValueError:
        channel_limit = 100
    return {
        "id": ocid,
        "displayName": info.name,
        "compartmentId": metadata.get(_META["compartmentId"], ""),
        "timeCreated": created,
        "timeUpdated": created,
        "lifecycleState": "ACTIVE",
        "lifecycleDetails": "",
        "messagesEndpoint": request.endpoint,
        "retentionInSeconds": int(info.config.message_retention),
        "visibilityInSeconds": int(info.config.visibility_timeout),
        "timeoutInSeconds": int(info.config.receive_wait_time),
        "deadLetterQueueDeliveryCount": (info.config.max_delivery_count or 0)
        if info.config.dead_letter_queue
        else 0,
        "customEncryptionKeyId": metadata.get(_META["customEncryptionKeyId"]),
        "channelConsumptionLimit": channel_limit,
        "freeformTags": tags,
        "definedTags": {},
        "systemTags": {},
        "capabilities": [],
    }


async def get_queue(request: Request) -> Answer:
    name = ids.queue_name(request.route.queue_id)
    info = await request.core.get_queue(request.principal, name)
    metadata = (await request.core.queue_metadata(request.principal, [name])).get(name, {})
    return Answer(200, _description(request, info, metadata))


async def list_queues(request: Request) -> Answer:
    query = request.query
    limit = inputs.query_int(query, "limit", 1, MAX_LIST) or DEFAULT_LIST
    page = query.get("page")
    after = None
    if page:
        try:
            after = request.core.tokens.decode_list(page, "")
        except InvalidArgument:
            raise invalid("page is not a page token this server issued.") from None
    state = query.get("lifecycleState")
    if state is not None and state not in (
        "ACTIVE",
        "CREATING",
        "UPDATING",
        "DELETING",
        "DELETED",
        "FAILED",
    ):
        raise invalid(
            "lifecycleState must be one of ACTIVE, CREATING, UPDATING, DELETING, DELETED, FAILED."
        )
    if query.get("sortBy", "displayName") not in ("displayName", "timeCreated"):
        raise invalid("sortBy must be displayName or timeCreated.")
    if query.get("sortOrder", "ASC") not in ("ASC", "DESC"):
        raise invalid("sortOrder must be ASC or DESC.")
    wanted = query.get("displayName")
    if "id" in query:
        wanted = (
            query["id"][len(ids.QUEUE_OCID_PREFIX) :]
            if query["id"].startswith(ids.QUEUE_OCID_PREFIX)
            else ""
        )
    if state not in (None, "ACTIVE") or wanted == "":
        return Answer(200, {"items": []})  # every leaseq queue is ACTIVE
    infos: list[QueueInfo] = []
    more = False
    if wanted is not None:
        try:
            infos = [await request.core.get_queue(request.principal, wanted)]
        except (QueueNotFound, InvalidArgument, PermissionDenied):
            pass  # a queue the caller may not see is not listed
    else:
        listed = await request.core.list_queues(request.principal, "", after, limit)
        infos, more = listed.queues, listed.more
    metadata = await request.core.queue_metadata(request.principal, [i.name for i in infos])
    items = []
    for info in infos:
        full = _description(request, info, metadata.get(info.name, {}))
        items.append(
            {
                k: full[k]
                for k in (
                    "id",
                    "displayName",
                    "compartmentId",
                    "timeCreated",
                    "timeUpdated",
                    "lifecycleState",
                    "lifecycleDetails",
                    "messagesEndpoint",
                    "freeformTags",
                    "definedTags",
                    "systemTags",
                )
            }
            | {"capabilities": []}
        )
    headers = {}
    if more:
        headers["opc-next-page"] = request.core.tokens.encode_list("", infos[-1].name)
    return Answer(200, {"items": items}, headers)


async def update_queue(request: Request) -> Answer:
    name = ids.queue_name(request.route.queue_id)
    data = inputs.json_object(request.body)
    display = inputs.text(data, "displayName", 255)
    if display is not None and display != name:
        raise invalid("leaseq cannot rename a queue: displayName is its name.")
    if "retentionInSeconds" in data:
        raise invalid("retentionInSeconds cannot be changed after CreateQueue (as in OCI).")
    settings = _settings(data)
    core = request.core
    info = await core.get_queue(request.principal, name)
    changes: dict[str, Any] = {}
    if settings["visibility"] is not None:
        changes["visibility_timeout"] = float(settings["visibility"])
    if settings["timeout"] is not None:
        changes["receive_wait_time"] = float(settings["timeout"])
    count = settings["dlq_count"]
    if count == 0 and info.config.dead_letter_queue:
        changes["dead_letter_queue"] = None
        changes["max_delivery_count"] = None
    elif count:
        dlq = info.config.dead_letter_queue
        if not dlq:
            dlq = _dlq_name(name)
            try:
                await core.create_queue(
                    request.principal,
                    dlq,
                    QueueConfig(message_retention=info.config.message_retention),
                )
            except QueueAlreadyExists:
                pass
            await _merge_metadata(request, dlq, {_DLQ_OF: name})
        changes["dead_letter_queue"] = dlq
        changes["max_delivery_count"] = count
    if changes:
        await core.update_queue(request.principal, name, changes)
    await _merge_metadata(request, name, _metadata_changes(settings))
    return _accepted(request, "UPDATE_QUEUE", "UPDATED", name, settings["compartment"] or "")


async def _own_dlq(request: Request, info: QueueInfo) -> str | None:
    """The dead letter queue CreateQueue/UpdateQueue made for this queue, if any."""
    dlq = info.config.dead_letter_queue
    if not dlq:
        return None
    stored = (await request.core.queue_metadata(request.principal, [dlq])).get(dlq, {})
    return dlq if stored.get(_DLQ_OF) == info.name else None


async def delete_queue(request: Request) -> Answer:
    name = ids.queue_name(request.route.queue_id)
    core = request.core
    info = await core.get_queue(request.principal, name)
    dlq = await _own_dlq(request, info)
    metadata = (await core.queue_metadata(request.principal, [name])).get(name, {})
    await core.delete_queue(request.principal, name)
    if dlq is not None:
        try:
            await core.delete_queue(request.principal, dlq)
        except QueueNotFound:
            pass
    return _accepted(
        request, "DELETE_QUEUE", "DELETED", name, metadata.get(_META["compartmentId"], "")
    )


async def purge_queue(request: Request) -> Answer:
    name = ids.queue_name(request.route.queue_id)
    data = inputs.json_object(request.body)
    purge_type = inputs.required(inputs.text(data, "purgeType", 10), "purgeType")
    if purge_type not in ("NORMAL", "DLQ", "BOTH"):
        raise invalid("purgeType must be NORMAL, DLQ or BOTH.")
    if data.get("channelIds"):
        raise invalid("leaseq purges a whole queue: channelIds is not supported.")
    if data.get("consumerGroupId"):
        raise invalid("leaseq has no consumer groups (consumerGroupId).")
    core = request.core
    info = await core.get_queue(request.principal, name)
    if purge_type in ("NORMAL", "BOTH"):
        await core.purge_queue(request.principal, name)
    if purge_type in ("DLQ", "BOTH") and info.config.dead_letter_queue:
        await core.purge_queue(request.principal, info.config.dead_letter_queue)
    return _accepted(request, "PURGE_QUEUE", "UPDATED", name, "")


async def change_compartment(request: Request) -> Answer:
    name = ids.queue_name(request.route.queue_id)
    data = inputs.json_object(request.body)
    compartment = inputs.required(inputs.text(data, "compartmentId", 255), "compartmentId")
    await request.core.get_queue(request.principal, name)
    await _merge_metadata(request, name, {_META["compartmentId"]: compartment})
    return _accepted(request, "CHANGE_QUEUE_COMPARTMENT", "RELATED", name, compartment)


# --- stats and channels -------------------------------------------------------------------------


async def get_stats(request: Request) -> Answer:
    name = ids.queue_name(request.route.queue_id)
    channel = request.query.get("channelId")
    if "consumerGroupId" in request.query:
        raise invalid("leaseq has no consumer groups (consumerGroupId).")
    core = request.core
    info = await core.get_queue(request.principal, name)

    def counts(stats: Any) -> dict[str, int]:
        if channel is not None:
            by_channel = stats.channels.get(channel)
            visible, leased = (by_channel.visible, by_channel.leased) if by_channel else (0, 0)
        else:
            visible, leased = stats.visible, stats.leased
        # leaseq counts messages, not their bytes: sizeInBytes is 0 (README: differences).
        return {"visibleMessages": visible, "inFlightMessages": leased, "sizeInBytes": 0}

    answer: dict[str, Any] = {"queue": counts(await core.stats(request.principal, name))}
    dlq_counts = {"visibleMessages": 0, "inFlightMessages": 0, "sizeInBytes": 0}
    if info.config.dead_letter_queue:
        try:
            dlq_counts = counts(await core.stats(request.principal, info.config.dead_letter_queue))
        except QueueNotFound:
            pass
    answer["dlq"] = dlq_counts
    if channel is not None:
        answer["channelId"] = channel
    return Answer(200, answer)


async def list_channels(request: Request) -> Answer:
    name = ids.queue_name(request.route.queue_id)
    query = request.query
    limit = inputs.query_int(query, "limit", 1, MAX_LIST) or DEFAULT_LIST
    channel_filter = query.get("channelFilter", "")
    page = query.get("page", "")
    if "consumerGroupId" in query:
        raise invalid("leaseq has no consumer groups (consumerGroupId).")
    try:
        rules.channel_filter(channel_filter, "channelFilter")
    except InvalidArgument as error:
        raise invalid(str(error)) from None
    if len(page) > limits.MAX_CHANNEL:
        raise invalid("page is not a page token this server issued.")
    stats = await request.core.stats(request.principal, name)
    channels = sorted(
        c
        for c, n in stats.channels.items()
        if c
        and (n.visible or n.leased or n.delayed)
        and rules.channel_matches(c, channel_filter)
        and c > page
    )
    headers = {"opc-next-page": channels[limit - 1]} if len(channels) > limit else {}
    return Answer(200, {"items": channels[:limit]}, headers)


# --- work requests ------------------------------------------------------------------------------


def _owner_filter(request: Request) -> str | None:
    return None if request.principal is None else request.principal.name


async def get_work_request(request: Request) -> Answer:
    found = request.work_requests.get(request.route.work_request_id, _owner_filter(request))
    if found is None:
        raise not_found("work request")
    return Answer(200, found.summary())


async def list_work_requests(request: Request) -> Answer:
    query = request.query
    limit = inputs.query_int(query, "limit", 1, MAX_LIST) or DEFAULT_LIST
    wanted = query.get("workRequestId")
    compartment = query.get("compartmentId")
    found = [
        w
        for w in request.work_requests.newest(_owner_filter(request))
        if (wanted is None or w.id == wanted)
        and (not compartment or w.compartment_id in ("", compartment))
    ]
    start = inputs.query_int(query, "page", 0, 10**9) or 0
    items = [w.summary() for w in found[start : start + limit]]
    headers = {"opc-next-page": str(start + limit)} if len(found) > start + limit else {}
    return Answer(200, {"items": items}, headers)


async def list_work_request_errors(request: Request) -> Answer:
    await get_work_request(request)
    return Answer(200, {"items": []})  # a work request that failed is never made


async def list_work_request_logs(request: Request) -> Answer:
    found = request.work_requests.get(request.route.work_request_id, _owner_filter(request))
    if found is None:
        raise not_found("work request")
    return Answer(
        200,
        {
            "items": [
                {"message": f"{found.operation_type} succeeded", "timestamp": ids.rfc3339(found.at)}
            ]
        },
    )
