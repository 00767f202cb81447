"""Shared access signatures ("Grant limited access with SAS"): account SAS and queue (service)
SAS, as `generate_account_sas` / `generate_queue_sas` make them, and stored access policies that
a queue SAS names with `si` (acl.py keeps them).

A request carries a SAS in its query (`sig` and the signed fields) and no Authorization header.
The signature is base64 HMAC-SHA256, under one of the account's keys (the URL's account), of

    account SAS   account \\n sp \\n ss \\n srt \\n st \\n se \\n sip \\n spr \\n sv \\n
                  (then ses \\n from sv 2020-12-06 on)
    queue SAS     sp \\n st \\n se \\n /queue/<account>/<queue> \\n si \\n sip \\n spr \\n sv

The key that verifies decides the principal (its grants still apply, as for SharedKey: a SAS
only narrows what its key may do). Then, in Azure's order: the time window (st .. se), the
signed IP or range (sip), the protocol (spr), the service and resource type (account SAS), and
the permission the operation needs (`ACCOUNT` and `QUEUE` below). Each failure is Azure's 403
with Azure's code; nothing runs."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from ...auth import Principal
from .errors import AzureError, Kind
from .shared_key import Keys, failed, sign

AUTHORIZATION_FAILURE = Kind("AuthorizationFailure", 403)
PERMISSION_MISMATCH = Kind("AuthorizationPermissionMismatch", 403)
SOURCE_IP_MISMATCH = Kind("AuthorizationSourceIPMismatch", 403)
PROTOCOL_MISMATCH = Kind("AuthorizationProtocolMismatch", 403)
SERVICE_MISMATCH = Kind("AuthorizationServiceMismatch", 403)
RESOURCE_TYPE_MISMATCH = Kind("AuthorizationResourceTypeMismatch", 403)

OLDEST_VERSION = "2015-04-05"  # the first signed version with sip and spr
ENCRYPTION_SCOPE_VERSION = "2020-12-06"  # account SAS signs ses from this version on
MAX_FIELD = 512  # characters of one signed field: far above any real one

# operation -> (resource type, permissions of which one suffices); "" : no SAS may do it.
ACCOUNT: dict[str, tuple[str, str]] = {
    "ListQueues": ("s", "l"),
    "GetServiceProperties": ("s", "r"),
    "SetServiceProperties": ("s", "w"),
    "GetServiceStats": ("s", "r"),
    "CreateQueue": ("c", "cw"),
    "DeleteQueue": ("c", "d"),
    "GetQueueMetadata": ("c", "r"),
    "SetQueueMetadata": ("c", "w"),
    "GetQueueAcl": ("c", ""),  # the account owner's only (SharedKey)
    "SetQueueAcl": ("c", ""),
    "ClearMessages": ("c", "d"),
    "PutMessage": ("o", "a"),
    "GetMessages": ("o", "p"),
    "PeekMessages": ("o", "r"),
    "DeleteMessage": ("o", "p"),
    "UpdateMessage": ("o", "u"),
}
# A queue SAS: its own queue's metadata and messages.
QUEUE: dict[str, str] = {
    "GetQueueMetadata": "r",
    "PeekMessages": "r",
    "PutMessage": "a",
    "UpdateMessage": "u",
    "GetMessages": "p",
    "DeleteMessage": "p",
}


@dataclass(frozen=True)
class AccessPolicy:
    """A stored access policy's fields (each may be empty: the SAS then gives it)."""

    start: str = ""
    expiry: str = ""
    permission: str = ""


def is_sas(query: Mapping[str, str], headers: Mapping[str, str]) -> bool:
    return "sig" in query and "Authorization" not in headers


def _error(kind: Kind, message: str) -> AzureError:
    return AzureError(kind, message)


def parse_time(text: str, field: str) -> float:
    """An ISO 8601 UTC time as Azure takes them: a date, or a date and time (minutes, seconds,
    up to 7 digits of fractions) with Z."""
    value = text.strip()
    try:
        if "T" not in value:
            parsed = datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
        else:
            if not value.endswith("Z"):
                raise ValueError(value)
            body = value[:-1]
            if "." in body:
                body, _, fraction = body.partition(".")
                if not (fraction.isdigit() and len(fraction) <= 7):
                    raise ValueError(value)
                body += "." + fraction[:6].ljust(6, "0")
            parsed = datetime.fromisoformat(body).replace(tzinfo=UTC)
    except ValueError:
        raise failed(f"{field} is not an ISO 8601 UTC time: {text[:64]!r}.") from None
    return parsed.timestamp()


def _rfc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")


