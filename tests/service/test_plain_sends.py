"""SendMessages' fast way for entries that are only an id and a body (service._send_plain,
QueueCore.send_bodies, SqliteStore.send_bodies): the same outcome as the per-entry way on every
store, including the cases that leave it (another field, a body over max_message_bytes, a
repeated id) and the wake-up of a waiting receive."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from leaseq.v1 import queue_service_pb2 as pb

from .conftest import SAFETY_TIMEOUT, create, receive_once, stats, until_sleeping


async def _receive_all(stub, n: int) -> list[pb.ReceivedMessage]:
    got: list[pb.ReceivedMessage] = []
    for response in await receive_once(stub, queue="q", max_messages=n):
        got += response.messages
    return got


async def test_plain_entries_with_and_without_ids(stub) -> None:
    await create(stub)
    entries = [pb.SendEntry(id=str(i), body=b"m%d" % i) for i in range(5)]
    entries += [pb.SendEntry(body=b"no id"), pb.SendEntry(id="ü"), pb.SendEntry()]
    reply = await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries))
    assert [r.id for r in reply.results] == [e.id for e in entries]
    assert not any(r.HasField("error") or r.duplicate for r in reply.results)
    assert len({r.message_id for r in reply.results}) == len(entries)
    assert reply.server_time.seconds > 0
    got = await _receive_all(stub, 10)
    assert {m.message_id: m.body for m in got} == {
        r.message_id: e.body for r, e in zip(reply.results, entries)
    }
    assert all(not m.attributes and not m.channel for m in got)
    current = await stats(stub)
    assert (current.total, current.leased) == (len(entries), len(entries))


async def test_a_body_over_the_limit_fails_alone(stub) -> None:
    await create(stub, max_message_bytes=1024)
    entries = [pb.SendEntry(id="a", body=b"x" * 1024), pb.SendEntry(id="b", body=b"x" * 1025)]
    reply = await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries))
    assert not reply.results[0].HasField("error") and reply.results[0].message_id
    assert reply.results[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "max_message_bytes" in reply.results[1].error.message
    assert (await stats(stub)).total == 1


async def test_a_repeated_id_is_refused_as_before(stub) -> None:
    await create(stub)
    entries = [pb.SendEntry(id="a", body=b"1"), pb.SendEntry(id="b"), pb.SendEntry(id="a")]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "repeats the id of entries[0]" in str(caught.value.details())
    assert (await stats(stub)).total == 0


async def test_unknown_queue_and_empty_batch(stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SendMessages(
            pb.SendMessagesRequest(queue="nope", entries=[pb.SendEntry(body=b"x")])
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    await create(stub)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SendMessages(pb.SendMessagesRequest(queue="q"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_mixed_batch_takes_the_per_entry_way(stub) -> None:
    await create(stub)
    entries = [pb.SendEntry(id="a", body=b"1"), pb.SendEntry(id="b", body=b"2", channel="eu")]
    reply = await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries))
    got = {m.body: m.channel for m in await _receive_all(stub, 10)}
    assert got == {b"1": "", b"2": "eu"} and len(reply.results) == 2


async def test_a_plain_send_wakes_a_waiting_receive(server, stub) -> None:
    await create(stub)
    waiting = asyncio.create_task(
        receive_once(stub, queue="q", max_messages=1, wait_time=_seconds(20))
    )
    await until_sleeping(server, "q")
    await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"x")]))
    responses = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [m.body for r in responses for m in r.messages] == [b"x"]


async def test_a_default_delay_holds_plain_sends(stub) -> None:
    await create(stub, default_delay=_seconds(60))
    await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"x")]))
    current = await stats(stub)
    assert (current.delayed, current.visible) == (1, 0)


def _seconds(n: int):
    from google.protobuf import duration_pb2

    return duration_pb2.Duration(seconds=n)
