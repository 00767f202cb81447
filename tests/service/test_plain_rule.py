"""The column-wise send path agrees with the one definition of a valid message.

native/speedups.c's plain_entries says which SendMessages requests are only ids, bodies and dedup
ids (the column-wise batch); the core then sends such a batch whole when
`rules.plain_batch_valid` holds. Both must agree with the per-entry way: the compiled reader with
the Python one, and the batch rule with `rules.check_message` applied to each entry."""

from __future__ import annotations

import pytest

from leaseq._native import speedups
from leaseq.server import convert, validation
from leaseq.server.domain import limits, rules
from leaseq.server.domain.types import NewMessage, QueueConfig
from leaseq.server.errors import InvalidArgument
from leaseq.v1 import queue_service_pb2 as pb

CONFIG = QueueConfig(max_message_bytes=1024)

ENTRIES = [
    [pb.SendEntry(id="a", body=b"x")],
    [pb.SendEntry(body=b"x" * 1024), pb.SendEntry(body=b"")],
    [pb.SendEntry(body=b"x" * 1025)],
    [pb.SendEntry(body=b"x", dedup_id="d"), pb.SendEntry(body=b"y")],
    [pb.SendEntry(body=b"x", dedup_id="d" * limits.MAX_DEDUP_ID)],
    [pb.SendEntry(body=b"x", dedup_id="d" * (limits.MAX_DEDUP_ID + 1))],
    [pb.SendEntry(body=b"x", dedup_id="a\x00b")],
    [pb.SendEntry(body=b"x", channel="c")],
    [pb.SendEntry(body=b"x", attributes={"k": "v"})],
    [pb.SendEntry(id="\u00e9t\u00e9", body=b"\xff", dedup_id="\u2603")],
]


@pytest.mark.skipif(speedups is None, reason="the compiled speedups are not built")
@pytest.mark.parametrize("entries", ENTRIES)
def test_the_compiled_reader_agrees_with_python(entries: list[pb.SendEntry]) -> None:
    request = pb.SendMessagesRequest(queue="q", entries=entries)
    for with_dedup in (False, True):
        assert speedups.plain_entries(request.SerializeToString(), with_dedup) == (
            convert.plain_entries_python(request, with_dedup)
        )


@pytest.mark.parametrize("entries", ENTRIES)
def test_the_batch_rule_is_check_message_for_every_entry(entries: list[pb.SendEntry]) -> None:
    request = pb.SendMessagesRequest(queue="q", entries=entries)
    plain = convert.plain_entries(request, with_dedup=True)
    if plain is None:
        return  # not a column-wise batch: each entry takes check_message itself
    _, bodies, dedup_ids = plain
    each: list[bool] = []
    for index, entry in enumerate(entries):
        message = validation.send_entry(entry, index)
        assert isinstance(message, NewMessage)
        try:
            rules.check_message(message, index, CONFIG)
            each.append(True)
        except InvalidArgument:
            each.append(False)
    assert rules.plain_batch_valid(bodies, dedup_ids, CONFIG) == all(each)
