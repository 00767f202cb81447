"""Receipts: opaque strings that name one delivery of one message and cannot be forged.

A receipt carries the message's internal key and its receipt sequence number (bumped by every
delivery, update and move), authenticated with HMAC-SHA256 under a key that the store keeps
(so receipts survive a restart of the server, and every replica of one store accepts them). The
MAC also covers the queue's uid, a random number drawn when the queue is created: a receipt used
on another queue, or on a queue deleted and created again, does not verify.

Layout before base64url: version (1 byte) | key (8) | receipt_seq (4) | mac (16).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
import struct

_VERSION = 1
_BODY = struct.Struct(">BQI")
_UID = struct.Struct(">Q")
_MAC_BYTES = 16
_RAW_BYTES = _BODY.size + _MAC_BYTES
_MAX_TEXT = 64  # anything longer cannot be ours; refuse before decoding


def new_signing_key() -> bytes:
    return secrets.token_bytes(32)


def new_queue_uid() -> int:
    return secrets.randbits(63)


class ReceiptCodec:
    def __init__(self, signing_key: bytes) -> None:
        if len(signing_key) < 16:
            raise ValueError("receipt signing key too short")
        self._key = signing_key

    def _mac(self, body: bytes, queue_uid: int) -> bytes:
        return hmac.digest(self._key, body + _UID.pack(queue_uid), "sha256")[:_MAC_BYTES]

    def encode(self, queue_uid: int, message_key: int, receipt_seq: int) -> str:
        body = _BODY.pack(_VERSION, message_key, receipt_seq)
        raw = body + self._mac(body, queue_uid)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    def decode(self, receipt: str, queue_uid: int) -> tuple[int, int] | None:
        """(message_key, receipt_seq), or None when the receipt is not a valid one of this queue."""
        if not isinstance(receipt, str) or not receipt or len(receipt) > _MAX_TEXT:
            return None
        try:
            raw = base64.urlsafe_b64decode(receipt + "=" * (-len(receipt) % 4))
        except (binascii.Error, ValueError):
            return None
        if len(raw) != _RAW_BYTES:
            return None
        # Base64 leaves spare low bits in the last character: four strings decode to the same
        # bytes. Only the one this codec writes is a receipt it issued.
        if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != receipt:
            return None
        body, mac = raw[: _BODY.size], raw[_BODY.size :]
        if not hmac.compare_digest(mac, self._mac(body, queue_uid)):
            return None
        version, message_key, receipt_seq = _BODY.unpack(body)
        if version != _VERSION:
            return None
        return message_key, receipt_seq
