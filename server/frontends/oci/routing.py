"""Which OCI Queue operation a request is: its method and its path under /20210201 (the REST API
version the SDK's QueueClient and QueueAdminClient call)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from .errors import METHOD_NOT_ALLOWED, NOT_IMPLEMENTED, RESOURCE_NOT_FOUND, OciError

API_VERSION = "20210201"


@dataclass(frozen=True)
class Route:
    operation: str  # a fixed name (it labels metrics)
    queue_id: str = ""
    receipt: str = ""
    work_request_id: str = ""


# (shape, method) -> operation; a shape is the path with its ids as "{}".
_TABLE: dict[tuple[str, str], str] = {
    ("queues", "POST"): "CreateQueue",
    ("queues", "GET"): "ListQueues",
    ("queues/{}", "GET"): "GetQueue",
    ("queues/{}", "PUT"): "UpdateQueue",
    ("queues/{}", "DELETE"): "DeleteQueue",
    ("queues/{}/actions/purge", "POST"): "PurgeQueue",
    ("queues/{}/actions/changeCompartment", "POST"): "ChangeQueueCompartment",
    ("queues/{}/messages", "GET"): "GetMessages",
    ("queues/{}/messages", "POST"): "PutMessages",
    ("queues/{}/messages/{}", "PUT"): "UpdateMessage",
    ("queues/{}/messages/{}", "DELETE"): "DeleteMessage",
    ("queues/{}/messages/actions/updateMessages", "POST"): "UpdateMessages",
    ("queues/{}/messages/actions/deleteMessages", "POST"): "DeleteMessages",
    ("queues/{}/stats", "GET"): "GetStats",
    ("queues/{}/channels", "GET"): "ListChannels",
    ("workRequests", "GET"): "ListWorkRequests",
    ("workRequests/{}", "GET"): "GetWorkRequest",
    ("workRequests/{}/errors", "GET"): "ListWorkRequestErrors",
    ("workRequests/{}/logs", "GET"): "ListWorkRequestLogs",
}
_FIXED = {
    "queues",
    "messages",
    "actions",
    "purge",
    "changeCompartment",
    "updateMessages",
    "deleteMessages",
    "stats",
    "channels",
    "workRequests",
    "errors",
    "logs",
}


def _shape(segments: list[str]) -> tuple[str, list[str]]:
    """The path's shape and its ids: a segment is an id where the shape has one."""
    shape: list[str] = []
    ids: list[str] = []
    for index, segment in enumerate(segments):
        # Ids sit at odd positions after a collection (queues/{id}, messages/{receipt}, ...);
        # "messages/actions/..." is the batch actions, not a receipt named "actions".
        is_id = (
            index in (1, 3)
            and not (index == 3 and segment == "actions")
            and not (index == 1 and segment in _FIXED and len(segments) == 1)
        )
        if is_id and segments[index - 1] in ("queues", "messages", "workRequests"):
            shape.append("{}")
            ids.append(segment)
        else:
            shape.append(segment)
    return "/".join(shape), ids


def route(method: str, raw_path: str) -> Route:
    prefix = f"/{API_VERSION}/"
    if not raw_path.startswith(prefix):
        raise OciError(
            RESOURCE_NOT_FOUND, f"Not found: leaseq serves the OCI Queue API at /{API_VERSION}."
        )
    segments = [unquote(s) for s in raw_path[len(prefix) :].split("/")]
    if segments and segments[0] == "consumerGroups":
        raise OciError(
            NOT_IMPLEMENTED,
            "leaseq does not implement consumer groups (README: differences from OCI).",
        )
    if "" in segments or len(segments) > 5:
        raise OciError(RESOURCE_NOT_FOUND, "Not found: no OCI Queue operation has this path.")
    shape, ids = _shape(segments)
    operation = _TABLE.get((shape, method))
    if operation is None:
        if any(s == shape for s, _ in _TABLE):
            raise OciError(
                METHOD_NOT_ALLOWED, f"The resource does not support the method {method[:20]}."
            )
        raise OciError(RESOURCE_NOT_FOUND, "Not found: no OCI Queue operation has this path.")
    if shape.startswith("workRequests/"):
        return Route(operation, work_request_id=ids[0])
    return Route(
        operation,
        queue_id=ids[0] if ids else "",
        receipt=ids[1] if len(ids) > 1 else "",
    )
