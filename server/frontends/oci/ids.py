"""OCI's identifiers and times over leaseq's.

- A queue's OCID is `ocid1.queue.oc1.leaseq.<queue name>`: the name itself (leaseq's names are
  [A-Za-z0-9_-]{1,80}, safe in a URL path), so a queue made through gRPC, SQS or Azure has an OCID
  without any table, and a queue deleted and made again under the same name has the same OCID.
- OCI message ids are int64 numbers; leaseq's are 128-bit. The OCI id is 63 bits of a BLAKE2b hash
  of leaseq's id: the same message always shows the same number (PutMessages, GetMessages,
  UpdateMessages), and two messages share one with a probability of about n²/2⁶⁴.
- An OCI receipt is `<leaseq receipt>.<OCI message id>` (the receipt's base64url alphabet has no
  "." and no "/", so it sits in the URL path as OCI puts it), so UpdateMessages can answer the id.
- Times are RFC 3339 in UTC with milliseconds, as OCI writes them.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from .errors import OciError, invalid, not_found

QUEUE_OCID_PREFIX = "ocid1.queue.oc1.leaseq."
WORK_REQUEST_OCID_PREFIX = "ocid1.queueworkrequest.oc1.leaseq."
MAX_RECEIPT_CHARS = 512  # far above any receipt leaseq issues


def queue_ocid(name: str) -> str:
    return QUEUE_OCID_PREFIX + name


def queue_name(ocid: str) -> str:
    """The leaseq queue an OCID names; 404 for anything that is not one of ours."""
    if not ocid.startswith(QUEUE_OCID_PREFIX) or len(ocid) > len(QUEUE_OCID_PREFIX) + 80:
        raise not_found("queue")
    return ocid[len(QUEUE_OCID_PREFIX) :]


def message_number(message_id: str) -> int:
    digest = hashlib.blake2b(message_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def receipt(leaseq_receipt: str, number: int) -> str:
    return f"{leaseq_receipt}.{number}"


def split_receipt(text: object, field: str = "receipt") -> tuple[str, int]:
    """(leaseq receipt, OCI message id) of an OCI receipt."""
    if not isinstance(text, str) or not text:
        raise OciError(invalid(f"{field} is required.").kind, f"{field} is required.")
    inner, dot, number = text.rpartition(".")
    if (
        len(text) > MAX_RECEIPT_CHARS
        or not dot
        or not inner
        or not number.isdigit()
        or len(number) > 19
    ):
        raise invalid(f"{field} is not a receipt this server issued.")
    return inner, int(number)


def rfc3339(seconds: float) -> str:
    return (
        datetime.fromtimestamp(seconds, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
