"""SharedKey and SharedKeyLite verification (Azure Storage's "Authorize with Shared Key").

`Authorization: SharedKey <account>:<signature>` where signature is base64 of HMAC-SHA256, under
the account's base64 key, of the string to sign:

    SharedKey       VERB \n Content-Encoding \n Content-Language \n Content-Length (empty for 0)
                    \n Content-MD5 \n Content-Type \n Date \n If-Modified-Since \n If-Match \n
                    If-None-Match \n If-Unmodified-Since \n Range \n CanonicalizedHeaders
                    CanonicalizedResource
    SharedKeyLite   VERB \n Content-MD5 \n Content-Type \n Date \n CanonicalizedHeaders
                    CanonicalizedResource (with only ?comp=...)

CanonicalizedHeaders: every x-ms-* header, lower-cased, sorted, "name:value\n".
CanonicalizedResource: "/" + account + the request's (encoded) path, then for SharedKey each
query parameter as "\nname:value" (names lower-cased and sorted, values decoded; repeated names
joined with commas). With a path-style URL the account appears twice ("/devstoreaccount1/
devstoreaccount1/myqueue"), as the SDK and Azurite sign it.

The request's time (x-ms-date, else Date) must be within MAX_SKEW of the server's clock, so a
captured request cannot be replayed later. Keys: account name -> [(key bytes, principal)], from
the policy's `azure_keys` (auth.py), or the development account alone when no policy is given.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from urllib.parse import unquote

from ...auth import Principal
from .errors import AUTHENTICATION_FAILED, AzureError
from .times import parse_rfc1123

DEV_ACCOUNT = "devstoreaccount1"
# Azurite's (and the Azure Storage Emulator's) published key: it protects nothing, which is why
# leaseq accepts it only when no policy is configured (and `serve` listens on loopback unless
# told --allow-unauthenticated).
DEV_KEY = base64.b64decode(
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
MAX_SKEW = 15 * 60.0  # seconds between the request's date and the server's clock (Azure's)

_SIGNED_HEADERS = (
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
)
_LITE_HEADERS = ("content-md5", "content-type", "date")

Keys = Mapping[str, Sequence[tuple[bytes, Principal | None]]]


def failed(detail: str) -> AzureError:
    return AzureError(
        AUTHENTICATION_FAILED,
        "Server failed to authenticate the request. Make sure the value of Authorization header "
        "is formed correctly including the signature.",
        {"AuthenticationErrorDetail": detail},
    )


def _canonical_headers(headers: Mapping[str, str]) -> str:
    pairs = sorted(
        (name.lower(), value) for name, value in headers.items() if name.lower().startswith("x-ms-")
    )
    return "".join(f"{name}:{value}\n" for name, value in pairs)


def _query_pairs(raw_query: str) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for part in raw_query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        grouped.setdefault(unquote(name).lower(), []).append(unquote(value))
    return grouped


def string_to_sign(
    scheme: str,
    account: str,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
) -> str:
    """The string a client signs for this request (scheme "SharedKey" or "SharedKeyLite")."""
    resource = f"/{account}{raw_path}"
    query = _query_pairs(raw_query)
    if scheme == "SharedKeyLite":
        lines = [method] + [headers.get(h, "") for h in _LITE_HEADERS]
        if "comp" in query:
            resource += "?comp=" + ",".join(query["comp"])
        return "\n".join(lines) + "\n" + _canonical_headers(headers) + resource
    values = {h: headers.get(h, "") for h in _SIGNED_HEADERS}
    if values["content-length"] == "0":
        values["content-length"] = ""
    lines = [method] + [values[h] for h in _SIGNED_HEADERS]
    for name in sorted(query):
        resource += f"\n{name}:{','.join(sorted(query[name]))}"
    return "\n".join(lines) + "\n" + _canonical_headers(headers) + resource


def sign(key: bytes, text: str) -> str:
    return base64.b64encode(hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()).decode()


def verify(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
    keys: Keys,
    now: float,
) -> tuple[str, Principal | None]:
    """(account, principal) of a correctly signed, fresh request; AzureError
    AuthenticationFailed (403) otherwise."""
    authorization = headers.get("Authorization")
    if not authorization:
        raise failed("The request carries no Authorization header (SharedKey or SharedKeyLite).")
    scheme, _, credential = authorization.strip().partition(" ")
    account, _, signature = credential.strip().rpartition(":")
    if scheme not in ("SharedKey", "SharedKeyLite") or not account or not signature:
        raise failed("The Authorization header is not 'SharedKey <account>:<signature>'.")
    date_text = headers.get("x-ms-date") or headers.get("Date")
    if not date_text:
        raise failed("Request date header not specified (x-ms-date or Date).")
    date = parse_rfc1123(date_text)
    if date is None:
        raise failed(
            "The request date is not an RFC 1123 date (e.g. 'Tue, 24 Nov 2026 23:50:00 GMT')."
        )
    if abs(date - now) > MAX_SKEW:
        raise failed(
            f"Request date header too old or too new: it must be within {int(MAX_SKEW // 60)} "
            "minutes of the server's time."
        )
    candidates = keys.get(account, ())
    if candidates:
        # Sign with the headers as received: header names are case-insensitive in aiohttp.
        text = string_to_sign(scheme, account, method, raw_path, raw_query, headers)
        given = signature.encode("ascii", "replace")
        found: tuple[str, Principal | None] | None = None
        for key, principal in candidates:  # every key compared: no early exit
            if hmac.compare_digest(sign(key, text).encode(), given):
                found = (account, principal)
        if found is not None:
            return found
    raise failed(
        "The MAC signature found in the HTTP request is not the same as any computed signature "
        "(or the account is unknown)."
    )
