"""Long polls and follow streams over real gRPC: woken by events, flow-controlled, cancellable.

Tests synchronise on events (a stream parked on the server, a response arriving); time bounds
are only safety nets that turn a broken wake-up into a failure instead of a hang."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import duration_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from leaseq.server.clock import FakeClock
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import RunningServer, running_server

from .conftest import (
    SAFETY_TIMEOUT,
    create,
    receive_once,
    send,
    stats,
    until_parked_again,
    until_sleeping,
)

D = duration_pb2.Duration
LONG_WAIT = D(seconds=30)  # longer than SAFETY_TIMEOUT: only a wake-up can answer in time


async def next_response(stream) -> pb.GetMessagesResponse:
    return await asyncio.wait_for(stream.read(), SAFETY_TIMEOUT)


async def test_wait_time_zero_answers_at_once_with_one_empty_response(stub) -> None:
    await create(stub)
    responses = await receive_once(stub, queue="q", wait_time=D())
    assert len(responses) == 1
    assert list(responses[0].messages) == []
    assert responses[0].server_time.seconds > 0


async def test_a_waiting_receive_wakes_on_send(server, stub) -> None:
    await create(stub)
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(server, "q")
    await send(stub, "q", b"hello")
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [m.body for m in response.messages] == [b"hello"]
    assert response.messages[0].delivery_count == 1


async def test_a_waiting_receive_wakes_on_release(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"m")
    [held] = await receive_once(stub, queue="q", visibility_timeout=D(seconds=600))
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(server, "q")
    await stub.ChangeVisibility(
        pb.ChangeVisibilityRequest(
            queue="q",
            entries=[
                pb.ChangeVisibilityEntry(
                    receipt=held.messages[0].receipt, visibility_timeout=D(), reason="boom"
                )
            ],
        )
    )
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [(m.body, m.delivery_count, m.last_error) for m in response.messages] == [
        (b"m", 2, "boom")
    ]


async def test_a_waiting_receive_wakes_when_a_lease_expires(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"m")
    # A short real lease: the store has no event for time passing, the waiter's timer is it.
    [held] = await receive_once(stub, queue="q", visibility_timeout=D(nanos=200_000_000))
    [response] = await asyncio.wait_for(
        receive_once(stub, queue="q", wait_time=LONG_WAIT), SAFETY_TIMEOUT
    )
    assert [m.message_id for m in response.messages] == [held.messages[0].message_id]
    assert response.messages[0].delivery_count == 2
    assert response.messages[0].receipt != held.messages[0].receipt


async def test_a_waiting_receive_wakes_when_a_delay_ends(stub) -> None:
    await create(stub)
    await stub.SendMessages(
        pb.SendMessagesRequest(
            queue="q", entries=[pb.SendEntry(body=b"later", delay=D(nanos=200_000_000))]
        )
    )
    [response] = await asyncio.wait_for(
        receive_once(stub, queue="q", wait_time=LONG_WAIT), SAFETY_TIMEOUT
    )
    assert [m.body for m in response.messages] == [b"later"]


async def test_a_long_poll_ends_empty_after_wait_time(stub) -> None:
    await create(stub)
    responses = await asyncio.wait_for(
        receive_once(stub, queue="q", wait_time=D(nanos=100_000_000)), SAFETY_TIMEOUT
    )
    assert len(responses) == 1 and list(responses[0].messages) == []


async def test_cancelling_a_long_poll_frees_it_at_once(server, stub) -> None:
    await create(stub)
    call = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=1, wait_time=LONG_WAIT))
    await until_sleeping(server, "q")
    call.cancel()
    await until_sleeping(server, "q", 0)
    await send(stub, "q", b"m")
    current = await stats(stub)
    assert (current.visible, current.leased) == (1, 0)  # the cancelled poll took nothing


async def test_deleting_the_queue_ends_a_waiting_receive_with_not_found(server, stub) -> None:
    await create(stub)
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(server, "q")
    await stub.DeleteQueue(pb.DeleteQueueRequest(name="q"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


# --- follow streams ---------------------------------------------------------------------------


def follow(stub, **request) -> grpc.aio.UnaryStreamCall:
    request.setdefault("max_messages", 10)
    request.setdefault("visibility_timeout", D(seconds=600))
    return stub.GetMessages(pb.GetMessagesRequest(queue="q", follow=True, **request))


async def read_messages(stream, count: int) -> list[pb.ReceivedMessage]:
    messages: list[pb.ReceivedMessage] = []
    while len(messages) < count:
        messages.extend((await next_response(stream)).messages)
    return messages


async def test_follow_streams_batches_as_messages_arrive(server, stub) -> None:
    await create(stub)
    stream = follow(stub)
    await until_sleeping(server, "q")
    await send(stub, "q", b"1")
    assert [m.body for m in await read_messages(stream, 1)] == [b"1"]
    await until_sleeping(server, "q")
    await send(stub, "q", b"2", b"3")
    assert [m.body for m in await read_messages(stream, 2)] == [b"2", b"3"]
    stream.cancel()


async def test_follow_pauses_at_max_outstanding_and_resumes_on_delete(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2", b"3")
    stream = follow(stub, max_outstanding=2)
    first = await read_messages(stream, 2)
    assert [m.body for m in first] == [b"1", b"2"]
    # Paused: parked although a message is visible.
    await until_sleeping(server, "q")
    current = await stats(stub)
    assert (current.leased, current.visible) == (2, 1)

    await stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q", receipts=[first[0].receipt]))
    assert [m.body for m in await read_messages(stream, 1)] == [b"3"]
    await until_sleeping(server, "q")  # paused again: 2 outstanding
    stream.cancel()


async def test_follow_resumes_when_a_lease_is_released(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2")
    stream = follow(stub, max_outstanding=1)
    [first] = await read_messages(stream, 1)
    await until_sleeping(server, "q")
    await stub.ChangeVisibility(
        pb.ChangeVisibilityRequest(
            queue="q",
            entries=[pb.ChangeVisibilityEntry(receipt=first.receipt, visibility_timeout=D())],
        )
    )
    # The released message is visible since the release, so "2" (visible since its send) is
    # the oldest visible one.
    [second] = await read_messages(stream, 1)
    assert second.body == b"2"
    stream.cancel()


async def test_follow_resumes_when_a_lease_expires(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2")
    stream = follow(stub, max_outstanding=1, visibility_timeout=D(nanos=200_000_000))
    [first] = await read_messages(stream, 1)
    [second] = await read_messages(stream, 1)  # only after the first lease ended
    assert (first.body, second.body) == (b"1", b"2")
    stream.cancel()


async def test_follow_extension_keeps_the_stream_paused() -> None:
    # A fake clock jumps past the original lease end; had the stream kept that end, it would
    # count the lease as settled and deliver "2".
    clock = FakeClock()
    async with running_server(clock=clock) as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            await create(stub)
            await send(stub, "q", b"1", b"2")
            stream = follow(stub, max_outstanding=1, visibility_timeout=D(seconds=30))
            [first] = await read_messages(stream, 1)
            await stub.ChangeVisibility(
                pb.ChangeVisibilityRequest(
                    queue="q",
                    entries=[
                        pb.ChangeVisibilityEntry(
                            receipt=first.receipt, visibility_timeout=D(seconds=600)
                        )
                    ],
                )
            )
            await until_sleeping(server, "q")
            parked = await asyncio.to_thread(server.parks, "q")
            await asyncio.to_thread(server.advance, 31)  # wakes every waiter
            await until_parked_again(server, "q", parked)
            current = await stats(stub)
            assert (current.leased, current.visible) == (1, 1)
            await stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q", receipts=[first.receipt]))
            [second] = await read_messages(stream, 1)
            assert second.body == b"2"
            stream.cancel()


async def test_follow_waits_at_the_in_flight_limit(server, stub) -> None:
    await create(stub, max_in_flight=1)
    await send(stub, "q", b"1", b"2")
    [held] = await receive_once(stub, queue="q", max_messages=1)
    stream = follow(stub)
    await until_sleeping(server, "q")  # waiting on OverLimit, not failing
    await stub.DeleteMessages(
        pb.DeleteMessagesRequest(queue="q", receipts=[held.messages[0].receipt])
    )
    [second] = await read_messages(stream, 1)
    assert second.body == b"2"
    stream.cancel()


async def test_follow_resumes_after_purge(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2")
    stream = follow(stub, max_outstanding=1)
    [first] = await read_messages(stream, 1)
    await until_sleeping(server, "q")
    await stub.PurgeQueue(pb.PurgeQueueRequest(name="q"))  # every lease is gone
    await send(stub, "q", b"3")
    [third] = await read_messages(stream, 1)
    assert third.body == b"3"
    stream.cancel()


async def test_drain_ends_follow_streams_cleanly(server, stub) -> None:
    await create(stub)
    stream = follow(stub)
    await until_sleeping(server, "q")
    await asyncio.to_thread(server.drain)
    assert await next_response(stream) is grpc.aio.EOF
    assert await stream.code() == grpc.StatusCode.OK


async def test_drain_answers_a_waiting_long_poll_now(server, stub) -> None:
    await create(stub)
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(server, "q")
    await asyncio.to_thread(server.drain)
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert list(response.messages) == []


async def test_cancelled_follow_stream_is_forgotten(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1")
    stream = follow(stub, max_outstanding=1)
    [first] = await read_messages(stream, 1)
    await until_sleeping(server, "q")
    stream.cancel()
    await until_sleeping(server, "q", 0)

    # Its lease still counts in the store until deleted, which now touches no stream.
    await stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q", receipts=[first.receipt]))
    assert (await stats(stub)).total == 0


# --- wake-ups at an earlier instant: a lease shortened, on the fake clock ------------------------
#
# The server runs on a FakeClock: time moves only when the test advances it, and advancing it
# fires exactly the timers that instant reaches (no wake_all, unlike server.advance). A waiter
# that was not re-armed at the new lease end would sleep until its wait_time (LONG_WAIT, beyond
# the safety net): the test fails instead of passing late.


@pytest.fixture
async def clocked_stub(clocked: RunningServer) -> AsyncIterator[pb_grpc.QueueServiceStub]:
    async with grpc.aio.insecure_channel(clocked.target) as channel:
        yield pb_grpc.QueueServiceStub(channel)


async def advance(server: RunningServer, seconds: float) -> None:
    """Move the fake clock only: its timers fire, nobody else is woken."""
    assert isinstance(server.clock, FakeClock)
    await asyncio.to_thread(server.clock.advance, seconds)


async def shorten(stub, receipt: str, seconds: int) -> None:
    reply = await stub.ChangeVisibility(
        pb.ChangeVisibilityRequest(
            queue="q",
            entries=[
                pb.ChangeVisibilityEntry(receipt=receipt, visibility_timeout=D(seconds=seconds))
            ],
        )
    )
    assert reply.results[0].status == pb.LEASE_STATUS_OK, reply


async def leased_message(stub, seconds: int = 30) -> pb.ReceivedMessage:
    await create(stub)
    await send(stub, "q", b"m")
    [held] = await receive_once(stub, queue="q", visibility_timeout=D(seconds=seconds))
    return held.messages[0]


async def test_a_long_poll_wakes_when_a_lease_is_shortened(clocked, clocked_stub) -> None:
    stub = clocked_stub
    held = await leased_message(stub)
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(clocked, "q")  # it looked: the lease ends in 30 s
    await shorten(stub, held.receipt, 1)  # what release(delay=1s) does
    await advance(clocked, 1)
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [(m.message_id, m.delivery_count) for m in response.messages] == [(held.message_id, 2)]


async def test_a_long_poll_wakes_when_update_message_shortens_a_lease(
    clocked, clocked_stub
) -> None:
    stub = clocked_stub
    held = await leased_message(stub)
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(clocked, "q")
    await stub.UpdateMessage(
        pb.UpdateMessageRequest(
            queue="q", receipt=held.receipt, body=b"m2", visibility_timeout=D(seconds=1)
        )
    )
    await advance(clocked, 1)
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [(m.body, m.delivery_count) for m in response.messages] == [(b"m2", 2)]


async def test_a_follow_stream_wakes_when_a_lease_is_shortened(clocked, clocked_stub) -> None:
    stub = clocked_stub
    held = await leased_message(stub)
    stream = follow(stub)
    await until_sleeping(clocked, "q")
    await shorten(stub, held.receipt, 1)
    await advance(clocked, 1)
    [again] = await read_messages(stream, 1)
    assert (again.message_id, again.delivery_count) == (held.message_id, 2)
    stream.cancel()


async def test_a_paused_follow_stream_resumes_when_its_own_lease_is_shortened(
    clocked, clocked_stub
) -> None:
    stub = clocked_stub
    await create(stub)
    await send(stub, "q", b"1", b"2")
    stream = follow(stub, max_outstanding=1, visibility_timeout=D(seconds=30))
    [first] = await read_messages(stream, 1)
    await until_sleeping(clocked, "q")  # paused: its one lease ends in 30 s
    await shorten(stub, first.receipt, 1)
    await advance(clocked, 1)
    [second] = await read_messages(stream, 1)  # the lease ended: room for one more
    assert second.body == b"2"
    stream.cancel()


async def test_a_delayed_send_wakes_a_waiter_when_the_delay_ends(clocked, clocked_stub) -> None:
    stub = clocked_stub
    await create(stub)
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=LONG_WAIT))
    await until_sleeping(clocked, "q")  # it looked at an empty queue: no timer
    later = pb.SendEntry(body=b"later", delay=D(seconds=20))  # beyond the safety net
    await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[later]))
    await advance(clocked, 20)
    [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [m.body for m in response.messages] == [b"later"]


# --- how many waiters an event wakes -----------------------------------------------------------
#
# `parks` counts how often the live streams of a queue parked: every stream woken for nothing
# looks at the store and parks again. Ringing every waiter for every event cost one store call
# per waiter (`python -m leaseq.bench.wakeups` measures what a send costs with many waiting).

WAITERS = 20


async def many_follow_streams(server, stub, count: int = WAITERS, **request) -> list:
    streams = [follow(stub, max_messages=1, **request) for _ in range(count)]
    await until_sleeping(server, "q", count)
    return streams


async def first_delivery(streams) -> pb.ReceivedMessage:
    """The one message some stream of streams gets."""
    reads = [asyncio.ensure_future(s.read()) for s in streams]
    done, _ = await asyncio.wait(reads, timeout=SAFETY_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
    assert done, "no stream got the message"
    return next(iter(done)).result().messages[0]  # the other reads end with their streams


async def test_a_send_of_one_message_wakes_about_one_of_many_follow_streams(server, stub) -> None:
    await create(stub)
    streams = await many_follow_streams(server, stub)
    parked, broadcast = await asyncio.to_thread(server.parks, "q"), await broadcasts(server)
    await send(stub, "q", b"m")
    assert (await first_delivery(streams)).body == b"m"
    await until_sleeping(server, "q", WAITERS)
    woken_for_nothing = await asyncio.to_thread(server.parks, "q") - parked
    allowed = 3 + WAITERS * (await broadcasts(server) - broadcast)
    # The one that got it looks once more; one more is woken in case it left others behind.
    assert woken_for_nothing <= allowed, f"{woken_for_nothing} of {WAITERS} streams were woken"
    for stream in streams:
        stream.cancel()


async def test_a_send_of_one_message_wakes_about_one_of_many_long_polls(server, stub) -> None:
    await create(stub)
    polls = [
        asyncio.create_task(receive_once(stub, queue="q", max_messages=1, wait_time=LONG_WAIT))
        for _ in range(WAITERS)
    ]
    await until_sleeping(server, "q", WAITERS)
    parked, broadcast = await asyncio.to_thread(server.parks, "q"), await broadcasts(server)
    await send(stub, "q", b"m")
    done, _ = await asyncio.wait(polls, timeout=SAFETY_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
    assert [[m.body for m in r.messages] for r in next(iter(done)).result()] == [[b"m"]]
    await until_sleeping(server, "q", WAITERS - 1)
    woken_for_nothing = await asyncio.to_thread(server.parks, "q") - parked
    allowed = 2 + WAITERS * (await broadcasts(server) - broadcast)
    assert woken_for_nothing <= allowed, f"{woken_for_nothing} of {WAITERS} long polls were woken"
    for poll in polls:
        poll.cancel()


async def test_an_ack_wakes_no_waiting_stream(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"m")
    [held] = await receive_once(stub, queue="q", visibility_timeout=D(seconds=600))
    streams = await many_follow_streams(server, stub)
    parked, broadcast = await asyncio.to_thread(server.parks, "q"), await broadcasts(server)
    receipt = held.messages[0].receipt
    await stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q", receipts=[receipt]))
    # A stream that was woken would look and park again: drain the loop with a second call.
    await stats(stub)
    await until_sleeping(server, "q", WAITERS)
    allowed = WAITERS * (await broadcasts(server) - broadcast)
    assert await asyncio.to_thread(server.parks, "q") - parked <= allowed
    for stream in streams:
        stream.cancel()


async def test_a_send_of_n_messages_wakes_about_n_waiters(server, stub) -> None:
    await create(stub)
    streams = await many_follow_streams(server, stub)
    longpoll = server.app.service.longpoll
    woken = await asyncio.to_thread(server.call, _read(lambda: longpoll.woken))
    broadcast = await broadcasts(server)
    await send(stub, "q", *[b"%d" % i for i in range(10)])
    await until_sleeping(server, "q", WAITERS)
    current = await stats(stub)
    assert (current.visible, current.leased) == (0, 10)
    woken = await asyncio.to_thread(server.call, _read(lambda: longpoll.woken)) - woken
    # 10 for the messages, and one hand-on per stream that filled its batch (of 1).
    assert woken <= 20 + WAITERS * (await broadcasts(server) - broadcast), woken
    for stream in streams:
        stream.cancel()


async def test_an_expiry_wakes_about_one_of_many_follow_streams(clocked, clocked_stub) -> None:
    stub = clocked_stub
    held = await leased_message(stub, seconds=30)
    streams = await many_follow_streams(clocked, stub)  # each looked: the lease ends in 30 s
    parked, broadcast = await asyncio.to_thread(clocked.parks, "q"), await broadcasts(clocked)
    await advance(clocked, 30)  # one timer for the queue, not one per stream
    again = await first_delivery(streams)
    assert (again.message_id, again.delivery_count) == (held.message_id, 2)
    await until_sleeping(clocked, "q", WAITERS)
    woken_for_nothing = await asyncio.to_thread(clocked.parks, "q") - parked
    allowed = 3 + WAITERS * (await broadcasts(clocked) - broadcast)
    assert woken_for_nothing <= allowed, f"{woken_for_nothing} of {WAITERS} streams were woken"
    for stream in streams:
        stream.cancel()


async def test_waiters_of_other_channels_are_not_woken_by_a_send(server, stub) -> None:
    await create(stub)
    others = await many_follow_streams(server, stub, channel_filter="other")
    mine = follow(stub, channel_filter="mine")
    await until_sleeping(server, "q", WAITERS + 1)
    parked, broadcast = await asyncio.to_thread(server.parks, "q"), await broadcasts(server)
    await stub.SendMessages(
        pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"m", channel="mine")])
    )
    [got] = await read_messages(mine, 1)
    assert got.body == b"m"
    await until_sleeping(server, "q", WAITERS + 1)
    allowed = 1 + (WAITERS + 1) * (await broadcasts(server) - broadcast)
    assert await asyncio.to_thread(server.parks, "q") - parked <= allowed  # mine, once more
    for stream in [*others, mine]:
        stream.cancel()


async def broadcasts(server) -> int:
    """Wake-ups of every waiter at once so far. PostgreSQL's change feed has one as a safety net
    (every FALLBACK_WAKE_SECONDS, and when its LISTEN connection comes up): the counts below
    allow for those, as WAITERS more each."""
    longpoll = server.app.service.longpoll
    return await asyncio.to_thread(server.call, _read(lambda: longpoll.broadcasts))


def _read(get):
    async def read():
        return get()

    return read


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=40),
            st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
            st.floats(min_value=-10.0, max_value=10.0, allow_nan=False),
        ),
        max_size=20,
    )
)
def test_chunk_facts_are_the_bytes_and_the_earliest_lease_end(rows) -> None:
    """One pass gives what the long poll needs of a chunk: message_size summed and the earliest
    visible_at after now (None when nothing was leased)."""
    from leaseq.server.domain.rules import message_size
    from leaseq.server.domain.types import DeliveredMessage
    from leaseq.server.longpoll import chunk_facts

    messages = [
        DeliveredMessage(i, "m", "r", body, attributes, "", 0.0, 1.0, visible_at, 1, "")
        for i, (body, attributes, visible_at) in enumerate(rows)
    ]
    ends = [m.visible_at for m in messages if m.visible_at > 0.0]
    assert chunk_facts(messages, 0.0) == (
        sum(message_size(m.body, m.attributes) for m in messages),
        min(ends, default=None),
    )
