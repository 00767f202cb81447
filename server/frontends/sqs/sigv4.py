"""AWS Signature Version 4: check a request's `Authorization: AWS4-HMAC-SHA256 ...` header.

The server rebuilds the canonical request from what it received (method, path, query, the
signed headers, the body's SHA-256), derives the signing key from the access key's secret, and
compares signatures in constant time. HMAC needs the secret itself, so the policy file holds the
secret of each access key (README: keep the file private). Requests signed in the query string
(presigned URLs) are not accepted; SDKs sign the header.

Canonical forms follow the SigV4 specification; for the query string both the specification's
re-encoded form and botocore's (the pairs as sent, sorted) are accepted, since they differ only
for unusual characters.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from multidict import CIMultiDictProxy

from .errors import (
    INVALID_CLIENT_TOKEN,
    MISSING_AUTHENTICATION,
    REQUEST_EXPIRED,
    SIGNATURE_DOES_NOT_MATCH,
    SqsError,
)

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW = 15 * 60.0  # seconds between the request's X-Amz-Date and the server's clock (AWS's)

_AUTH = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=([^,\s]+)\s*,\s*SignedHeaders=([^,\s]+)\s*,\s*Signature=([0-9a-fA-F]{64})\s*"
)


@dataclass(frozen=True)
class Authorization:
    access_key: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


def parse(header: str | None) -> Authorization | None:
    """The parts of an Authorization header; None when absent or not SigV4."""
    if not header:
        return None
    match = _AUTH.fullmatch(header.strip())
    if match is None:
        return None
    credential, signed, signature = match.groups()
    parts = credential.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request":
        return None
    return Authorization(
        parts[0], parts[1], parts[2], parts[3], tuple(signed.lower().split(";")), signature.lower()
    )


def region_of(header: str | None) -> str | None:
    """The region a client signed for (used in ARNs), whether or not signatures are checked."""
    parsed = parse(header)
    return parsed.region if parsed else None


def _remove_dot_segments(path: str) -> str:
    out: list[str] = []
    for segment in path.split("/"):
        if segment == ".":
            continue
        if segment == "..":
            if len(out) > 1:
                out.pop()
            continue
        out.append(segment)
    normalized = "/".join(out)
    if not normalized.startswith("/"):
        normalized = "/" + normalized
    if path.endswith("/") and not normalized.endswith("/"):
        normalized += "/"
    return normalized


def _canonical_queries(raw_query: str) -> list[str]:
    if not raw_query:
        return [""]
    pairs = [pair.partition("=")[::2] for pair in raw_query.split("&")]
    as_sent = "&".join(f"{k}={v}" for k, v in sorted(pairs))
    encoded = sorted(
        (quote(unquote(k), safe="-_.~"), quote(unquote(v), safe="-_.~")) for k, v in pairs
    )
    specified = "&".join(f"{k}={v}" for k, v in encoded)
    return [as_sent] if as_sent == specified else [as_sent, specified]


def _canonical_headers(headers: CIMultiDictProxy[str], names: tuple[str, ...]) -> str:
    lines = []
    for name in names:
        values = headers.getall(name, [])
        lines.append(f"{name}:{','.join(' '.join(v.split()) for v in values)}\n")
    return "".join(lines)


def _signing_key(secret: str, auth: Authorization) -> bytes:
    key = ("AWS4" + secret).encode("utf-8")
    for part in (auth.date, auth.region, auth.service, "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    return key


def _amz_date(headers: CIMultiDictProxy[str]) -> float | None:
    text = headers.get("x-amz-date")
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y%m%dT%H%M%SZ")))
    except ValueError:
        return None


def verify(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: CIMultiDictProxy[str],
    body: bytes,
    secrets_by_key: Mapping[str, str],
    now: float | None = None,
) -> str:
    """The access key id of a correctly signed request; SqsError (403 or RequestExpired) else."""
    header = headers.get("authorization")
    if not header:
        raise SqsError(MISSING_AUTHENTICATION, "Request is missing the Authorization header (SigV4).")
    auth = parse(header)
    if auth is None:
        raise SqsError(
            MISSING_AUTHENTICATION, "The Authorization header is not an AWS4-HMAC-SHA256 signature."
        )
    secret = secrets_by_key.get(auth.access_key)
    if secret is None:
        raise SqsError(
            INVALID_CLIENT_TOKEN, "The security token included in the request is invalid."
        )
    signed_at = _amz_date(headers)
    now = time.time() if now is None else now
    if signed_at is None:
        raise SqsError(SIGNATURE_DOES_NOT_MATCH, "The request has no valid X-Amz-Date header.")
    if abs(now - signed_at) > MAX_SKEW:
        raise SqsError(REQUEST_EXPIRED, "Request has expired (X-Amz-Date is more than 15 minutes off).")
    if "host" not in auth.signed_headers:
        raise SqsError(SIGNATURE_DOES_NOT_MATCH, "The Host header must be signed.")
    payload = headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
    # As botocore does: the path as sent (already percent-encoded), encoded once more.
    path = quote(_remove_dot_segments(raw_path or "/"), safe="/~")
    key = _signing_key(secret, auth)
    for query in _canonical_queries(raw_query):
        canonical = "\n".join(
            [
                method.upper(),
                path,
                query,
                _canonical_headers(headers, auth.signed_headers),
                ";".join(auth.signed_headers),
                payload,
            ]
        )
        to_sign = "\n".join(
            [
                ALGORITHM,
                headers.get("x-amz-date", ""),
                auth.scope,
                hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
            ]
        )
        expected = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected, auth.signature):
            return auth.access_key
    raise SqsError(
        SIGNATURE_DOES_NOT_MATCH,
        "The request signature we calculated does not match the signature you provided.",
    )
