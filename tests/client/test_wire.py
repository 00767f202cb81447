"""The shared request/response conversions (pure functions: no server needed)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from leaseq.client import Message, SendEntry, _wire
from leaseq.v1 import queue_service_pb2 as pb


@pytest.mark.parametrize(
    ("value", "seconds", "nanos"),
    [(30, 30, 0), (0.2, 0, 200_000_000), (timedelta(minutes=2, microseconds=5), 120, 5000)],
)
def test_durations(value: object, seconds: int, nanos: int) -> None:
    duration = _wire.to_duration(value)  # type: ignore[arg-type]
    assert (duration.seconds, duration.nanos) == (seconds, nanos)


@pytest.mark.parametrize("value", [True, "30", None])
def test_durations_reject_other_types(value: object) -> None:
    with pytest.raises(TypeError):
        _wire.to_duration(value)  # type: ignore[arg-type]


def test_bodies() -> None:
    assert _wire.to_body("é") == "é".encode()
    assert _wire.to_body(bytearray(b"ab")) == b"ab"  # type: ignore[arg-type]  # accepted too
    with pytest.raises(TypeError):
        _wire.to_body(3)  # type: ignore[arg-type]


def test_a_single_receipt_is_not_split_into_characters() -> None:
    assert _wire.receipts_of("abc") == ["abc"]
    assert _wire.receipts_of(("a", "b")) == ["a", "b"]


def test_unknown_queue_options_fail_before_any_call() -> None:
    with pytest.raises(TypeError, match="visiblity_timeout"):
        next(_wire.create_queue("q", {"visiblity_timeout": 5}))


def test_send_entries_get_ids_and_unset_defaults() -> None:
    call = next(_wire.send_batch("q", ["a", SendEntry("b", id="x", delay=0)]))
    first, second = call.request.entries  # type: ignore[attr-defined]
    assert (first.id, second.id) == ("0", "x")
    assert not first.HasField("delay") and not first.HasField("ttl")
    assert second.HasField("delay") and second.delay.seconds == 0
    assert call.retry is False  # no dedup ids: a retry could enqueue twice


def test_receive_sends_explicit_max_messages_and_only_given_durations() -> None:
    call = next(
        _wire.receive("q", 1, visibility_timeout=None, wait_time=0, channel=None, attempt_id=None)
    )
    request = call.request
    assert request.max_messages == 1  # type: ignore[attr-defined]
    assert not request.HasField("visibility_timeout")
    assert request.HasField("wait_time")  # zero is not unset: answer at once
    assert call.streaming and call.extra_timeout == 0


def test_update_queue_mask_is_the_given_keys() -> None:
    call = next(_wire.update_queue("q", {"max_in_flight": 5, "dead_letter_queue": None}))
    request = call.request
    assert isinstance(request, pb.UpdateQueueRequest)
    assert list(request.update_mask.paths) == ["max_in_flight", "dead_letter_queue"]
    assert not request.config.HasField("dead_letter_queue")


def test_messages_are_frozen() -> None:
    assert Message.__dataclass_params__.frozen  # type: ignore[attr-defined]
