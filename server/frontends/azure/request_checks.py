"""What Azure checks of a request before its operation runs: header values that are text, and a
body that matches the Content-MD5 its client computed.

Header values: aiohttp reads header bytes as UTF-8 and keeps bytes that are not
(surrogateescape), so such a value is a str that is not Unicode text; it could be neither signed
(SharedKey signs x-ms-* headers as UTF-8) nor stored (queue metadata). It is InvalidHeaderValue
(400) before anything else, by the rule every front end applies to text (domain.rules.valid_text).

Content-MD5 (the SDK sends it with validate_content=True): base64 of the body's 16-byte MD5;
not 16 bytes of base64 is InvalidMd5, another body's is Md5Mismatch, both 400 with Azure's
messages, and the operation does not run."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping

from ...domain import rules
from ...errors import InvalidArgument
from .errors import INVALID_HEADER, INVALID_MD5, MD5_MISMATCH, AzureError


def check_headers(headers: Mapping[str, str]) -> None:
    for name, value in headers.items():
        if value.isascii():
            continue
        try:
            rules.valid_text(value, name)
        except InvalidArgument:
            raise AzureError(
                INVALID_HEADER,
                "The value for one of the HTTP headers is not in the correct format.",
                {"HeaderName": name[:100], "Reason": "The value is not UTF-8 text."},
            ) from None


def check_content_md5(headers: Mapping[str, str], body: bytes) -> None:
    given = headers.get("Content-MD5")
    if given is None:
        return
    try:
        digest = base64.b64decode(given, validate=True)
    except (binascii.Error, ValueError):
        digest = b""
    if len(digest) != 16:
        raise AzureError(
            INVALID_MD5,
            "The MD5 value specified in the request is invalid. The MD5 value must be 128 bits "
            "and Base64-encoded.",
            {"HeaderName": "Content-MD5", "HeaderValue": given[:100]},
        )
    computed = hashlib.md5(body, usedforsecurity=False).digest()
    if not hmac.compare_digest(digest, computed):
        raise AzureError(
            MD5_MISMATCH,
            "The MD5 value specified in the request did not match with the MD5 value calculated "
            "by the server.",
            {
                "UserSpecifiedMd5": given,
                "ServerCalculatedMd5": base64.b64encode(computed).decode("ascii"),
            },
        )
