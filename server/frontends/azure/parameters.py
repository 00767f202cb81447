"""Query parameters of the Azure operations, checked with Azure's error shapes.

Azure's ranges where leaseq's are as wide (leases of up to 7 days); where leaseq's are narrower
(a message lives at most its queue's retention, 14 days at most), the bound given in
OutOfRangeQueryParameterValue is leaseq's: the client learns the range that holds here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ...domain import limits
from .errors import invalid_query, out_of_range

_INTEGER = re.compile(r"-?\d{1,19}")
AZURE_MAX_VISIBILITY = 7 * 86400  # Azure's bound of every visibilitytimeout
MAX_VISIBILITY = int(min(AZURE_MAX_VISIBILITY, limits.MAX_VISIBILITY))
MAX_MESSAGES = 32  # numofmessages of Get and Peek Messages
MAX_LIST_RESULTS = 5000
DEFAULT_VISIBILITY = 30  # Get Messages without visibilitytimeout (Azure's default)
DEFAULT_TTL = 7 * 86400  # Put Message without messagettl (Azure's default)
NEVER = -1  # messagettl: the message never expires (leaseq's ttl NEVER_EXPIRES)


def integer(
    query: Mapping[str, str], name: str, low: int, high: int, default: int | None = None
) -> int | None:
    """The integer parameter `name` within low..high, or default when absent; 400
    InvalidQueryParameterValue when not an integer, OutOfRangeQueryParameterValue outside."""
    text = query.get(name)
    if text is None:
        return default
    if not _INTEGER.fullmatch(text):
        raise invalid_query(name, text[:100], "The value is not an integer.")
    value = int(text)
    if not low <= value <= high:
        raise out_of_range(name, text, low, high)
    return value


def message_ttl(query: Mapping[str, str], retention: float) -> float:
    """messagettl in seconds: absent means Azure's 7 days (at most the queue's retention), -1
    never expires (limits.NEVER_EXPIRES); otherwise 1 .. the queue's retention."""
    high = int(retention)
    text = query.get("messagettl")
    if text == str(NEVER):
        return limits.NEVER_EXPIRES
    if text is not None and _INTEGER.fullmatch(text) and int(text) < limits.MIN_TTL:
        raise invalid_query(
            "messagettl",
            text,
            "Value must be greater than or equal to 1, or -1 to indicate an infinite TTL.",
        )
    value = integer(query, "messagettl", int(limits.MIN_TTL), high)
    if value is None:
        return float(min(DEFAULT_TTL, high))
    return float(value)


def check_timeout(query: Mapping[str, str]) -> None:
    """Every operation's `timeout` (a server-side limit in seconds, which leaseq does not need:
    its Azure operations never wait) must still be an integer; other unknown parameters are
    ignored, as Azure does."""
    integer(query, "timeout", 0, 2**31 - 1)


def single(raw: Mapping[str, list[str]]) -> dict[str, str]:
    """Query parameters by name; a parameter given twice is refused (Azure would join them)."""
    out: dict[str, str] = {}
    for name, values in raw.items():
        if len(values) > 1:
            raise invalid_query(
                name[:100], ",".join(values)[:100], "The parameter is given more than once."
            )
        out[name] = values[0]
    return out
