"""Message groups over gRPC: SendEntry.group, QueueConfig.ordering and the FIFO dedup settings,
ReceivedMessage/PeekedMessage.group and sequence, the stats' group counts, and the errors."""

from __future__ import annotations

import hashlib

import grpc
from google.protobuf import field_mask_pb2

from leaseq.v1 import queue_service_pb2 as pb

from .conftest import create, details_of, receive_once, rpc_error, stats

FIFO = pb.ORDERING_FIFO
FAIR = pb.ORDERING_FAIR


async def _send(stub, queue: str, *entries: pb.SendEntry) -> pb.SendMessagesResponse:  # type: ignore[no-untyped-def]
    return await stub.SendMessages(pb.SendMessagesRequest(queue=queue, entries=list(entries)))


def _entry(body: str, group: str = "", **fields: object) -> pb.SendEntry:
    return pb.SendEntry(body=body.encode(), group=group, **fields)  # type: ignore[arg-type]


async def _bodies_and_groups(stub, queue: str = "q") -> list[tuple[str, str, int]]:  # type: ignore[no-untyped-def]
    [reply] = await receive_once(stub, queue=queue, max_messages=10, wait_time={"seconds": 0})
    return [(m.body.decode(), m.group, m.sequence) for m in reply.messages]


async def test_a_fifo_queue_round_trip(stub) -> None:  # type: ignore[no-untyped-def]
    queue = await create(stub, "q", ordering=FIFO)
    assert queue.config.ordering == FIFO
    assert queue.config.dedup_scope == pb.DEDUP_SCOPE_QUEUE
    reply = await _send(stub, "q", _entry("a1", "a"), _entry("b1", "b"), _entry("a2", "a"))
    assert not any(r.HasField("error") for r in reply.results)
    got = await _bodies_and_groups(stub)
    assert [(b, g) for b, g, _ in got] == [("a1", "a"), ("a2", "a"), ("b1", "b")]
    assert got[0][2] < got[1][2] and all(s > 0 for _, _, s in got)
    counted = await stats(stub)
    assert (counted.groups, counted.blocked_groups) == (2, 2)
    peeked = await stub.PeekMessages(
        pb.PeekMessagesRequest(queue="q", max_messages=10, include_leased=True)
    )
    assert sorted((m.group, m.sequence > 0) for m in peeked.messages) == [
        ("a", True),
        ("a", True),
        ("b", True),
    ]


async def test_a_fifo_queue_refuses_a_message_without_a_group_and_a_bad_group(stub) -> None:  # type: ignore[no-untyped-def]
    await create(stub, "q", ordering=FIFO)
    reply = await _send(stub, "q", _entry("none"), _entry("ok", "g"), _entry("bad", "a b"))
    errors = [(r.HasField("error"), r.error.message) for r in reply.results]
    assert errors[0][0] and "entries[0].group" in errors[0][1]
    assert not errors[1][0]
    assert errors[2][0] and "entries[2].group" in errors[2][1]
    # The column-wise batch (bodies only) takes the same rule.
    plain = await _send(stub, "q", pb.SendEntry(id="x", body=b"x"))
    assert plain.results[0].HasField("error")


async def test_ordering_is_immutable_and_dedup_settings_need_fifo(stub) -> None:  # type: ignore[no-untyped-def]
    await create(stub, "q", ordering=FIFO)
    error = await rpc_error(
        stub.UpdateQueue(
            pb.UpdateQueueRequest(
                name="q",
                config=pb.QueueConfig(ordering=FAIR),
                update_mask=field_mask_pb2.FieldMask(paths=["ordering"]),
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details_of(error).violations[0][0] == "config.ordering"
    error = await rpc_error(
        stub.CreateQueue(
            pb.CreateQueueRequest(name="p", config=pb.QueueConfig(content_based_dedup=True))
        )
    )
    assert details_of(error).violations[0][0] == "config.content_based_dedup"
    error = await rpc_error(
        stub.CreateQueue(pb.CreateQueueRequest(name="p", config=pb.QueueConfig(ordering=7)))  # type: ignore[arg-type]
    )
    assert details_of(error).violations[0][0] == "config.ordering"


async def test_content_based_dedup_and_group_scope(stub) -> None:  # type: ignore[no-untyped-def]
    await create(
        stub, "q", ordering=FIFO, content_based_dedup=True, dedup_scope=pb.DEDUP_SCOPE_GROUP
    )
    first = await _send(stub, "q", _entry("same", "a"), _entry("same", "b"))
    assert [r.duplicate for r in first.results] == [False, False]  # two groups: two scopes
    again = await _send(stub, "q", _entry("same", "a"), _entry("other", "a"))
    assert [r.duplicate for r in again.results] == [True, False]
    assert again.results[0].message_id == first.results[0].message_id
    await create(stub, "whole", ordering=FIFO, content_based_dedup=True)
    reply = await _send(stub, "whole", _entry("x", "a"), _entry("x", "b"), _entry("y", "b"))
    assert [r.duplicate for r in reply.results] == [False, True, False]
    # An explicit dedup id wins over the body's hash.
    explicit = await _send(
        stub, "whole", _entry("x", "c", dedup_id=hashlib.sha256(b"z").hexdigest())
    )
    assert not explicit.results[0].duplicate


async def test_a_fair_queue_spreads_a_receive_over_groups(stub) -> None:  # type: ignore[no-untyped-def]
    await create(stub, "q", ordering=FAIR)
    await _send(stub, "q", *[_entry(f"big{i}", "big") for i in range(200)])
    await _send(stub, "q", *[_entry(f"small{i}", "small") for i in range(3)], _entry("plain"))
    got = await _bodies_and_groups(stub)
    groups = [g for _, g, _ in got]
    assert groups.count("small") == 3 and groups.count("") == 1 and groups.count("big") == 6


async def test_a_fifo_queue_needs_a_fifo_dead_letter_queue(stub) -> None:  # type: ignore[no-untyped-def]
    await create(stub, "dlq")
    error = await rpc_error(
        stub.CreateQueue(
            pb.CreateQueueRequest(
                name="q",
                config=pb.QueueConfig(ordering=FIFO, dead_letter_queue="dlq", max_delivery_count=2),
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "FIFO" in details_of(error).violations[0][1]
