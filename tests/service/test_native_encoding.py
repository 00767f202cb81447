"""The compiled per-message loops (leaseq._native.speedups) give byte for byte what their
pure-Python twins give, and the twins stay the answer whenever the compiled one is missing or
refuses its input."""

from __future__ import annotations

import math
import shutil
import sysconfig

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from leaseq._native import speedups
from leaseq.server import convert
from leaseq.server.domain.types import DeliveredMessage, LeaseResult, LeaseStatus, SendOutcome
from leaseq.v1 import queue_service_pb2 as pb


def _compiler_present() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None


def test_the_extension_is_built_where_a_compiler_is() -> None:
    """`pip install` builds it when it can (setup.py); if this fails on a machine with a C
    compiler, the speedups silently went missing."""
    if _compiler_present():
        assert speedups is not None
    else:
        assert speedups is None


@pytest.fixture(scope="module")
def native():
    if speedups is None:
        pytest.fail("leaseq._native.speedups is not built (no C compiler at install time?)")
    return speedups


# Instants as the stores give them (floats of this era, small and negative ones, integral ones,
# halves of a nanosecond that round to even) and as a caller might (ints).
instants = st.one_of(
    st.floats(min_value=-1e10, max_value=1e10, allow_nan=False, allow_infinity=False),
    st.floats(min_value=1.7e9, max_value=1.9e9),
    st.integers(min_value=-(2**33), max_value=2**33),
    st.sampled_from([0.0, -0.0, 0.5e-9, 1.5e-9, 2.5e-9, -0.5e-9, 1_800_000_000.0000000005]),
)
texts = st.text(max_size=300)
messages = st.builds(
    DeliveredMessage,
    key=st.integers(min_value=1, max_value=2**62),
    message_id=texts,
    receipt=texts,
    body=st.binary(max_size=400),
    attributes=st.dictionaries(texts, texts, max_size=4),
    channel=texts,
    enqueued_at=instants,
    expires_at=instants,
    visible_at=instants,
    delivery_count=st.integers(min_value=0, max_value=2**63 - 1),
    last_error=texts,
)


def _python(batch: list[DeliveredMessage]) -> list[bytes]:
    encode = convert.ReceivedEncoder()
    return [encode(message) for message in batch]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages, max_size=8))
@example([DeliveredMessage(1, "a", "r", b"", {}, "", 1e300, 0.0, 0.0, 0, "")])
def test_encode_received_is_byte_identical_to_the_python_encoder(native, batch) -> None:
    try:
        expected = _python(batch)
    except Exception:
        # The Python encoder refuses it (an instant beyond Timestamp's range...): the compiled
        # one must refuse too, so that the caller's fallback gives Python's error.
        with pytest.raises(Exception):  # noqa: B017 - whichever Python raised
            native.encode_received(batch)
        return
    try:
        got = native.encode_received(batch)
    except (OverflowError, TypeError):
        return  # refused (a range it does not handle): the caller falls back to Python's
    assert got == expected
    assert convert.encode_received(batch) == expected


def test_encode_received_hands_unexpected_input_to_python() -> None:
    """A body that is not bytes, an attributes mapping that is not a dict, an instant that is
    not a number: the compiled loop raises, and convert.encode_received answers as Python does."""
    t = 1_800_000_000.25
    odd = [
        DeliveredMessage(1, "m", "r", bytearray(b"x"), {}, "", t, t, t, 1, ""),  # type: ignore[arg-type]
        DeliveredMessage(2, "m", "r", b"x", {}, "", t, t, t, 1, ""),
    ]
    assert convert.encode_received(odd) == _python(odd)
    broken = [DeliveredMessage(1, "m", "r", b"x", {}, "", "soon", t, t, 1, "")]  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        convert.encode_received(broken)
    if speedups is not None:
        with pytest.raises(TypeError):
            speedups.encode_received(broken)
    with pytest.raises((OverflowError, ValueError)):
        convert.encode_received([DeliveredMessage(1, "m", "r", b"", {}, "", math.inf, t, t, 1, "")])


def test_encode_received_without_the_extension(monkeypatch) -> None:
    """The fallback alone (a machine without a compiler) gives the same bytes."""
    t = 1_800_000_000.123456
    batch = [DeliveredMessage(1, "a" * 32, "r" * 39, b"x" * 100, {"k": "é"}, "c", t, t, t, 3, "")]
    expected = convert.encode_received(batch)
    monkeypatch.setattr(convert, "speedups", None)
    assert convert.encode_received(batch) == expected == _python(batch)


# --- the one-join framing of send and delete results (pure Python, no compiled twin) ----------