def string_to_sign(query: Mapping[str, str], account: str, queue: str | None) -> str:
    """The string the client signed: an account SAS when `ss` is given, else a queue SAS."""

    def get(name: str) -> str:
        return query.get(name, "")

    version = get("sv")
    if "ss" in query:
        text = "\n".join(
            [account, get("sp"), get("ss"), get("srt"), get("st"), get("se"), get("sip")]
            + [get("spr"), version, ""]
        )
        if version >= ENCRYPTION_SCOPE_VERSION:
            text += get("ses") + "\n"
        return text
    resource = f"/queue/{account}/{queue or ''}"
    fields = [get("sp"), get("st"), get("se"), resource, get("si"), get("sip"), get("spr")]
    return "\n".join(fields + [version])


def verify_signature(
    query: Mapping[str, str], account: str, queue: str | None, keys: Keys
) -> Principal | None:
    """The principal of the key that signed this SAS; AuthenticationFailed otherwise."""
    for name in ("sig", "sv", "sp", "st", "se", "si", "sip", "spr", "ss", "srt"):
        if len(query.get(name, "")) > MAX_FIELD:
            raise failed(f"The signed field {name} is too long.")
    version = query.get("sv", "")
    if not (len(version) == 10 and version >= OLDEST_VERSION):
        raise failed(f"The signed version (sv) must be {OLDEST_VERSION} or later.")
    text = string_to_sign(query, account, queue)
    given = query["sig"].encode("ascii", "replace")
    found: tuple[Principal | None] | None = None
    for key, principal in keys.get(account, ()):  # every key compared: no early exit
        if hmac.compare_digest(sign(key, text).encode(), given):
            found = (principal,)
    if found is None:
        shown = text.replace("\n", "\\n")
        raise failed(f"Signature did not match. String to sign used was {shown}")
    return found[0]


def check(
    query: Mapping[str, str],
    *,
    operation: str,
    policy: AccessPolicy | None,
    now: float,
    remote: str,
    scheme: str,
) -> None:
    """The checks after the signature (module docstring), with a queue SAS's stored access
    policy (`si`: None when the SAS names none)."""
    permissions, start, expiry = query.get("sp", ""), query.get("st", ""), query.get("se", "")
    if policy is not None:
        if (
            (start and policy.start)
            or (expiry and policy.expiry)
            or (permissions and policy.permission)
        ):
            raise failed(
                "Access policy fields can be associated with signature or SAS identifier but "
                "not both."
            )
        permissions = permissions or policy.permission
        start, expiry = start or policy.start, expiry or policy.expiry
    if not expiry:
        raise failed("Signed expiry (se) is required, in the SAS or its stored access policy.")
    ends = parse_time(expiry, "Signed expiry (se)")
    begins = parse_time(start, "Signed start (st)") if start else None
    if (begins is not None and now < begins) or now >= ends:
        shown = _rfc(begins) if begins is not None else ""
        raise failed(
            f"Signature not valid in the specified time frame: Start [{shown}] - Expiry "
            f"[{_rfc(ends)}] - Current [{_rfc(now)}]"
        )
    _check_ip(query.get("sip", ""), remote)
    protocols = {p.strip() for p in query.get("spr", "https,http").split(",")}
    if scheme not in protocols:
        raise _error(
            PROTOCOL_MISMATCH,
            "This request is not authorized to perform this operation using this protocol.",
        )
    if "ss" in query:
        if "q" not in query["ss"]:
            raise _error(
                SERVICE_MISMATCH,
                "This request is not authorized to perform this operation using this service.",
            )
        resource_type, needed = ACCOUNT.get(operation, ("", ""))
        if resource_type not in query.get("srt", "") or not resource_type:
            raise _error(
                RESOURCE_TYPE_MISMATCH,
                "This request is not authorized to perform this operation using this resource "
                "type.",
            )
    else:
        needed = QUEUE.get(operation, "")
    if not any(p in permissions for p in needed):
        raise _error(
            PERMISSION_MISMATCH,
            "This request is not authorized to perform this operation using this permission.",
        )


def _check_ip(signed: str, remote: str) -> None:
    if not signed:
        return
    mismatch = _error(
        SOURCE_IP_MISMATCH,
        f"This request is not authorized to perform this operation using this source IP {remote}.",
    )
    try:
        address = ipaddress.ip_address(remote)
        low_text, _, high_text = signed.partition("-")
        low = ipaddress.ip_address(low_text.strip())
        high = ipaddress.ip_address(high_text.strip()) if high_text else low
    except ValueError:
        raise mismatch from None
    if address.version != low.version or address.version != high.version:
        raise mismatch
    if not int(low) <= int(address) <= int(high):
        raise mismatch
