"""Receipts: opaque strings that name one delivery of one message and cannot be forged.

A receipt carries the message's internal key and its receipt sequence number (bumped by every
delivery, update and move), authenticated with a MAC under a key that the store keeps (so
receipts survive a restart of the server, and every replica of one store accepts them). The MAC
also covers the queue's uid, a random number drawn when the queue is created: a receipt used on
another queue, or on a queue deleted and created again, does not verify.

Layout before base64url (unpadded): version (1 byte) | key (8) | receipt_seq (4) | mac (16).

Version 2 (written now) uses keyed BLAKE2b, BLAKE2's own MAC mode: a receipt is made on every
delivery and checked on every ack, and keyed BLAKE2b costs a third of HMAC-SHA256 here, which
shows in the store's time per message (docs/performance.md, "Figures behind the code"). Version 1 (HMAC-SHA256, written by earlier releases) still verifies, so receipts held
by consumers across an upgrade stay valid until their messages are delivered again.

`encode_many` / `decode_many` do a whole batch (a receive's deliveries, an ack's receipts) with the
same results as one call per receipt, at about half the cost: the key is set up once
(a copy of a keyed BLAKE2b state skips re-keying, one compression per MAC less) and one base64
call codes the whole batch, each 29-byte receipt padded to 30 bytes = 40 characters, of which
the receipt is the first 39 (the pad byte is 0, so the 39th character is the same as unpadded).
When leaseq._native's C extension is built, both run there (keyed BLAKE2b and base64url in C,
byte-identical: tests/service/test_native_encoding.py), at about a third of the cost again.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import secrets
import struct
from collections.abc import Iterable, Sequence

from leaseq._native import speedups

_V1_HMAC_SHA256 = 1
_V2_BLAKE2B = 2
_BODY = struct.Struct(">BQI")
_UID = struct.Struct(">Q")
_MAC_BYTES = 16
_RAW_BYTES = _BODY.size + _MAC_BYTES  # 29 bytes: 39 base64 characters, 1 of padding dropped
_TEXT_CHARS = 39
_PAD = b"\0"  # encode_many / decode_many: 29 bytes + 1 = 30 bytes = 40 base64 characters
_PADDED_BYTES = _RAW_BYTES + 1
_PADDED_CHARS = 40
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_URLSAFE_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_CANONICAL_LAST = frozenset(_URLSAFE_ALPHABET[::4])  # characters whose 2 low bits are 0


def new_signing_key() -> bytes:
    return secrets.token_bytes(32)


def new_queue_uid() -> int:
    return secrets.randbits(63)


class ReceiptCodec:
    def __init__(self, signing_key: bytes) -> None:
        if len(signing_key) < 16:
            raise ValueError("receipt signing key too short")
        self._key = signing_key
        # BLAKE2b takes at most 64 key bytes; the stores draw 32.
        self._blake_key = signing_key[:64]
        self._keyed = hashlib.blake2b(key=self._blake_key, digest_size=_MAC_BYTES)

    def encode_many(self, queue_uid: int, pairs: Iterable[tuple[int, int]]) -> list[str]:
        """encode() of each (message_key, receipt_seq), in order. By the compiled twin
        (leaseq._native) when it is built: a third of the cost; it raises on anything it does
        not expect (a value out of range), and then this Python answers, result or error."""
        if speedups is not None:
            pairs = pairs if isinstance(pairs, list) else list(pairs)
            try:
                return speedups.encode_receipts(self._blake_key, queue_uid, pairs)  # type: ignore[no-any-return]
            except Exception:
                pass
        uid = _UID.pack(queue_uid)
        pack, copy = _BODY.pack, self._keyed.copy
        padded = []
        for message_key, receipt_seq in pairs:
            body = pack(_V2_BLAKE2B, message_key, receipt_seq)
            mac = copy()
            mac.update(body + uid)
            padded.append(body + mac.digest() + _PAD)
        text = binascii.b2a_base64(b"".join(padded), newline=False).translate(_TO_URLSAFE)
        chars = text.decode("ascii")
        return [chars[start : start + _TEXT_CHARS] for start in range(0, len(chars), _PADDED_CHARS)]

    def decode_many(self, receipts: Sequence[str], queue_uid: int) -> list[tuple[int, int] | None]:
        """decode() of each receipt, in order. By the compiled twin when it is built, as
        encode_many (it hands a batch with a version 1 receipt to this Python)."""
        if speedups is not None:
            try:
                return speedups.decode_receipts(self._blake_key, queue_uid, receipts)  # type: ignore[no-any-return]
            except Exception:
                pass
        # Only text of the right shape goes through the batch; anything else (and a batch whose
        # joined text does not decode) takes decode() one by one.
        if not receipts:
            return []
        if not all(
            isinstance(r, str)
            and len(r) == _TEXT_CHARS
            and r.isascii()
            and r[-1] in _CANONICAL_LAST
            and "+" not in r
            and "/" not in r
            for r in receipts
        ):
            return [self.decode(receipt, queue_uid) for receipt in receipts]
        try:
            raw = binascii.a2b_base64(
                "A".join(receipts).encode("ascii").translate(_FROM_URLSAFE) + b"A",
                strict_mode=True,
            )
        except binascii.Error:
            return [self.decode(receipt, queue_uid) for receipt in receipts]
        uid = _UID.pack(queue_uid)
        unpack, copy, same = _BODY.unpack_from, self._keyed.copy, hmac.compare_digest
        out: list[tuple[int, int] | None] = []
        for start in range(0, len(raw), _PADDED_BYTES):
            version, message_key, receipt_seq = unpack(raw, start)
            body = raw[start : start + _BODY.size]
            mac = raw[start + _BODY.size : start + _RAW_BYTES]
            if version == _V2_BLAKE2B:
                expected = copy()
                expected.update(body + uid)
                ok = same(mac, expected.digest())
            else:  # version 1 (or unknown: _mac refuses it below)
                ok = version == _V1_HMAC_SHA256 and same(mac, self._mac(version, body, queue_uid))
            out.append((message_key, receipt_seq) if ok else None)
        return out

    def derive(self, purpose: bytes) -> bytes:
        """A 32-byte key for another use of the store's secret (page tokens): keyed BLAKE2b of
        the purpose, so no use learns another's key."""
        return hashlib.blake2b(purpose, key=self._blake_key, digest_size=32).digest()

    def _mac(self, version: int, body: bytes, queue_uid: int) -> bytes:
        if version == _V2_BLAKE2B:
            return hashlib.blake2b(
                body + _UID.pack(queue_uid), key=self._blake_key, digest_size=_MAC_BYTES
            ).digest()
        return hmac.digest(self._key, body + _UID.pack(queue_uid), "sha256")[:_MAC_BYTES]

    def encode(self, queue_uid: int, message_key: int, receipt_seq: int) -> str:
        body = _BODY.pack(_V2_BLAKE2B, message_key, receipt_seq)
        mac = hashlib.blake2b(
            body + _UID.pack(queue_uid), key=self._blake_key, digest_size=_MAC_BYTES
        ).digest()
        # b2a_base64 + translate is base64.urlsafe_b64encode without its Python wrappers.
        text = binascii.b2a_base64(body + mac, newline=False)[:_TEXT_CHARS]
        return text.translate(_TO_URLSAFE).decode("ascii")

    def decode(self, receipt: str, queue_uid: int) -> tuple[int, int] | None:
        """(message_key, receipt_seq), or None when the receipt is not a valid one of this queue."""
        if not isinstance(receipt, str) or len(receipt) != _TEXT_CHARS or not receipt.isascii():
            return None
        # The standard alphabet's '+' and '/' decode as '-' and '_' do (the translation below
        # leaves them as they are): the same receipt spelled another way, not the one issued.
        if "+" in receipt or "/" in receipt:
            return None
        try:
            raw = binascii.a2b_base64(
                (receipt + "=").encode("ascii").translate(_FROM_URLSAFE), strict_mode=True
            )
        except binascii.Error:
            return None
        if len(raw) != _RAW_BYTES:
            return None
        # Base64 leaves 2 spare low bits in the last character: four strings decode to the same
        # bytes. Only the one this codec writes (spare bits 0) is a receipt it issued.
        if receipt[-1] not in _CANONICAL_LAST:
            return None
        body, mac = raw[: _BODY.size], raw[_BODY.size :]
        version, message_key, receipt_seq = _BODY.unpack(body)
        if version not in (_V1_HMAC_SHA256, _V2_BLAKE2B):
            return None
        if not hmac.compare_digest(mac, self._mac(version, body, queue_uid)):
            return None
        return message_key, receipt_seq
