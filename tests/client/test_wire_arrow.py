"""The Arrow bulk path's wire conversions: the compiled module (``_wire_arrow_c``) gives the very
bytes and tables of the pure-Python twins, which go through the generated protobuf classes and
so are the reference; protobuf's merge rules (a field repeated, a message sent in two pieces,
unknown fields) hold; bad bytes are a ValueError, never a crash; and a round trip through a real
server gives the same table with either implementation."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leaseq.client import MESSAGE_SCHEMA, QueueClient, _wire_arrow
from leaseq.v1 import queue_service_pb2 as pb
from tests.support.process import server_process


def test_the_compiled_module_is_built() -> None:
    # `pip install -e .` builds it (gcc and the Python headers are on every machine of the
    # project); the tests below compare it with the pure-Python twins.
    assert _wire_arrow.NATIVE, "leaseq.client._wire_arrow_c is not built: pip install -e ."


# No deadline: a loaded machine (several test runs at once on 2 cores) makes single examples
# slow; the examples' count bounds the time.
text = st.text(max_size=12)
int32 = st.integers(-(2**31), 2**31 - 1)
timestamps = st.builds(
    lambda s, n: (s, n),
    st.integers(-62_135_596_800, 253_402_300_799),  # 0001-01-01 .. 9999-12-31
    st.integers(0, 999_999_999),
)


@st.composite
def received(draw: st.DrawFn) -> pb.ReceivedMessage:
    m = pb.ReceivedMessage(
        message_id=draw(text),
        receipt=draw(text),
        body=draw(st.binary(max_size=40)),
        attributes=draw(st.dictionaries(text, text, max_size=4)),
        channel=draw(text),
        delivery_count=draw(int32),
        last_error=draw(text),
    )
    for name in ("enqueued_at", "expires_at", "visible_at"):
        if draw(st.booleans()):
            seconds, nanos = draw(timestamps)
            getattr(m, name).seconds = seconds
            getattr(m, name).nanos = nanos
    return m


def _both_decode(raw: bytes) -> pa.RecordBatch:
    native = _wire_arrow.decode_messages(raw, MESSAGE_SCHEMA, native=True)
    python = _wire_arrow.decode_messages(raw, MESSAGE_SCHEMA, native=False)
    assert native.equals(python)
    return native


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(received(), max_size=8), st.booleans())
def test_messages_decode_alike(messages: list[pb.ReceivedMessage], server_time: bool) -> None:
    response = pb.GetMessagesResponse(messages=messages)
    if server_time:
        response.server_time.seconds = 1_700_000_000
    batch = _both_decode(response.SerializeToString())
    assert batch.num_rows == len(messages)
    assert batch.column("body").to_pylist() == [m.body for m in messages]
    assert batch.column("attributes").to_pylist() == [
        sorted(m.attributes.items()) for m in messages
    ]


@settings(max_examples=100, deadline=None)
@given(received(), received(), st.binary(max_size=20))
def test_merge_rules_and_unknown_fields(
    first: pb.ReceivedMessage, second: pb.ReceivedMessage, unknown: bytes
) -> None:
    # One message sent in two pieces merges (last value wins, maps and timestamps merge), and
    # fields the reader does not know (number 15 here, and 3 at the top level) are skipped.
    piece = first.SerializeToString() + second.SerializeToString()
    extra = b"\x7a" + bytes([len(unknown)]) + unknown  # field 15, length-delimited
    message = piece + extra
    raw = (
        b"\x0a"
        + _varint(len(message))
        + message
        + b"\x1a"
        + bytes([len(unknown)])
        + unknown  # field 3 of the response
    )
    batch = _both_decode(raw)
    merged = pb.ReceivedMessage()
    merged.MergeFrom(first)
    merged.MergeFrom(second)
    assert batch.column("message_id").to_pylist() == [merged.message_id]
    assert batch.column("attributes").to_pylist() == [sorted(merged.attributes.items())]


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_bad_bytes_are_a_value_error(raw: bytes) -> None:
    try:
        _wire_arrow.decode_messages(raw, MESSAGE_SCHEMA, native=True)
    except ValueError:
        pass


def test_truncated_and_non_utf8_input_is_refused() -> None:
    raw = pb.GetMessagesResponse(
        messages=[pb.ReceivedMessage(message_id="abc")]
    ).SerializeToString()
    for cut in range(1, len(raw)):
        with pytest.raises(ValueError):
            _wire_arrow.decode_messages(raw[:cut], MESSAGE_SCHEMA, native=True)
    bad = b"\x0a\x03\x0a\x01\xff"  # message_id = b"\xff"
    with pytest.raises(ValueError):
        _wire_arrow.decode_messages(bad, MESSAGE_SCHEMA, native=True)


rows = st.lists(st.tuples(st.binary(max_size=30), text, text), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(rows, st.data(), st.sampled_from(["", "q", "queue-é"]))
def test_send_requests_encode_alike(
    values: list[tuple[bytes, str, str]], data: st.DataObject, queue: str
) -> None:
    start = data.draw(st.integers(0, len(values) - 1))
    stop = data.draw(st.integers(start + 1, len(values)))
    offset = data.draw(st.integers(0, start))  # a sliced array: its offset is not 0
    bodies, channels, dedups = zip(*values)
    columns = {
        2: pa.array(bodies, pa.binary()).slice(offset),
        4: pa.array(channels, pa.string()).slice(offset),
        7: pa.array(dedups, pa.string()).slice(offset),
    }
    chosen = {f: c for f, c in columns.items() if f == 2 or data.draw(st.booleans())}
    native = _wire_arrow.encode_send(queue, chosen, start - offset, stop - offset, native=True)
    python = _wire_arrow.encode_send(queue, chosen, start - offset, stop - offset, native=False)
    assert native == python
    entries = pb.SendMessagesRequest.FromString(native).entries
    assert [e.body for e in entries] == list(bodies[start:stop])
    assert [e.id for e in entries] == [str(i) for i in range(stop - start)]


@settings(max_examples=100, deadline=None)
@given(st.lists(text, min_size=1, max_size=12), st.data())
def test_delete_requests_encode_alike(receipts: list[str], data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(receipts) - 1))
    stop = data.draw(st.integers(start + 1, len(receipts)))
    column = pa.array(receipts, pa.string())
    native = _wire_arrow.encode_delete("q", column, start, stop, native=True)
    assert native == _wire_arrow.encode_delete("q", column, start, stop, native=False)
    assert list(pb.DeleteMessagesRequest.FromString(native).receipts) == receipts[start:stop]


send_results = st.builds(
    pb.SendResult,
    id=text,
    message_id=text,
    duplicate=st.booleans(),
    error=st.one_of(st.none(), st.builds(pb.EntryError, code=int32, message=text)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(send_results, max_size=10))
def test_send_results_decode_alike(results: list[pb.SendResult]) -> None:
    raw = pb.SendMessagesResponse(results=results).SerializeToString()
    native = _wire_arrow.decode_send_results(raw, native=True)
    python = _wire_arrow.decode_send_results(raw, native=False)
    for name in ("message_id", "duplicate", "failed", "code", "error"):
        assert getattr(native, name).equals(getattr(python, name)), name
    assert native.failed.to_pylist() == [r.HasField("error") for r in results]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(pb.DeleteResult, receipt=text, status=st.integers(0, 9)), max_size=10))
def test_delete_results_decode_alike(results: list[pb.DeleteResult]) -> None:
    raw = pb.DeleteMessagesResponse(results=results).SerializeToString()
    native = _wire_arrow.decode_delete_results(raw, native=True)
    python = _wire_arrow.decode_delete_results(raw, native=False)
    assert native[0].equals(python[0]) and native[1].equals(python[1])


@pytest.mark.parametrize("native", [True, False], ids=["compiled", "pure-python"])
def test_a_round_trip_through_a_server_with_either_implementation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    monkeypatch.setattr(_wire_arrow, "NATIVE", native)
    count = 25_000  # three requests each way
    table = pa.table(
        {
            "body": pa.array([f"body {i}".encode() for i in range(count)], pa.binary()),
            "channel": pa.array(["eu" if i % 2 else None for i in range(count)], pa.string()),
            "dedup_id": pa.array([f"d{i}" for i in range(count)], pa.string()),
            "id": pa.array(range(count), pa.int64()),
        }
    )
    with server_process("memory://", tmp_path) as server, QueueClient(server.target) as client:
        client.create_queue("q")
        sent = client.send_arrow("q", table)
        again = client.send_arrow("q", table.slice(0, 10))  # dedup ids: duplicates
        got = client.receive_arrow("q", count, wait_time=0)
        acked = client.ack_arrow("q", got.column("receipt"))
        assert client.stats("q").total == 0
    assert sent.column("id").to_pylist() == [str(i) for i in range(count)]
    assert sent.column("error_code").null_count == count
    assert again.column("duplicate").to_pylist() == [True] * 10
    assert again.column("message_id").to_pylist() == sent.column("message_id").to_pylist()[:10]
    assert got.schema == MESSAGE_SCHEMA and got.num_rows == count
    by_id = dict(zip(got.column("message_id").to_pylist(), got.column("body").to_pylist()))
    assert [by_id[m] for m in sent.column("message_id").to_pylist()] == table["body"].to_pylist()
    assert sorted(set(got.column("channel").to_pylist())) == ["", "eu"]
    assert set(acked.column("status").to_pylist()) == {"OK"}