def _delete_results_one_by_one(results: list[LeaseResult]) -> pb.DeleteMessagesResponse:
    return pb.DeleteMessagesResponse(
        results=[pb.DeleteResult(receipt=r.receipt, status=int(r.status)) for r in results]
    )


@given(
    st.lists(
        st.builds(
            LeaseResult,
            receipt=st.one_of(
                st.text(max_size=150), st.text("abcXYZ-_09", min_size=39, max_size=39)
            ),
            status=st.sampled_from(list(LeaseStatus)),
        ),
        max_size=6,
    )
)
def test_delete_results_framed_at_once_equal_the_protobuf_api(results) -> None:
    assert convert.delete_results_response(results) == _delete_results_one_by_one(results)


@given(
    st.lists(st.text("0123456789abcdef", min_size=32, max_size=32), max_size=6),
    st.data(),
)
def test_send_results_framed_at_once_equal_the_protobuf_api(ids, data) -> None:
    entries = [pb.SendEntry(body=b"x", id=data.draw(st.sampled_from(["", "", "e"]))) for _ in ids]
    outcomes = [SendOutcome(i, duplicate=data.draw(st.booleans())) for i in ids]
    expected = pb.SendMessagesResponse(
        results=[
            pb.SendResult(id=e.id, message_id=o.message_id, duplicate=o.duplicate)
            for e, o in zip(entries, outcomes)
        ]
    )
    assert convert.send_results_response(entries, outcomes) == expected
    # The fast framing (no ids, no duplicates) must give exactly the same bytes.
    plain = [pb.SendEntry(body=b"x") for _ in ids]
    fresh = [SendOutcome(i) for i in ids]
    assert (
        convert.send_results_response(plain, fresh).SerializeToString()
        == pb.SendMessagesResponse(
            results=[pb.SendResult(message_id=i) for i in ids]
        ).SerializeToString()
    )


# --- receipts: keyed BLAKE2b and base64url in C (server/receipts.py) -------------------------


def _python_codec(monkeypatch, key: bytes):
    from leaseq.server import receipts

    monkeypatch.setattr(receipts, "speedups", None)
    return receipts.ReceiptCodec(key)


keys = st.binary(min_size=16, max_size=80)
uids = st.integers(min_value=0, max_value=2**63 - 1)
pairs = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2**64 - 1), st.integers(0, 2**32 - 1)),
    max_size=6,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys, uids, pairs)
def test_receipts_are_made_byte_identical_in_c(native, monkeypatch, key, uid, batch) -> None:
    from leaseq.server.receipts import ReceiptCodec

    python = _python_codec(monkeypatch, key)
    expected = python.encode_many(uid, batch)
    assert expected == [python.encode(uid, k, s) for k, s in batch]
    assert native.encode_receipts(key[:64], uid, batch) == expected
    monkeypatch.undo()
    assert ReceiptCodec(key).encode_many(uid, batch) == expected


# Receipts as a client may send them back: issued ones, issued ones with one character changed,
# for another queue, too short or long, non-ASCII, the standard alphabet's + and /, not text.
@st.composite
def returned_receipts(draw, key: bytes, uid: int) -> list[object]:
    from leaseq.server.receipts import ReceiptCodec

    issued = ReceiptCodec(key).encode_many(uid, draw(pairs))
    out: list[object] = []
    for receipt in issued:
        choice = draw(st.integers(0, 5))
        if choice == 0:
            out.append(receipt)
        elif choice == 1:
            at = draw(st.integers(0, len(receipt) - 1))
            out.append(receipt[:at] + draw(st.characters(max_codepoint=0x7F)) + receipt[at + 1 :])
        elif choice == 2:
            out.append(receipt.replace("-", "+").replace("_", "/"))
        elif choice == 3:
            out.append(receipt[: draw(st.integers(0, 45))] + draw(st.text(max_size=3)))
        elif choice == 4:
            out.append(ReceiptCodec(key).encode(uid ^ 1, 5, 6))
        else:
            out.append(draw(st.one_of(st.none(), st.integers(), st.binary(max_size=39))))
    return out


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data(), keys, uids)
def test_receipts_are_checked_identically_in_c(native, monkeypatch, data, key, uid) -> None:
    from leaseq.server.receipts import ReceiptCodec

    batch = data.draw(returned_receipts(key, uid))
    python = _python_codec(monkeypatch, key)
    expected = [python.decode(receipt, uid) for receipt in batch]  # type: ignore[arg-type]
    assert python.decode_many(batch, uid) == expected  # type: ignore[arg-type]
    try:
        assert native.decode_receipts(key[:64], uid, batch) == expected
    except NotImplementedError:
        # A changed character made a version byte of 1 (HMAC-SHA256): left to Python, below.
        pass
    monkeypatch.undo()
    assert ReceiptCodec(key).decode_many(batch, uid) == expected  # type: ignore[arg-type]


