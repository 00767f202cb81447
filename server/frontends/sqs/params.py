"""What every SQS action shares: its `Context` and the reading of its parameters (the JSON
protocol's shape; protocol_query converts form parameters to it)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...auth import Principal
from ...core import QueueCore
from ...domain import limits
from ...errors import InvalidArgument
from . import queue_attributes as qattrs
from .errors import (
    BATCH_ENTRY_IDS_NOT_DISTINCT,
    EMPTY_BATCH,
    INVALID_BATCH_ENTRY_ID,
    TOO_MANY_ENTRIES,
    SqsError,
    invalid_value,
    missing,
)

if TYPE_CHECKING:
    from .move_tasks import MoveTasks

MAX_BATCH = 10  # entries of an SQS batch request
QUEUE_NAME = limits.NAME_PATTERN  # 1..80 of A-Z a-z 0-9 _ -, perhaps ending in .fifo
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


@dataclass
class Context:
    """What an action knows of its request besides the parameters."""

    core: QueueCore
    principal: Principal | None
    base_url: str  # scheme://host[:port] as the client addressed us
    region: str
    move_tasks: MoveTasks
    account: str = qattrs.DEFAULT_ACCOUNT
    # The answer is XML 1.0 (the query protocol): message text is made xml_safe before its
    # MD5s are taken, so that SDKs find the checksums of the text they receive.
    xml_answer: bool = False

    def url(self, name: str) -> str:
        return qattrs.queue_url(self.base_url, name, self.account)

    def arn(self, name: str) -> str:
        return qattrs.queue_arn(self.region, name, self.account)


Action = Callable[[Context, dict[str, Any]], Awaitable[dict[str, Any]]]


def string(params: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        if required:
            raise missing(name)
        return None
    if not isinstance(value, str):
        raise invalid_value(name, value, "must be a string.")
    return value


def required_string(params: dict[str, Any], name: str) -> str:
    value = string(params, name)
    assert value is not None
    return value


def integer(
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


def names(params: dict[str, Any], name: str) -> list[str]:
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid_value(name, "(not a list of strings)", "a list of names.")
    return value


def string_map(params: dict[str, Any], name: str) -> dict[str, str]:
    value = params.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise invalid_value(name, "(not a map of strings)", "a map of string to string.")
    return value


def queue(params: dict[str, Any]) -> str:
    return qattrs.name_from_url(string(params, "QueueUrl"))


def entries(params: dict[str, Any]) -> list[dict[str, Any]]:
    """A batch's Entries: 1..10 structures with distinct valid Ids."""
    found = params.get("Entries")
    if found is None or found == []:
        raise SqsError(EMPTY_BATCH, "There should be at least one entry in the request.")
    if not isinstance(found, list) or not all(isinstance(e, dict) for e in found):
        raise invalid_value("Entries", "(not a list)", "a list of entries.")
    if len(found) > MAX_BATCH:
        raise SqsError(
            TOO_MANY_ENTRIES,
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(found)}.",
        )
    seen: set[str] = set()
    for entry in found:
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
    return found


def failure(entry_id: str, error: SqsError) -> dict[str, Any]:
    return {
        "Id": entry_id,
        "SenderFault": error.kind.sender,
        "Code": error.kind.code,
        "Message": error.message,
    }


def page_token(ctx: Context, prefix: str, token: str | None) -> str | None:
    if token is None:
        return None
    try:
        return ctx.core.tokens.decode_list(token, prefix)
    except InvalidArgument:
        raise invalid_value("NextToken", token, "Invalid or expired next token.") from None
