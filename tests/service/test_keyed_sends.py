"""SendMessages' fast way for entries that are only an id, a body and a dedup id (write_queue's
sends: service._send_plain, QueueCore.send_keyed, SqliteStore.send_keyed; the other stores take
the generic way): exact dedup semantics on every store. A repeat answers the first send's
message id with `duplicate` set, within the batch whatever the window, across batches while the
window lasts; after it, the id enqueues again and later repeats answer the new message.
The server runs on a FakeClock, so each window boundary is exact."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import RunningServer

from .conftest import create, receive_once, stats


@pytest.fixture
async def stub(clocked: RunningServer) -> AsyncIterator[pb_grpc.QueueServiceStub]:
    async with grpc.aio.insecure_channel(clocked.target) as channel:
        yield pb_grpc.QueueServiceStub(channel)


def _seconds(n: float) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=int(n), nanos=round((n - int(n)) * 1e9))


async def _advance(server: RunningServer, seconds: float) -> None:
    await asyncio.to_thread(server.clock.advance, seconds)


async def _send(stub, dedup_ids: list[str], queue: str = "q", **extra) -> list[pb.SendResult]:
    """One batch, entry i with body b"<queue>:<i>:<dedup id>" and that dedup id ("": none).
    extra: more fields on every entry (delay=0 s sends the same batch the per-entry way)."""
    entries = [
        pb.SendEntry(body=f"{queue}:{i}:{d}".encode(), dedup_id=d, **extra)
        for i, d in enumerate(dedup_ids)
    ]
    reply = await stub.SendMessages(pb.SendMessagesRequest(queue=queue, entries=entries))
    assert not any(r.HasField("error") for r in reply.results), reply
    return list(reply.results)


async def _bodies(stub, queue: str = "q") -> dict[str, bytes]:
    got: dict[str, bytes] = {}
    for response in await receive_once(stub, queue=queue, max_messages=100):
        got.update((m.message_id, m.body) for m in response.messages)
    return got


async def test_repeats_within_a_batch_answer_the_first(stub) -> None:
    await create(stub)
    results = await _send(stub, ["a", "b", "a", "", "a", "b", ""])
    assert [r.duplicate for r in results] == [False, False, True, False, True, True, False]
    ids = [r.message_id for r in results]
    assert ids[2] == ids[4] == ids[0] and ids[5] == ids[1]
    assert len({ids[0], ids[1], ids[3], ids[6]}) == 4
    assert await _bodies(stub) == {
        ids[0]: b"q:0:a",
        ids[1]: b"q:1:b",
        ids[3]: b"q:3:",
        ids[6]: b"q:6:",
    }


async def test_a_zero_window_still_dedups_within_the_batch_only(stub) -> None:
    await create(stub, dedup_window=_seconds(0))
    first = await _send(stub, ["a", "a"])
    assert [r.duplicate for r in first] == [False, True]
    assert first[1].message_id == first[0].message_id
    again = await _send(stub, ["a"])
    assert not again[0].duplicate and again[0].message_id != first[0].message_id
    assert (await stats(stub)).total == 2


async def test_repeats_across_batches_within_the_window(clocked, stub) -> None:
    await create(stub, dedup_window=_seconds(10))
    first = await _send(stub, ["a", "b"])
    await _advance(clocked, 9.5)
    second = await _send(stub, ["c", "b", "a", "c"])
    assert [r.duplicate for r in second] == [False, True, True, True]
    assert second[1].message_id == first[1].message_id
    assert second[2].message_id == first[0].message_id
    assert second[3].message_id == second[0].message_id
    assert (await stats(stub)).total == 3


async def test_after_the_window_an_id_enqueues_again_and_repeats_answer_the_new_one(
    clocked, stub
) -> None:
    await create(stub, dedup_window=_seconds(10))
    first = await _send(stub, ["a", "b"])
    await _advance(clocked, 10)  # now == sent + window: outside it (now < t + w is required)
    # The old records may still be stored (the housekeeping removes them later): the new ones
    # replace them.
    second = await _send(stub, ["a", "", "a"])
    assert [r.duplicate for r in second] == [False, False, True]
    assert second[0].message_id != first[0].message_id
    assert second[2].message_id == second[0].message_id
    await _advance(clocked, 9)
    third = await _send(stub, ["a", "b"])
    # a: sent again at 10 s, within its new window at 19 s; b: recorded at 0 s, its window over.
    assert [r.duplicate for r in third] == [True, False]
    assert third[0].message_id == second[0].message_id  # the new message, not the first
    assert third[1].message_id != first[1].message_id
    assert (await stats(stub)).total == 5


async def test_mixed_with_plain_entries_and_entry_ids(stub) -> None:
    await create(stub)
    entries = [
        pb.SendEntry(id="x", body=b"1", dedup_id="k"),
        pb.SendEntry(id="y", body=b"2"),
        pb.SendEntry(body=b"3", dedup_id="k"),
        pb.SendEntry(id="z", body=b"4", dedup_id="m"),
    ]
    reply = await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries))
    results = reply.results
    assert [r.id for r in results] == ["x", "y", "", "z"]
    assert [r.duplicate for r in results] == [False, False, True, False]
    assert results[2].message_id == results[0].message_id
    assert reply.server_time.seconds > 0
    got = await _bodies(stub)
    assert got == {
        results[0].message_id: b"1",
        results[1].message_id: b"2",
        results[3].message_id: b"4",
    }


async def test_a_bad_dedup_id_fails_alone(stub) -> None:
    await create(stub)
    entries = [
        pb.SendEntry(id="ok", body=b"1", dedup_id="a"),
        pb.SendEntry(id="long", body=b"2", dedup_id="d" * 129),
        pb.SendEntry(id="nul", body=b"3", dedup_id="a\x00b"),
        pb.SendEntry(id="max", body=b"4", dedup_id="é" * 128),
    ]
    reply = await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries))
    errors = {r.id: r.error.code for r in reply.results if r.HasField("error")}
    assert errors == {"long": 3, "nul": 3}
    assert "dedup_id" in reply.results[1].error.message
    assert (await stats(stub)).total == 2


async def test_the_same_outcomes_as_the_per_entry_way(clocked, stub) -> None:
    """The same batches to two queues: to "fast" as they are, to "slow" with a delay of 0 s on
    every entry (a field that takes the per-entry way). Duplicate flags, and which results
    share a message id, must agree batch by batch."""
    batches = [["a", "b", "a"], ["", "b", "c", "c"], ["a", "d"], ["b", "", "a", "e", "d"]]
    shapes = {}
    for queue in ("fast", "slow"):
        await create(stub, name=queue, dedup_window=_seconds(5))
    for queue, extra in (("fast", {}), ("slow", {"delay": _seconds(0)})):
        seen: dict[str, int] = {}
        shape = []
        for batch in batches:
            results = await _send(stub, batch, queue=queue, **extra)
            # Each message id named by the order it first appeared in: comparable across queues.
            shape.append([(r.duplicate, seen.setdefault(r.message_id, len(seen))) for r in results])
            await _advance(clocked, 3)
        shapes[queue] = shape
    assert shapes["fast"] == shapes["slow"]