def test_version_1_receipts_are_left_to_python(native) -> None:
    """The C loop knows version 2 only: a batch holding a version 1 receipt (HMAC-SHA256,
    earlier releases) is decoded by the Python codec, which still accepts it."""
    from leaseq.server.receipts import ReceiptCodec
    from tests.security.test_receipt_codec import _v1_receipt

    key, uid = bytes(range(32)), 77
    codec = ReceiptCodec(key)
    batch = [codec.encode(uid, 1, 2), _v1_receipt(key, uid, 99, 5)]
    with pytest.raises(NotImplementedError):
        native.decode_receipts(key, uid, batch)
    assert codec.decode_many(batch, uid) == [(1, 2), (99, 5)]


# --- sends: the entries that are only an id and a body (convert.plain_entries) ---------------

entries = st.builds(
    pb.SendEntry,
    id=st.one_of(st.just(""), st.text(max_size=20)),
    body=st.binary(max_size=300),
    attributes=st.one_of(st.just({}), st.dictionaries(texts, texts, max_size=2)),
    channel=st.one_of(st.just(""), st.just(""), st.text(max_size=5)),
    dedup_id=st.one_of(st.just(""), st.just(""), st.text(max_size=5)),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=20), st.lists(entries, max_size=8), st.booleans())
def test_plain_entries_are_read_identically_in_c(native, queue, batch, delayed) -> None:
    if delayed and batch:
        batch[0].delay.seconds = 5
    request = pb.SendMessagesRequest(queue=queue, entries=batch)
    expected = convert.plain_entries_python(request)
    assert native.plain_entries(request.SerializeToString()) == expected
    assert convert.plain_entries(request) == expected
    if expected is not None:
        ids, bodies = expected
        assert ids == [e.id for e in batch] and bodies == [e.body for e in batch]


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=20), st.lists(entries, max_size=8), st.booleans())
def test_entries_with_dedup_ids_are_read_identically_in_c(native, queue, batch, delayed) -> None:
    """with_dedup: a dedup id is allowed too (write_queue's sends), answered as a third list,
    None when no entry sets one."""
    if delayed and batch:
        batch[0].delay.seconds = 5
    request = pb.SendMessagesRequest(queue=queue, entries=batch)
    expected = convert.plain_entries_python(request, with_dedup=True)
    assert native.plain_entries(request.SerializeToString(), True) == expected
    assert convert.plain_entries(request, with_dedup=True) == expected
    plain = all(not (e.attributes or e.channel or e.HasField("delay")) for e in batch)
    assert (expected is not None) == plain
    if expected is not None:
        ids, bodies, dedup_ids = expected
        assert ids == [e.id for e in batch] and bodies == [e.body for e in batch]
        named = [e.dedup_id for e in batch]
        assert dedup_ids == (named if any(named) else None)


@settings(max_examples=1000)
@given(st.binary(max_size=60))
@example(b"\x00\x00")  # field number 0: not a field
@example(b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f")  # a varint beyond 64 bits
def test_plain_entries_never_misread_bytes(data) -> None:
    """Whatever bytes upb reads as a SendMessagesRequest (unknown fields, odd encodings), the C
    scan gives what upb reads, or None (not plain: the per-entry way), or raises (the Python
    twin then answers). The service only scans its own serialization of a parsed request."""
    if speedups is None:
        pytest.fail("leaseq._native.speedups is not built")
    try:
        request = pb.SendMessagesRequest.FromString(data)
    except DecodeError:
        return
    try:
        got = speedups.plain_entries(data)
        keyed = speedups.plain_entries(data, True)
    except ValueError:  # an id that is not UTF-8 (upb reads it as bytes): Python answers
        return
    ids, bodies = [e.id for e in request.entries], [e.body for e in request.entries]
    if got is not None:
        assert got == (ids, bodies)
    if keyed is not None:
        named = [e.dedup_id for e in request.entries]
        assert keyed == (ids, bodies, named if any(named) else None)


@given(
    st.lists(st.tuples(st.text(max_size=12), st.text("0123456789abcdef", max_size=40)), max_size=8)
)
def test_send_results_are_written_identically_in_c(native, pairs) -> None:
    ids = [entry_id for entry_id, _ in pairs]
    message_ids = [message_id for _, message_id in pairs]
    expected = convert.send_results_python(ids, message_ids)
    assert native.send_results(ids, message_ids) == expected
    assert convert.sent_response(ids, message_ids) == pb.SendMessagesResponse(
        results=[pb.SendResult(id=i, message_id=m) for i, m in pairs]
    )
