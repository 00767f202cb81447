"""OCI request signatures: the draft-cavage HTTP signature scheme OCI's SDKs and CLI sign with.

    Authorization: Signature algorithm="rsa-sha256",headers="date (request-target) host",
                   keyId="<tenancy OCID>/<user OCID>/<key fingerprint>",signature="<base64>",version="1"

The signing string is one "name: value" line per listed header, "(request-target)" being
"<method in lower case> <path and query as sent>". GET, HEAD and DELETE sign at least
`date (request-target) host`; PUT, POST and PATCH also `content-length content-type
x-content-sha256`, the last being the base64 SHA-256 of the body, which `check_body` compares
with the body read. The signature is RSASSA-PKCS1-v1_5 over SHA-256 (`cryptography`), verified
with the API key's public key from the policy's `oci_keys`. A Date more than five minutes from the
server's clock is refused, as OCI does (a captured request cannot be replayed later).

Without a policy (a loopback server, as the Azure development account), any well-formed
signature of a request is taken: the key id, the listed headers, the date and the body's hash are
checked, the RSA signature is not (there is no key to check it with).
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from ...auth import Principal
from .errors import NOT_AUTHENTICATED, OciError

MAX_SKEW = 300.0  # seconds between the request's Date and the server's clock
MAX_AUTHORIZATION = 8192  # characters: a 4096-bit signature and long OCIDs fit many times
_PARAMETER = re.compile(r'\s*([a-zA-Z]+)="([^"]*)"\s*(?:,|$)')
_ALWAYS = ("date", "(request-target)", "host")
_BODY = ("content-length", "content-type", "x-content-sha256")
_WITH_BODY = frozenset({"PUT", "POST", "PATCH"})

Keys = Mapping[str, tuple[Any, Principal]]
"""key id -> (RSA public key, principal): the policy's oci_keys."""


def _refuse(reason: str) -> OciError:
    return OciError(
        NOT_AUTHENTICATED,
        f"The required information to complete authentication was not provided or was incorrect: {reason}",
    )


def _parameters(header: str) -> dict[str, str]:
    if not header.startswith("Signature "):
        raise _refuse("the Authorization header is not an OCI request signature")
    text = header[len("Signature ") :]
    found: dict[str, str] = {}
    position = 0
    while position < len(text):
        match = _PARAMETER.match(text, position)
        if match is None or match.end() == position:
            raise _refuse("the Authorization header is malformed")
        found[match.group(1)] = match.group(2)
        position = match.end()
    return found


def verify(
    method: str,
    path_and_query: str,
    headers: Mapping[str, str],
    keys: Keys | None,
    now: float,
) -> Principal | None:
    """The principal the request is signed as (None: no policy, any well-formed signature);
    OciError NotAuthenticated (401) otherwise. The body's hash is checked afterwards (check_body)."""
    header = headers.get("Authorization", "")
    if not header:
        raise _refuse("no Authorization header")
    if len(header) > MAX_AUTHORIZATION:
        raise _refuse("the Authorization header is too long")
    fields = _parameters(header)
    for name in ("keyId", "signature", "headers"):
        if not fields.get(name):
            raise _refuse(f"the signature has no {name}")
    if fields.get("algorithm", "rsa-sha256") != "rsa-sha256":
        raise _refuse("the only signature algorithm is rsa-sha256")
    if fields.get("version", "1") != "1":
        raise _refuse("the only signature version is 1")
    signed = fields["headers"].lower().split()
    required = _ALWAYS + (_BODY if method in _WITH_BODY else ())
    missing = [
        name
        for name in required
        if name not in signed and not (name == "date" and "x-date" in signed)
    ]
    if missing:
        raise _refuse(f"the signature does not cover {', '.join(missing)}")
    key_id = fields["keyId"]
    if key_id.count("/") != 2 or not all(key_id.split("/")):
        raise _refuse("keyId is not tenancy/user/fingerprint")
    date = headers.get("x-date") or headers.get("date") or ""
    parsed = email.utils.parsedate_tz(date)
    if parsed is None:
        raise _refuse("the date header is missing or not an HTTP date")
    if abs(email.utils.mktime_tz(parsed) - now) > MAX_SKEW:
        raise _refuse("the date header is more than 5 minutes from the server's clock")
    lines = []
    for name in signed:
        if name == "(request-target)":
            lines.append(f"(request-target): {method.lower()} {path_and_query}")
        elif name in headers:
            lines.append(f"{name}: {headers[name]}")
        else:
            raise _refuse(f"the signed header {name[:40]} is not in the request")
    try:
        signature = base64.b64decode(fields["signature"], validate=True)
    except (binascii.Error, ValueError):
        raise _refuse("the signature is not base64") from None
    if keys is None:
        return None
    found = keys.get(key_id)
    if found is None:
        raise _refuse("the API key is not known")
    public_key, principal = found
    try:
        public_key.verify(
            signature,
            "\n".join(lines).encode("utf-8", "surrogateescape"),
            padding.PKCS1v15(),
            hashes.SHA256(),
        )
    except (InvalidSignature, ValueError):
        raise _refuse("the signature does not verify") from None
    return principal


def check_body(method: str, headers: Mapping[str, str], body: bytes) -> None:
    """A body-signing request's x-content-sha256 and content-length are those of the body read."""
    if method not in _WITH_BODY:
        return
    expected = base64.b64encode(hashlib.sha256(body).digest()).decode()
    if not hmac.compare_digest(headers.get("x-content-sha256", ""), expected):
        raise _refuse("x-content-sha256 is not the SHA-256 of the body")
    if headers.get("content-length", "") != str(len(body)):
        raise _refuse("content-length is not the length of the body")


def fingerprint(public_key: rsa.RSAPublicKey) -> str:
    """OCI's key fingerprint: the MD5 of the DER public key, as colon-separated hex."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    digest = hashlib.md5(der, usedforsecurity=False).hexdigest()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))
