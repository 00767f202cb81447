"""The checksums SQS answers with, which SDKs compare with their own (AWS's documented algorithm).

MD5OfMessageBody: the hex MD5 of the body's UTF-8 bytes.
MD5OfMessageAttributes: the hex MD5 over the attributes sorted by name, each as
    len(name) name len(data_type) data_type transport value_length value
with 4-byte big-endian lengths, transport 1 for String and Number types (value in UTF-8) and 2
for Binary types (the raw bytes).
"""

from __future__ import annotations

import hashlib
import struct

from .message_attributes import AttributeValue

_STRING, _BINARY = 1, 2


def of_body(body: str) -> str:
    return hashlib.md5(body.encode("utf-8"), usedforsecurity=False).hexdigest()


def _field(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def of_attributes(attributes: dict[str, AttributeValue]) -> str | None:
    """None when there are no attributes (SQS leaves the field out then)."""
    if not attributes:
        return None
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        value = attributes[name]
        digest.update(_field(name.encode("utf-8")))
        digest.update(_field(value.data_type.encode("utf-8")))
        if value.binary is not None:
            digest.update(bytes([_BINARY]) + _field(value.binary))
        else:
            digest.update(bytes([_STRING]) + _field((value.string or "").encode("utf-8")))
    return digest.hexdigest()
