"""AWS Signature Version 4: check a request's `Authorization: AWS4-HMAC-SHA256 ...` header.

The server rebuilds the canonical request from what it received (method, path, query, the
signed headers, the body's SHA-256), derives the signing key from the access key's secret, and
compares signatures in constant time. HMAC needs the secret itself, so the policy file holds the
secret of each access key (README: keep the file private). Requests signed in the query string
(presigned URLs) are not accepted; SDKs sign the header.

Canonical forms follow the SigV4 specification; for the query string both the specification's
re-encoded form and botocore's (the pairs as sent, sorted) are accepted, since they differ only
for unusual characters. The re-encoded form decodes '+' as a space, as the form parser does, so
two query strings that canonicalise alike also parse alike ('a+b' and 'a%20b', never 'a%2Bb').

What a signature binds, as SQS checks it:
- the body: the canonical request always carries the SHA-256 of the body received, never the
  client's `x-amz-content-sha256`; a request that sends that header with another value is
  refused (SQS payloads are always signed: UNSIGNED-PAYLOAD is S3's);
- the credential scope: service `sqs` (or `sts`, for GetCallerIdentity only: app.py), terminator `aws4_request`, the day of X-Amz-Date (so a
  derived day key is good for that day only), a well-formed region (any region is accepted:
  the ARNs answered name the one signed for);
- the Host header and, on the JSON protocol, X-Amz-Target (it names the action), which must be
  among the signed headers.

Errors (each as AWS words it): no Authorization header, MissingAuthenticationToken; one that
is not a complete SigV4 header, IncompleteSignature (400); an unknown key, InvalidClientTokenId;
a wrong scope, body hash or signature, SignatureDoesNotMatch (JSON `__type`
InvalidSignatureException, as AWS's JSON services answer); X-Amz-Date over 15 minutes off,
RequestExpired.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote_plus

from multidict import CIMultiDictProxy

from .errors import (
    INCOMPLETE_SIGNATURE,
    INVALID_CLIENT_TOKEN,
    MISSING_AUTHENTICATION,
    REQUEST_EXPIRED,
    SIGNATURE_DOES_NOT_MATCH,
    SqsError,
)

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "sqs"
STS = "sts"  # sts:GetCallerIdentity is answered on the same endpoint (identity.py)
MAX_SKEW = 15 * 60.0  # seconds between the request's X-Amz-Date and the server's clock (AWS's)
_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")  # us-east-1, eu-central-2, local names

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


def _check_scope(auth: Authorization, amz_date: str) -> None:
    """The credential scope names this service, the request's day and a region (module
    docstring); SqsError otherwise, in AWS's words."""
    if auth.service not in (SERVICE, STS):
        raise SqsError(
            SIGNATURE_DOES_NOT_MATCH,
            f"Credential should be scoped to correct service: '{SERVICE}'.",
        )
    if auth.date != amz_date[:8]:
        raise SqsError(
            SIGNATURE_DOES_NOT_MATCH,
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date "
            f"from HTTP: '{auth.date[:16]}' != '{amz_date[:8]}', from '{amz_date}'.",
        )
    if not _REGION.fullmatch(auth.region):
        raise SqsError(SIGNATURE_DOES_NOT_MATCH, "Credential should be scoped to a valid region.")


def _payload_hash(headers: CIMultiDictProxy[str], body: bytes) -> str:
    """The SHA-256 of the body received; SqsError when the client claims another one."""
    computed = hashlib.sha256(body).hexdigest()
    claimed = headers.get("x-amz-content-sha256")
    if claimed is not None and claimed.strip().lower() != computed:
        raise SqsError(
            SIGNATURE_DOES_NOT_MATCH,
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        )
    return computed


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
    # unquote_plus: '+' is a space to the form parser (protocol_query), so it must be one here.
    encoded = sorted(
        (quote(unquote_plus(k), safe="-_.~"), quote(unquote_plus(v), safe="-_.~")) for k, v in pairs
    )
    specified = "&".join(f"{k}={v}" for k, v in encoded)
    return [as_sent] if as_sent == specified else [as_sent, specified]


def _wire_text(text: str) -> bytes:
    """Text as the client sent it: aiohttp hands undecodable header bytes over as surrogate
    escapes, and the client signed those bytes."""
    return text.encode("utf-8", "surrogateescape")


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


def service_of(header: str | None) -> str:
    """The service a request's Authorization is scoped to ("sqs" when unsigned)."""
    auth = parse(header)
    return auth.service if auth is not None else SERVICE


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
        raise SqsError(
            MISSING_AUTHENTICATION, "Request is missing the Authorization header (SigV4)."
        )
    auth = parse(header)
    if auth is None:
        raise SqsError(
            INCOMPLETE_SIGNATURE,
            "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' "
            f"parameters of the {ALGORITHM} algorithm.",
        )
    signed_at = _amz_date(headers)
    if signed_at is None:
        raise SqsError(
            INCOMPLETE_SIGNATURE,
            "Authorization header requires existence of a valid 'X-Amz-Date' header "
            "(YYYYMMDD'T'HHMMSS'Z').",
        )
    amz_date = headers.get("x-amz-date", "")
    _check_scope(auth, amz_date)
    for name in ("host", "x-amz-target"):
        if name not in auth.signed_headers and (name == "host" or name in headers):
            raise SqsError(
                INCOMPLETE_SIGNATURE, f"'{name}' must be a 'SignedHeader' in the AWS Authorization."
            )
    secret = secrets_by_key.get(auth.access_key)
    if secret is None:
        raise SqsError(
            INVALID_CLIENT_TOKEN, "The security token included in the request is invalid."
        )
    now = time.time() if now is None else now
    if abs(now - signed_at) > MAX_SKEW:
        raise SqsError(
            REQUEST_EXPIRED, "Request has expired (X-Amz-Date is more than 15 minutes off)."
        )
    payload = _payload_hash(headers, body)
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
            [ALGORITHM, amz_date, auth.scope, hashlib.sha256(_wire_text(canonical)).hexdigest()]
        )
        expected = hmac.new(key, _wire_text(to_sign), hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected, auth.signature):
            return auth.access_key
    raise SqsError(
        SIGNATURE_DOES_NOT_MATCH,
        "The request signature we calculated does not match the signature you provided.",
    )
