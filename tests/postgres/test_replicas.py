"""Several stores (replicas) over one schema: one delivery per message, shared receipts, wake-ups
across replicas, and time taken from the database.

Each store has its own pool and its own LISTEN connection, exactly as two `leaseq serve`
processes would; test_processes.py does the same with real processes."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import LeaseStatus, NewMessage, QueueConfig, VisibilityChange
from leaseq.server.store.postgres import PostgresStore, notifications
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.postgres import connect
from tests.support.server import RunningServer, running_server

D = duration_pb2.Duration
SAFETY_TIMEOUT = 10.0  # a broken wake-up fails instead of hanging
# A wake-up across replicas is one NOTIFY away: milliseconds. The bound is generous for a loaded
# test machine, and far below what the fallbacks would give (the store's safety wake-up after
# FALLBACK_WAKE_SECONDS, the poll's wait_time).
WAKE_BOUND = 2.0


@pytest.fixture
async def replicas(url: str) -> AsyncIterator[list[PostgresStore]]:
    stores = [PostgresStore.from_url(url) for _ in range(2)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        yield stores
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_concurrent_receivers_on_two_replicas_never_share_a_delivery(replicas) -> None:
    a, b = replicas
    await a.create_queue("q", QueueConfig())
    total = 600
    for start in range(0, total, 200):
        await (a if start % 400 else b).send(
            "q", [NewMessage(body=str(i).encode()) for i in range(start, start + 200)]
        )
    delivered: Counter[bytes] = Counter()

    async def consume(store: PostgresStore) -> None:
        while True:
            outcome = await store.receive("q", 7, visibility_timeout=120.0)
            if not outcome.messages:
                return
            delivered.update(m.body for m in outcome.messages)

    await asyncio.gather(*(consume(replicas[i % 2]) for i in range(12)))
    assert sum(delivered.values()) == total
    assert set(delivered.values()) == {1}, [b for b, n in delivered.items() if n > 1]


async def test_receipts_of_one_replica_work_on_the_other(replicas) -> None:
    a, b = replicas
    await a.create_queue("q", QueueConfig())
    await a.send("q", [NewMessage(body=b"one"), NewMessage(body=b"two")])
    first, second = (await b.receive("q", 2, visibility_timeout=60.0)).messages
    [changed] = await a.change_visibility("q", [VisibilityChange(first.receipt, 0.0)])
    assert changed.status is LeaseStatus.OK
    again = (await a.receive("q", 1, visibility_timeout=60.0)).messages[0]
    assert again.message_id == first.message_id and again.delivery_count == 2
    # The first receipt was superseded by the redelivery on the other replica (fencing).
    outcome = await b.delete("q", [first.receipt, again.receipt, second.receipt, "forged"])
    assert [r.status for r in outcome.results] == [
        LeaseStatus.RECEIPT_SUPERSEDED,
        LeaseStatus.OK,
        LeaseStatus.OK,
        LeaseStatus.INVALID_RECEIPT,
    ]
    retried = await a.delete("q", [again.receipt])
    assert retried.results[0].status is LeaseStatus.ALREADY_DELETED


async def test_two_replicas_sending_one_dedup_id_at_once_agree_on_one_message(replicas) -> None:
    a, b = replicas
    await a.create_queue("q", QueueConfig(dedup_window=600.0))
    outcomes = await asyncio.gather(
        *(
            store.send("q", [NewMessage(body=b"x", dedup_id=f"d{i}") for i in range(50)])
            for store in (a, b, a, b)
        )
    )
    for i in range(50):
        ids = {batch[i].message_id for batch in outcomes}
        assert len(ids) == 1, ids
        assert sum(not batch[i].duplicate for batch in outcomes) == 1
    assert (await a.stats("q")).visible == 50


async def test_time_comes_from_the_database_not_the_replica_clock(replicas) -> None:
    a, b = replicas
    # Replica a's machine clock is an hour fast: what the service reads from a.clock is the
    # database's time all the same, and so are the instants of its operations.
    with connect() as conn:
        [[db_now]] = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
    assert abs(a.clock.now() - db_now) < 1.0
    a._db_clock.offset += 3600.0  # what a skewed replica would have measured
    await a.create_queue("q", QueueConfig())
    await b.send("q", [NewMessage(body=b"m")])
    [held] = (await a.receive("q", 1, visibility_timeout=30.0)).messages
    assert db_now - 1.0 < held.enqueued_at <= held.visible_at - 30.0 < db_now + 60.0
    # b agrees that the lease is live (a's notion of time played no part in it).
    assert (await b.receive("q", 1, visibility_timeout=30.0)).messages == []
    assert (await b.stats("q")).leased == 1


async def test_a_replica_hears_of_changes_made_through_the_other(replicas) -> None:
    a, b = replicas
    await asyncio.wait_for(a.listening.wait(), SAFETY_TIMEOUT)
    heard: asyncio.Queue[str | None] = asyncio.Queue()
    a.subscribe(heard.put_nowait)
    await b.create_queue("q", QueueConfig())
    await b.send("q", [NewMessage(body=b"m")])
    while (queue := await asyncio.wait_for(heard.get(), SAFETY_TIMEOUT)) is None:
        pass  # a catch-all wake-up may come first
    assert queue == "q"


async def test_a_replica_does_not_hear_its_own_changes(replicas) -> None:
    a, b = replicas
    await asyncio.gather(*(asyncio.wait_for(s.listening.wait(), SAFETY_TIMEOUT) for s in replicas))
    heard_a: list[str | None] = []
    heard_b: asyncio.Queue[str | None] = asyncio.Queue()
    a.subscribe(heard_a.append)
    b.subscribe(heard_b.put_nowait)
    await a.create_queue("q", QueueConfig())
    await a.send("q", [NewMessage(body=b"m")])
    while await asyncio.wait_for(heard_b.get(), SAFETY_TIMEOUT) is None:
        pass
    # b heard a's send; a's own notification went past it (the service woke its waiters).
    assert "q" not in heard_a


async def _next_named(heard: asyncio.Queue[str | None]) -> str:
    while (queue := await asyncio.wait_for(heard.get(), SAFETY_TIMEOUT)) is None:
        pass  # a catch-all wake-up may come between
    return queue


async def test_changes_made_within_the_notify_gap_are_told_together(replicas, monkeypatch) -> None:
    # The first change after a quiet spell is told at once; those made during the gap after it go
    # out in one NOTIFY once the gap is over (one payload per queue), not one NOTIFY each.
    monkeypatch.setattr(notifications, "NOTIFY_GAP_SECONDS", 1.0)
    a, b = replicas
    await asyncio.gather(*(asyncio.wait_for(s.listening.wait(), SAFETY_TIMEOUT) for s in replicas))
    heard: asyncio.Queue[str | None] = asyncio.Queue()
    a.subscribe(heard.put_nowait)
    await b.create_queue("q", QueueConfig())
    await b.create_queue("r", QueueConfig())
    await b.send("q", [NewMessage(body=b"first")])
    assert await _next_named(heard) == "q"
    for _ in range(10):
        await b.send("q", [NewMessage(body=b"m")])
    await b.send("r", [NewMessage(body=b"m")])
    assert [await _next_named(heard), await _next_named(heard)] == ["q", "r"]


# --- over gRPC: two servers in this process, one schema ------------------------------------


async def _until_sleeping(server: RunningServer, queue: str) -> None:
    async def poll() -> None:
        while await asyncio.to_thread(server.sleeping, queue) != 1:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), SAFETY_TIMEOUT)


async def _listening(server: RunningServer) -> None:
    store = server.store
    assert isinstance(store, PostgresStore)
    await asyncio.to_thread(server.call, lambda: asyncio.wait_for(store.listening.wait(), 10))


async def test_a_long_poll_on_one_replica_wakes_on_a_send_through_the_other(url: str) -> None:
    async with running_server(url) as a, running_server(url) as b:
        await asyncio.gather(_listening(a), _listening(b))
        async with (
            grpc.aio.insecure_channel(a.target) as ca,
            grpc.aio.insecure_channel(b.target) as cb,
        ):
            stub_a, stub_b = pb_grpc.QueueServiceStub(ca), pb_grpc.QueueServiceStub(cb)
            await stub_b.CreateQueue(pb.CreateQueueRequest(name="q"))
            for _ in range(3):  # each round: a fresh long poll parked on a, a send through b
                call = stub_a.GetMessages(
                    pb.GetMessagesRequest(queue="q", max_messages=10, wait_time=D(seconds=30))
                )
                waiting = asyncio.create_task(_read_all(call))
                await _until_sleeping(a, "q")
                sent = time.monotonic()
                await stub_b.SendMessages(
                    pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(id="1", body=b"hi")])
                )
                [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
                woke = time.monotonic() - sent
                assert [m.body for m in response.messages] == [b"hi"]
                assert woke < WAKE_BOUND, f"woke {woke:.3f}s after the send"
                print(f"long poll on a woke {woke * 1000:.1f} ms after the send through b")
                await stub_a.DeleteMessages(
                    pb.DeleteMessagesRequest(
                        queue="q", receipts=[m.receipt for m in response.messages]
                    )
                )


async def test_a_follow_stream_on_one_replica_gets_sends_through_the_other(url: str) -> None:
    async with running_server(url) as a, running_server(url) as b:
        await asyncio.gather(_listening(a), _listening(b))
        async with (
            grpc.aio.insecure_channel(a.target) as ca,
            grpc.aio.insecure_channel(b.target) as cb,
        ):
            stub_a, stub_b = pb_grpc.QueueServiceStub(ca), pb_grpc.QueueServiceStub(cb)
            await stub_a.CreateQueue(pb.CreateQueueRequest(name="q"))
            stream = stub_a.GetMessages(
                pb.GetMessagesRequest(queue="q", max_messages=10, follow=True)
            )
            got: list[bytes] = []
            for i in range(3):
                await _until_sleeping(a, "q")
                await stub_b.SendMessages(
                    pb.SendMessagesRequest(
                        queue="q", entries=[pb.SendEntry(id="1", body=f"m{i}".encode())]
                    )
                )
                response = await asyncio.wait_for(stream.read(), SAFETY_TIMEOUT)
                got += [m.body for m in response.messages]
            stream.cancel()
            assert got == [b"m0", b"m1", b"m2"]


async def _lease_one(
    stub: pb_grpc.QueueServiceStub, queue: str, seconds: int
) -> pb.ReceivedMessage:
    """The one message a plain (non-follow) GetMessages of one leases, for `seconds`."""
    [held] = [
        m
        async for r in stub.GetMessages(
            pb.GetMessagesRequest(
                queue=queue, max_messages=1, visibility_timeout=D(seconds=seconds)
            )
        )
        for m in r.messages
    ]
    return held


async def _read_all(call) -> list[pb.GetMessagesResponse]:
    return [r async for r in call]


async def test_a_lease_shortened_through_one_replica_wakes_a_long_poll_on_the_other(
    url: str,
) -> None:
    # Both replicas on one FakeClock: time moves only when the test advances it, and then only
    # the timers that instant reaches fire. The poll on a learns of the new lease end through the
    # change feed (one look), and must wake at that end, not at the old one or its wait_time.
    clock = FakeClock()
    async with running_server(url, clock) as a, running_server(url, clock) as b:
        await asyncio.gather(_listening(a), _listening(b))
        async with (
            grpc.aio.insecure_channel(a.target) as ca,
            grpc.aio.insecure_channel(b.target) as cb,
        ):
            stub_a, stub_b = pb_grpc.QueueServiceStub(ca), pb_grpc.QueueServiceStub(cb)
            await stub_b.CreateQueue(pb.CreateQueueRequest(name="q"))
            await stub_b.SendMessages(
                pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(id="1", body=b"m")])
            )
            held = await _lease_one(stub_b, "q", seconds=600)
            call = stub_a.GetMessages(
                pb.GetMessagesRequest(queue="q", max_messages=1, wait_time=D(seconds=30))
            )
            waiting = asyncio.create_task(_read_all(call))
            await _until_sleeping(a, "q")  # it looked: the lease ends in 600 s
            parked = await asyncio.to_thread(a.parks, "q")
            await stub_b.ChangeVisibility(
                pb.ChangeVisibilityRequest(
                    queue="q",
                    entries=[
                        pb.ChangeVisibilityEntry(
                            receipt=held.receipt, visibility_timeout=D(seconds=20)
                        )
                    ],
                )
            )
            await _until_parked_again(a, "q", parked)  # heard of it, looked, parked
            await asyncio.to_thread(clock.advance, 20)
            [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
            assert [(m.message_id, m.delivery_count) for m in response.messages] == [
                (held.message_id, 2)
            ]


async def _until_parked_again(server: RunningServer, queue: str, parked: int) -> None:
    async def poll() -> None:
        while await asyncio.to_thread(server.parks, queue) <= parked:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), SAFETY_TIMEOUT)


async def test_replicas_wake_each_other_at_the_end_of_a_retry_backoff(url: str) -> None:
    # One FakeClock for both replicas, as above. A release through b waits out the queue's
    # backoff: the poll parked on a hears of it, looks, and must wake at the backoff's end (not
    # at once, nor at its wait_time). Then a lease a granted runs out: the poll parked on b knows
    # its end from its own look, and at that end learns the redelivery instant and waits for it.
    clock = FakeClock()
    async with running_server(url, clock) as a, running_server(url, clock) as b:
        await asyncio.gather(_listening(a), _listening(b))
        async with (
            grpc.aio.insecure_channel(a.target) as ca,
            grpc.aio.insecure_channel(b.target) as cb,
        ):
            stub_a, stub_b = pb_grpc.QueueServiceStub(ca), pb_grpc.QueueServiceStub(cb)
            policy = pb.RetryPolicy(minimum_backoff=D(seconds=5), maximum_backoff=D(seconds=5))
            await stub_b.CreateQueue(
                pb.CreateQueueRequest(
                    name="q",
                    config=pb.QueueConfig(visibility_timeout=D(seconds=30), retry_policy=policy),
                )
            )
            await stub_b.SendMessages(
                pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(id="1", body=b"m")])
            )
            held = await _lease_one(stub_b, "q", seconds=600)
            call = stub_a.GetMessages(
                pb.GetMessagesRequest(queue="q", max_messages=1, wait_time=D(seconds=30))
            )
            waiting = asyncio.create_task(_read_all(call))
            await _until_sleeping(a, "q")
            parked = await asyncio.to_thread(a.parks, "q")
            [result] = (
                await stub_b.ChangeVisibility(
                    pb.ChangeVisibilityRequest(
                        queue="q",
                        entries=[
                            pb.ChangeVisibilityEntry(
                                receipt=held.receipt, visibility_timeout=D(seconds=0)
                            )
                        ],
                    )
                )
            ).results
            assert result.visible_at.seconds - int(clock.now()) in (4, 5)  # now + 5 s
            await _until_parked_again(a, "q", parked)  # heard of it, looked: not yet visible
            await asyncio.to_thread(clock.advance, 4.9)
            assert await _state_of(stub_b, "q") == pb.MESSAGE_STATE_DELAYED
            await asyncio.to_thread(clock.advance, 0.1)
            [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
            [second] = response.messages
            assert (second.message_id, second.delivery_count) == (held.message_id, 2)

            # a's lease (30 s, the queue's) runs out; a poll parked on b.
            call = stub_b.GetMessages(
                pb.GetMessagesRequest(queue="q", max_messages=1, wait_time=D(seconds=30))
            )
            waiting = asyncio.create_task(_read_all(call))
            await _until_sleeping(b, "q")
            parked = await asyncio.to_thread(b.parks, "q")
            await asyncio.to_thread(clock.advance, 30)  # the lease ends: b looks, parks again
            await _until_parked_again(b, "q", parked)
            assert await _state_of(stub_a, "q") == pb.MESSAGE_STATE_DELAYED
            await asyncio.to_thread(clock.advance, 5)  # the backoff (n = 2: min(5, 10))
            [response] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
            assert [(m.message_id, m.delivery_count) for m in response.messages] == [
                (held.message_id, 3)
            ]


async def _state_of(stub: pb_grpc.QueueServiceStub, queue: str) -> int:
    """The state of the queue's one message, as a peek through this replica sees it."""
    page = await stub.PeekMessages(
        pb.PeekMessagesRequest(
            queue=queue, max_messages=1, include_leased=True, include_delayed=True
        )
    )
    [message] = page.messages
    return message.state
