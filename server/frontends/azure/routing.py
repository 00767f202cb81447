"""Which Azure operation a request is: its method, its path-style URL
`/<account>[/<queue>[/messages[/<messageid>]]]` (as Azurite serves them) and its comp/restype/
peekonly parameters."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from .errors import INVALID_URI, NOT_IMPLEMENTED, UNSUPPORTED_VERB, AzureError


@dataclass(frozen=True)
class Route:
    operation: str  # one of OPERATIONS (a fixed name: it labels metrics)
    account: str
    queue: str = ""
    message_id: str = ""


OPERATIONS = (
    "ListQueues",
    "CreateQueue",
    "DeleteQueue",
    "GetQueueMetadata",
    "SetQueueMetadata",
    "PutMessage",
    "GetMessages",
    "PeekMessages",
    "ClearMessages",
    "DeleteMessage",
    "UpdateMessage",
    "GetServiceProperties",
    "SetServiceProperties",
    "GetServiceStats",
    "GetQueueAcl",
    "SetQueueAcl",
    "Preflight",
)

# (depth, comp, method) -> operation; depth counts the path's segments after the account.
_TABLE: dict[tuple[int, str, str], str] = {
    (0, "list", "GET"): "ListQueues",
    (1, "", "PUT"): "CreateQueue",
    (1, "", "DELETE"): "DeleteQueue",
    (1, "metadata", "GET"): "GetQueueMetadata",
    (1, "metadata", "HEAD"): "GetQueueMetadata",
    (1, "metadata", "PUT"): "SetQueueMetadata",
    (2, "", "POST"): "PutMessage",
    (2, "", "GET"): "GetMessages",
    (2, "", "DELETE"): "ClearMessages",
    (3, "", "PUT"): "UpdateMessage",
    (3, "", "DELETE"): "DeleteMessage",
    (0, "properties", "GET"): "GetServiceProperties",
    (0, "properties", "PUT"): "SetServiceProperties",
    (0, "stats", "GET"): "GetServiceStats",
    (1, "acl", "GET"): "GetQueueAcl",
    (1, "acl", "HEAD"): "GetQueueAcl",
    (1, "acl", "PUT"): "SetQueueAcl",
}
_NOT_IMPLEMENTED = {
    (0, "userdelegationkey"): "Get User Delegation Key (OAuth)",
}


def route(method: str, raw_path: str, query: dict[str, str]) -> Route:
    segments = [unquote(s) for s in raw_path.split("/")[1:]]
    if segments and segments[-1] == "" and len(segments) <= 2:
        segments.pop()  # "/account/" lists queues as "/account" does
    if not segments or not segments[0] or "" in segments or len(segments) > 4:
        raise AzureError(
            INVALID_URI, "The requested URI does not represent any resource on the server."
        )
    if len(segments) >= 3 and segments[2] != "messages":
        raise AzureError(
            INVALID_URI, "The requested URI does not represent any resource on the server."
        )
    depth = len(segments) - 1
    comp = query.get("comp", "")
    if (depth, comp) in _NOT_IMPLEMENTED:
        raise AzureError(
            NOT_IMPLEMENTED,
            f"leaseq does not implement {_NOT_IMPLEMENTED[depth, comp]} (README: differences).",
        )
    operation = "Preflight" if method == "OPTIONS" else _TABLE.get((depth, comp, method))
    if operation == "GetMessages" and query.get("peekonly", "").lower() == "true":
        operation = "PeekMessages"
    if operation is None:
        if any(d == depth and c == comp for d, c, _ in _TABLE):
            raise AzureError(
                UNSUPPORTED_VERB, f"The resource doesn't support the HTTP verb {method[:20]}."
            )
        raise AzureError(
            INVALID_URI, "The requested URI does not represent any resource on the server."
        )
    return Route(
        operation,
        segments[0],
        segments[1] if depth >= 1 else "",
        leaseq_message_id(segments[3]) if depth == 3 else "",
    )


_GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def leaseq_message_id(text: str) -> str:
    """A URL's message id: the GUID form Azure answers, or leaseq's own 32 hex digits."""
    return text.replace("-", "") if _GUID.fullmatch(text) else text
