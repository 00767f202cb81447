"""docs/api.md covers the whole wire contract: every RPC, message field and enum value of
leaseq.v1 (read from the generated descriptor, so a field added to the .proto without a word in
the reference fails here), and every range the server's validation enforces."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leaseq.server.domain import limits
from leaseq.v1 import queue_service_pb2 as pb

API = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
FILE = pb.DESCRIPTOR


def test_every_rpc_has_a_section() -> None:
    [service] = FILE.services_by_name.values()
    for method in service.methods:
        assert f"### {method.name}" in API or f"## {method.name}" in API, method.name


@pytest.mark.parametrize("message", sorted(FILE.message_types_by_name))
def test_every_field_is_named(message: str) -> None:
    # As code (`field`) or in a shape such as {name, config, create_time}.
    for field in FILE.message_types_by_name[message].fields:
        pattern = rf"[`{{,]\s*{field.name}\s*[`}},]"
        assert re.search(pattern, API), f"{message}.{field.name}"


@pytest.mark.parametrize("enum", sorted(FILE.enum_types_by_name))
def test_every_enum_value_is_named(enum: str) -> None:
    for value in FILE.enum_types_by_name[enum].values:
        if value.number == 0:
            continue  # *_UNSPECIFIED: never sent
        assert value.name in API, value.name


@pytest.mark.parametrize(
    "text",
    [
        "0 s .. 7 d",
        "0 .. 30 s",
        "60 s .. 14 d",
        "1 KiB .. 8 MiB",
        "1 .. 1,000",
        "1 .. 10,000,000",
        "0 .. 1 h",
        "1 .. 10,000",
        "1 .. 100,000",
        "0 means 1,000",
        "0 means 100",
        "at most 16",
        "64 characters",
        "128 characters",
        "1,024 characters",
        "1 .. 80 characters",
        "64 MiB",
    ],
)
def test_ranges_are_stated(text: str) -> None:
    assert text in API


def test_the_stated_limits_are_the_servers() -> None:
    assert (limits.MAX_BATCH, limits.MAX_OUTSTANDING) == (10_000, 100_000)
    assert (limits.DEFAULT_MAX_OUTSTANDING, limits.DEFAULT_PAGE_SIZE) == (1_000, 100)
    assert limits.MAX_PAGE_SIZE == 1_000
    assert (limits.MAX_ATTRIBUTES, limits.MAX_CHANNEL) == (16, 64)
    assert (limits.MAX_DEDUP_ID, limits.MAX_ATTEMPT_ID, limits.MAX_REASON) == (128, 128, 1024)
    assert (limits.MAX_VISIBILITY, limits.MAX_WAIT) == (7 * 86400.0, 30.0)


@pytest.mark.parametrize(
    "reason",
    [
        "OUT_OF_RANGE",
        "QUEUE_NOT_FOUND",
        "QUEUE_ALREADY_EXISTS",
        "QUEUE_IN_USE",
        "OVER_LIMIT",
        "TOO_MANY_STREAMS",
    ],
)
def test_every_error_reason_is_listed(reason: str) -> None:
    assert f"`{reason}`" in API
