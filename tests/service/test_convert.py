"""Conversions that a wire test would only see indirectly: rounding, metadata format (page
tokens: tests/hostile/test_page_tokens.py)."""

from __future__ import annotations

import pytest

from leaseq.server import convert
from leaseq.v1 import queue_service_pb2 as pb


@pytest.mark.parametrize("seconds", [0.0, 0.2, 1.5, 30.0, 43200.0, 1_800_000_000.123456])
def test_duration_round_trip(seconds) -> None:
    assert convert.duration_to_seconds(convert.seconds_to_duration(seconds)) == pytest.approx(
        seconds, abs=1e-9
    )


def test_duration_keeps_one_sign() -> None:
    duration = convert.seconds_to_duration(-1.5)
    assert (duration.seconds, duration.nanos) == (-1, -500_000_000)
    assert convert.seconds_to_duration(0.2).nanos == 200_000_000


def test_timestamp_nanos_are_never_negative() -> None:
    stamp = convert.seconds_to_timestamp(-0.25)
    assert (stamp.seconds, stamp.nanos) == (-1, 750_000_000)
    assert convert.timestamp_to_seconds(convert.seconds_to_timestamp(1_800_000_000.5)) == (
        1_800_000_000.5
    )


def test_format_seconds_is_proto_json() -> None:
    assert convert.format_seconds(43200) == "43200s"
    assert convert.format_seconds(0.5) == "0.500s"
    assert convert.format_seconds(-1) == "-1s"


def _received_by_fields(message) -> pb.ReceivedMessage:
    """The ReceivedMessage built field by field with the protobuf API: what the wire encoder must
    give."""
    return pb.ReceivedMessage(
        message_id=message.message_id,
        receipt=message.receipt,
        body=message.body,
        attributes=message.attributes,
        channel=message.channel,
        enqueued_at=convert.seconds_to_timestamp(message.enqueued_at),
        expires_at=convert.seconds_to_timestamp(message.expires_at),
        visible_at=convert.seconds_to_timestamp(message.visible_at),
        delivery_count=message.delivery_count,
        last_error=message.last_error,
    )


def test_received_messages_encode_as_the_protobuf_api_builds_them() -> None:
    """ReceivedEncoder writes ReceivedMessages as wire bytes: every field, empty or not, short or
    long (lengths over 127 take a longer varint), non-ASCII text, shared and distinct instants."""
    from leaseq.server.domain.types import DeliveredMessage

    t = 1_800_000_000.123456
    messages = [
        DeliveredMessage(1, "a" * 32, "r" * 39, b"x" * 100, {}, "", t, t + 60, t + 30, 1, ""),
        DeliveredMessage(2, "b" * 32, "s" * 39, b"", {}, "", t, t + 60, t + 30, 1, ""),
        DeliveredMessage(
            3,
            "c" * 32,
            "t" * 39,
            bytes(range(256)) * 70,
            {"k": "v", "é": "ü" * 200, "": ""},
            "orders/eu",
            t - 0.5,
            t + 1e6,
            -0.25,
            300,
            "failed: " + "ß" * 100,
        ),
        DeliveredMessage(4, "d" * 32, "u" * 39, b"\0", {}, "c", 0.0, t, t, 2**31 - 1, "e"),
    ]
    encode = convert.ReceivedEncoder()
    parts = [encode(message) for message in messages]
    response = convert.ReceivedEncoder.response(parts)
    assert list(response.messages) == [_received_by_fields(m) for m in messages]
    assert convert.ReceivedEncoder.response([]).messages == []
    assert convert.received_to_proto(messages[2]) == _received_by_fields(messages[2])


def test_delete_results_encode_as_the_protobuf_api_builds_them() -> None:
    from leaseq.server.domain.types import LeaseResult, LeaseStatus
    from leaseq.v1 import queue_service_pb2 as pb

    results = [LeaseResult("r" * 39, status, key=1) for status in LeaseStatus]
    results += [
        LeaseResult("", LeaseStatus.INVALID_RECEIPT),
        LeaseResult("é" * 200, LeaseStatus.OK),
    ]
    expected = pb.DeleteMessagesResponse(
        results=[pb.DeleteResult(receipt=r.receipt, status=int(r.status)) for r in results]
    )
    assert convert.delete_results_response(results) == expected
    assert convert.delete_results_response([]) == pb.DeleteMessagesResponse()


def test_send_results_encode_as_the_protobuf_api_builds_them() -> None:
    from leaseq.server.domain.types import SendOutcome
    from leaseq.v1 import queue_service_pb2 as pb

    entries = [pb.SendEntry(body=b"a"), pb.SendEntry(id="e" * 300, body=b"b"), pb.SendEntry(id="ü")]
    outcomes = [SendOutcome("a" * 32), SendOutcome("b" * 32, duplicate=True), SendOutcome("c" * 32)]
    expected = pb.SendMessagesResponse(
        results=[
            pb.SendResult(id=e.id, message_id=o.message_id, duplicate=o.duplicate)
            for e, o in zip(entries, outcomes)
        ]
    )
    assert convert.send_results_response(entries, outcomes) == expected


def test_wire_responses_are_sent_as_they_are_and_equal_the_messages_they_stand_for() -> None:
    """A hot response goes to gRPC as convert.Wire (its wire bytes, plus server_time appended as
    one more field): the serializer sends the bytes untouched, they parse into the message the
    protobuf API builds, byte for byte what that message serializes to, and other responses are
    serialized as usual."""
    from leaseq.server.domain.types import LeaseResult, LeaseStatus
    from leaseq.v1 import queue_service_pb2 as pb

    now = 1_800_000_000.25
    ids, message_ids = ["", "e" * 200, "ü"], ["a" * 32, "b" * 32, "c" * 32]
    sent = convert.Wire(
        convert.sent_wire(ids, message_ids) + convert.timestamp_field(b"\x12", now), 3
    )
    expected_sent = pb.SendMessagesResponse(
        results=[pb.SendResult(id=i, message_id=m) for i, m in zip(ids, message_ids)],
        server_time=convert.seconds_to_timestamp(now),
    )
    assert sent.parse(pb.SendMessagesResponse) == expected_sent
    assert convert.serialize(sent) is sent.data
    assert sent.data == expected_sent.SerializeToString()
    assert (
        convert.sent_wire([""] * 3, message_ids)
        == pb.SendMessagesResponse(
            results=[pb.SendResult(message_id=m) for m in message_ids]
        ).SerializeToString()
    )

    results = [
        LeaseResult("r" * 39, LeaseStatus.OK),
        LeaseResult("s" * 39, LeaseStatus.LEASE_EXPIRED),
    ]
    deleted, acked = convert.delete_results_wire(results)
    assert acked == 1
    assert convert.delete_results_wire(results[:1])[1] == 1
    deleted += convert.timestamp_field(b"\x1a", now)
    expected_deleted = pb.DeleteMessagesResponse(
        results=[pb.DeleteResult(receipt=r.receipt, status=int(r.status)) for r in results],
        server_time=convert.seconds_to_timestamp(now),
    )
    assert deleted == expected_deleted.SerializeToString()

    empty = convert.Wire(convert.timestamp_field(b"\x12", now), 0)
    assert empty.parse(pb.GetMessagesResponse) == pb.GetMessagesResponse(
        server_time=convert.seconds_to_timestamp(now)
    )
    plain = pb.PurgeQueueResponse(purged_count=3)
    assert convert.serialize(plain) == plain.SerializeToString()
