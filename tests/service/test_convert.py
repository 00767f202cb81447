"""Conversions that a wire test would only see indirectly: rounding, tokens, metadata format."""

from __future__ import annotations

import pytest

from leaseq.server import convert
from leaseq.server.errors import InvalidArgument


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


def test_peek_token_round_trips_the_exact_cursor() -> None:
    cursor = (1_800_000_000.1234567, 42)
    token = convert.encode_peek_token(cursor, "a*", True, False)
    assert convert.decode_peek_token(token, "a*", True, False) == cursor
    with pytest.raises(InvalidArgument):
        convert.decode_peek_token(token, "a*", True, True)  # another listing


def test_list_token_is_bound_to_its_prefix() -> None:
    token = convert.encode_list_token("a", "a2")
    assert convert.decode_list_token(token, "a") == "a2"
    with pytest.raises(InvalidArgument):
        convert.decode_list_token(token, "")


@pytest.mark.parametrize(
    "token", ["", "!!", "W10", "eyJrIjoicGsiLCJ2IjoieCIsImkiOjF9", convert.encode_list_token("", "x")]
)
def test_malformed_peek_tokens(token) -> None:
    with pytest.raises(InvalidArgument) as caught:
        convert.decode_peek_token(token, "", False, False)
    assert caught.value.field == "page_token"
