"""The receipt codec on its own: what verifies and what does not (the stores' contract tests
cover receipts end to end; these pin the codec's format, including receipts of version 1)."""

from __future__ import annotations

import base64
import hmac
import struct

import pytest

from leaseq.server.receipts import ReceiptCodec

KEY = bytes(range(32))
UID = 0x1234_5678_9ABC


def _v1_receipt(key: bytes, queue_uid: int, message_key: int, receipt_seq: int) -> str:
    """A receipt as releases before version 2 wrote it (HMAC-SHA256), written out here so the
    test does not depend on the codec it checks."""
    body = struct.pack(">BQI", 1, message_key, receipt_seq)
    mac = hmac.digest(key, body + struct.pack(">Q", queue_uid), "sha256")[:16]
    return base64.urlsafe_b64encode(body + mac).rstrip(b"=").decode("ascii")


def test_a_receipt_round_trips() -> None:
    codec = ReceiptCodec(KEY)
    receipt = codec.encode(UID, 2**40 + 7, 3)
    assert codec.decode(receipt, UID) == (2**40 + 7, 3)
    assert len(receipt) == 39 and "=" not in receipt


def test_version_1_receipts_still_verify() -> None:
    codec = ReceiptCodec(KEY)
    assert codec.decode(_v1_receipt(KEY, UID, 99, 5), UID) == (99, 5)
    assert codec.decode(_v1_receipt(KEY, UID + 1, 99, 5), UID) is None
    assert codec.decode(_v1_receipt(bytes(32), UID, 99, 5), UID) is None


def test_another_queue_or_key_does_not_verify() -> None:
    receipt = ReceiptCodec(KEY).encode(UID, 1, 1)
    assert ReceiptCodec(KEY).decode(receipt, UID + 1) is None
    assert ReceiptCodec(bytes(32)).decode(receipt, UID) is None


def test_every_single_character_change_is_refused() -> None:
    codec = ReceiptCodec(KEY)
    receipt = codec.encode(UID, 12345, 6)
    # '+' and '/': the standard base64 alphabet's spelling of '-' and '_'.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/"
    for position in range(len(receipt)):
        for char in alphabet:
            if char != receipt[position]:
                changed = receipt[:position] + char + receipt[position + 1 :]
                assert codec.decode(changed, UID) is None, (position, char)


@pytest.mark.parametrize(
    "text",
    ["", "x", "A" * 38, "A" * 40, "é" * 39, "+" * 39, "/" * 39, "=" * 39, None, 42],
)
def test_malformed_text_is_refused(text) -> None:
    assert ReceiptCodec(KEY).decode(text, UID) is None


def test_an_unknown_version_is_refused() -> None:
    body = struct.pack(">BQI", 3, 1, 1)
    text = base64.urlsafe_b64encode(body + bytes(16)).rstrip(b"=").decode("ascii")
    assert ReceiptCodec(KEY).decode(text, UID) is None


def test_batches_code_exactly_as_one_by_one() -> None:
    """encode_many / decode_many (the stores' hot paths) give what encode / decode give, for
    every kind of receipt, good or bad, mixed in one batch."""
    codec = ReceiptCodec(KEY)
    pairs = [(1, 0), (2**40 + 7, 3), (2**63 - 1, 2**32 - 1), (12345, 6)]
    assert codec.encode_many(UID, pairs) == [codec.encode(UID, k, s) for k, s in pairs]
    assert codec.encode_many(UID, []) == []
    good = codec.encode_many(UID, pairs)
    tampered = good[1][:5] + ("B" if good[1][5] != "B" else "C") + good[1][6:]
    other_queue = codec.encode(UID + 1, 5, 5)
    batches = [
        good,
        good + [_v1_receipt(KEY, UID, 99, 5)],
        good + [tampered, other_queue],
        good + ["A" * 39],  # right shape, wrong MAC
        good + [good[0][:-1] + "B"],  # a non-canonical last character
        good + ["", "é" * 39, "=" * 39, "+" * 39],  # wrong shapes: the one-by-one path
        good + [r.translate(str.maketrans("-_", "+/")) for r in good],  # the standard alphabet
        [good[0][:10] + "=" + good[0][11:]] + good,  # the joined text does not decode
        [],
    ]
    for batch in batches:
        assert codec.decode_many(batch, UID) == [codec.decode(r, UID) for r in batch], batch
    assert codec.decode_many(good, UID) == pairs
