"""The one-statement send, receive and ack (statements.py: receive_sql, SEND_SQL,
DELETE_RECEIPTS_SQL) and their ways back to the transaction way: acks mixing current and stale
receipts, a queue made again under the same name, the notification of an ack only near the
in-flight limit, and a follow stream held by that limit on one replica woken by an ack through another.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.server.domain.types import (
    AllDeleted,
    LeaseStatus,
    NewMessage,
    QueueConfig,
    VisibilityChange,
)
from leaseq.server.errors import OverLimit
from leaseq.server.store.postgres import PostgresStore
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.postgres import connect, store_url
from tests.support.server import running_server

from .test_replicas import SAFETY_TIMEOUT, WAKE_BOUND, _lease_one, _listening, _until_sleeping

D = duration_pb2.Duration


@pytest.fixture
async def replicas(url: str) -> AsyncIterator[list[PostgresStore]]:
    stores = [PostgresStore.from_url(url) for _ in range(2)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        await asyncio.gather(
            *(asyncio.wait_for(s.listening.wait(), SAFETY_TIMEOUT) for s in stores)
        )
        yield stores
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_an_ack_mixing_current_and_stale_receipts_answers_each_in_order(store) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=str(i).encode()) for i in range(4)])
    first = (await store.receive("q", 4, 60.0)).messages
    # The first message is let go and delivered again: its first receipt is superseded.
    await store.change_visibility("q", [VisibilityChange(first[0].receipt, 0.0)])
    [again] = (await store.receive("q", 1, 60.0)).messages
    assert again.key == first[0].key
    await store.delete("q", [first[3].receipt])
    outcome = await store.delete(
        "q", [first[1].receipt, first[0].receipt, first[3].receipt, again.receipt, first[2].receipt]
    )
    assert [r.status for r in outcome.results] == [
        LeaseStatus.OK,
        LeaseStatus.RECEIPT_SUPERSEDED,
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.OK,
        LeaseStatus.OK,
    ]
    assert sorted(outcome.deleted_keys) == sorted([first[1].key, again.key, first[2].key])
    assert (await store.stats("q")).total == 0


async def test_an_ack_of_current_receipts_is_answered_from_the_receipts(store) -> None:
    """The usual ack (every receipt deleted its own message) makes no result object per receipt:
    AllDeleted, read as OK results in request order, as the SQLite store answers."""
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=str(i).encode()) for i in range(5)])
    delivered = (await store.receive("q", 5, 60.0)).messages
    order = [delivered[i] for i in (3, 0, 4, 1, 2)]
    outcome = await store.delete("q", [m.receipt for m in order])
    assert isinstance(outcome.results, AllDeleted)
    assert [(r.receipt, r.status, r.key) for r in outcome.results] == [
        (m.receipt, LeaseStatus.OK, m.key) for m in order
    ]
    assert sorted(outcome.deleted_keys) == sorted(m.key for m in delivered)
    again = await store.delete("q", [order[0].receipt])
    assert [r.status for r in again.results] == [LeaseStatus.ALREADY_DELETED]


async def test_a_receipt_of_a_queue_made_again_under_its_name_does_not_verify(store) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"old")])
    [old] = (await store.receive("q", 1, 60.0)).messages
    await store.delete_queue("q")
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"new")])
    outcome = await store.delete("q", [old.receipt])
    assert [r.status for r in outcome.results] == [LeaseStatus.INVALID_RECEIPT]
    [new] = (await store.receive("q", 1, 60.0)).messages
    assert (await store.delete("q", [new.receipt])).results[0].status is LeaseStatus.OK


async def test_an_ack_whose_key_has_a_tombstone_already_goes_the_transaction_way(
    store, schema: str
) -> None:
    """DELETE_RECEIPTS_SQL writes tombstones without ON CONFLICT (keys are never reused): should
    one exist all the same, the statement fails whole and the transaction way answers. (The two
    keys make one run, whose first key is the first message's: that is where a tombstone would
    collide.)"""
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"a"), NewMessage(body=b"b")])
    first, second = (await store.receive("q", 2, 60.0)).messages
    with connect() as conn:
        conn.execute(
            f"INSERT INTO {schema}.tombstones (key, queue, receipt_seq, deleted_at)"
            " VALUES (%s, 0, 0, 0)",
            (first.key,),
        )
    outcome = await store.delete("q", [first.receipt, second.receipt])
    assert [r.status for r in outcome.results] == [LeaseStatus.OK, LeaseStatus.OK]
    assert sorted(outcome.deleted_keys) == sorted([first.key, second.key])
    assert (await store.stats("q")).total == 0
    again = await store.delete("q", [second.receipt])
    assert [r.status for r in again.results] == [LeaseStatus.ALREADY_DELETED]


async def test_an_ack_notifies_other_replicas_only_near_the_in_flight_limit(replicas) -> None:
    a, b = replicas
    heard: asyncio.Queue[str | None] = asyncio.Queue()
    a.subscribe(heard.put_nowait)

    async def next_heard() -> str:
        while (queue := await asyncio.wait_for(heard.get(), SAFETY_TIMEOUT)) is None:
            pass  # the catch-all wake-up
        return queue

    await b.create_queue("far", QueueConfig())  # max_in_flight 120,000: far from it
    await b.create_queue("near", QueueConfig(max_in_flight=2))
    await b.send("far", [NewMessage(body=b"f")])
    assert await next_heard() == "far"
    await b.send("near", [NewMessage(body=b"n1"), NewMessage(body=b"n2"), NewMessage(body=b"n3")])
    assert await next_heard() == "near"
    far = (await b.receive("far", 1, 600.0)).messages
    assert (await b.delete("far", [far[0].receipt])).results[0].status is LeaseStatus.OK
    near = (await b.receive("near", 2, 600.0)).messages
    with pytest.raises(OverLimit):
        await a.receive("near", 1, 600.0)  # held by the limit
    assert (await b.delete("near", [near[0].receipt])).results[0].status is LeaseStatus.OK
    # Notifications arrive in commit order: had the ack on "far" notified, it would come first.
    assert await next_heard() == "near"
    assert [m.body for m in (await a.receive("near", 1, 600.0)).messages] == [b"n3"]


async def test_a_stream_held_by_the_in_flight_limit_wakes_on_an_ack_through_another_replica(
    url: str,
) -> None:
    async with running_server(url) as a, running_server(url) as b:
        await asyncio.gather(_listening(a), _listening(b))
        async with (
            grpc.aio.insecure_channel(a.target) as ca,
            grpc.aio.insecure_channel(b.target) as cb,
        ):
            stub_a, stub_b = pb_grpc.QueueServiceStub(ca), pb_grpc.QueueServiceStub(cb)
            await stub_b.CreateQueue(
                pb.CreateQueueRequest(name="q", config=pb.QueueConfig(max_in_flight=1))
            )
            await stub_b.SendMessages(
                pb.SendMessagesRequest(
                    queue="q",
                    entries=[pb.SendEntry(id="1", body=b"one"), pb.SendEntry(id="2", body=b"two")],
                )
            )
            # b holds the only lease the queue allows, for 10 minutes.
            held = await _lease_one(stub_b, "q", seconds=600)
            # A follow stream waits for room under the limit (a plain receive answers
            # RESOURCE_EXHAUSTED at once).
            stream = stub_a.GetMessages(
                pb.GetMessagesRequest(queue="q", max_messages=1, follow=True)
            )
            await _until_sleeping(a, "q")  # held by the limit until the lease ends
            acked = time.monotonic()
            await stub_b.DeleteMessages(
                pb.DeleteMessagesRequest(queue="q", receipts=[held.receipt])
            )
            response = await asyncio.wait_for(stream.read(), SAFETY_TIMEOUT)
            woke = time.monotonic() - acked
            stream.cancel()
            assert [m.body for m in response.messages] == [b"two"]
            assert woke < WAKE_BOUND, f"woke {woke:.3f}s after the ack"


async def test_one_statement_plans_are_kept_and_the_session_plans_anew_otherwise(
    schema: str,
) -> None:
    # One connection: the statements below all run on it.
    store = PostgresStore.from_url(store_url(schema, pool_min=1, pool_max=1))
    await store.open()
    try:
        await store.create_queue("q", QueueConfig())
        for _ in range(8):  # psycopg prepares a statement from its fifth run
            await store.send("q", [NewMessage(body=b"m"), NewMessage(body=b"n")])
            got = await store.receive("q", 2, 60.0, max_bytes=1 << 20)
            await store.delete("q", [m.receipt for m in got.messages])
        assert (await store.stats("q")).deleted_total == 16

        async def plans(tx):
            return await tx.rows(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements", {}
            ), await tx.row("SELECT current_setting('plan_cache_mode')", {})

        prepared, (mode,) = await store._run(plans)
        assert mode == "force_custom_plan"
        kinds = {
            "send": "INSERT INTO messages",
            "receive": "picked AS MATERIALIZED",
            "ack": "DELETE FROM messages m",
        }
        for kind, marker in kinds.items():
            [(generic, custom)] = [(g, c) for text, g, c in prepared if marker in text]
            assert generic >= 3 and custom == 0, (kind, generic, custom)
    finally:
        await store.close()
