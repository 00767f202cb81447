"""Each RPC's happy path over real gRPC: what goes in comes back in the wire shapes of API.md."""

from __future__ import annotations

import asyncio

from google.protobuf import duration_pb2, field_mask_pb2

from leaseq.v1 import queue_service_pb2 as pb

from .conftest import SAFETY_TIMEOUT, create, receive_once, send, stats, until_sleeping

D = duration_pb2.Duration
OK = pb.LEASE_STATUS_OK


# --- queues -----------------------------------------------------------------------------------


async def test_create_fills_in_defaults(stub) -> None:
    queue = await create(stub)
    config = queue.config
    assert queue.name == "q" and queue.create_time.seconds > 0
    assert config.visibility_timeout == D(seconds=30)
    assert config.receive_wait_time == D(seconds=30)
    assert config.message_retention == D(seconds=7 * 86400)
    assert config.HasField("default_delay") and config.default_delay == D()
    assert config.max_message_bytes == 1024 * 1024
    assert config.max_in_flight == 120_000
    assert config.dedup_window == D(seconds=300)
    assert not config.HasField("dead_letter_queue")
    assert not config.HasField("max_delivery_count")


async def test_create_with_a_dead_letter_queue(stub) -> None:
    await create(stub, "dlq")
    queue = await create(stub, dead_letter_queue="dlq", max_delivery_count=3)
    assert (queue.config.dead_letter_queue, queue.config.max_delivery_count) == ("dlq", 3)


async def test_list_queues_pages(stub) -> None:
    for name in ("a1", "a2", "a3", "a4", "a5", "b1"):
        await create(stub, name)
    seen, token, pages = [], "", 0
    while True:
        page = await stub.ListQueues(
            pb.ListQueuesRequest(prefix="a", page_size=2, page_token=token)
        )
        seen += [q.name for q in page.queues]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == ["a1", "a2", "a3", "a4", "a5"] and pages == 3
    everything = await stub.ListQueues(pb.ListQueuesRequest())
    assert [q.name for q in everything.queues] == ["a1", "a2", "a3", "a4", "a5", "b1"]
    assert everything.next_page_token == ""


async def test_update_queue_by_mask(stub) -> None:
    await create(stub, visibility_timeout=D(seconds=10), max_in_flight=5)
    # Empty mask: exactly the fields set in config.
    reply = await stub.UpdateQueue(
        pb.UpdateQueueRequest(name="q", config=pb.QueueConfig(max_message_bytes=2048))
    )
    config = reply.queue.config
    assert (config.visibility_timeout, config.max_in_flight, config.max_message_bytes) == (
        D(seconds=10),
        5,
        2048,
    )
    # A masked field left unset returns to its default; both path spellings work.
    reply = await stub.UpdateQueue(
        pb.UpdateQueueRequest(
            name="q",
            config=pb.QueueConfig(receive_wait_time=D(seconds=1)),
            update_mask=field_mask_pb2.FieldMask(
                paths=["config.visibility_timeout", "receive_wait_time"]
            ),
        )
    )
    config = reply.queue.config
    assert config.visibility_timeout == D(seconds=30)
    assert config.receive_wait_time == D(seconds=1)
    assert config.max_in_flight == 5
    assert (await stub.GetQueue(pb.GetQueueRequest(name="q"))).queue == reply.queue


async def test_purge_and_delete_queue(stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2")
    assert (await stub.PurgeQueue(pb.PurgeQueueRequest(name="q"))).purged_count == 2
    assert (await stats(stub)).total == 0
    await stub.DeleteQueue(pb.DeleteQueueRequest(name="q"))
    assert (await stub.ListQueues(pb.ListQueuesRequest())).queues == []


async def test_stats_by_state_and_channel(stub) -> None:
    await create(stub)
    await stub.SendMessages(
        pb.SendMessagesRequest(
            queue="q",
            entries=[
                pb.SendEntry(body=b"1", channel="a"),
                pb.SendEntry(body=b"2", channel="b"),
                pb.SendEntry(body=b"3", channel="b", delay=D(seconds=600)),
            ],
        )
    )
    await receive_once(stub, queue="q", max_messages=1, channel_filter="a")
    current = await stats(stub)
    assert (current.visible, current.leased, current.delayed, current.total) == (1, 1, 1, 3)
    channels = {c.channel: (c.visible, c.leased, c.delayed, c.total) for c in current.channels}
    assert channels == {"a": (0, 1, 0, 1), "b": (1, 0, 1, 2)}


# --- messages ---------------------------------------------------------------------------------


async def test_send_receive_delete(stub) -> None:
    await create(stub)
    reply = await stub.SendMessages(
        pb.SendMessagesRequest(
            queue="q",
            entries=[pb.SendEntry(id="e1", body=b"hi", attributes={"k": "v"}, channel="c")],
        )
    )
    [result] = reply.results
    assert result.id == "e1" and result.message_id and not result.duplicate
    [response] = await receive_once(stub, queue="q", visibility_timeout=D(seconds=60))
    [message] = response.messages
    assert (message.message_id, message.body, dict(message.attributes), message.channel) == (
        result.message_id,
        b"hi",
        {"k": "v"},
        "c",
    )
    assert message.delivery_count == 1
    lease = message.visible_at.ToMilliseconds() - response.server_time.ToMilliseconds()
    assert 59_000 <= lease <= 60_000
    assert message.expires_at.seconds - message.enqueued_at.seconds == 7 * 86400

    receipts = [message.receipt, message.receipt, "forged"]
    reply = await stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q", receipts=receipts))
    assert [r.status for r in reply.results] == [
        OK,
        pb.LEASE_STATUS_ALREADY_DELETED,
        pb.LEASE_STATUS_INVALID_RECEIPT,
    ]
    assert (await stats(stub)).deleted_total == 1


async def test_dedup_id(stub) -> None:
    await create(stub)
    entries = [pb.SendEntry(body=b"1", dedup_id="d"), pb.SendEntry(body=b"2", dedup_id="d")]
    reply = await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries))
    first, second = reply.results
    assert second.duplicate and second.message_id == first.message_id
    assert (await stats(stub)).total == 1


async def test_peek_pages_through_every_state(stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2", b"3")
    await stub.SendMessages(
        pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"4", delay=D(seconds=60))])
    )
    await receive_once(stub, queue="q", max_messages=1)
    bodies, states, token = [], [], ""
    while True:
        page = await stub.PeekMessages(
            pb.PeekMessagesRequest(
                queue="q",
                max_messages=2,
                include_leased=True,
                include_delayed=True,
                page_token=token,
            )
        )
        assert page.server_time.seconds > 0
        bodies += [m.body for m in page.messages]
        states += [m.state for m in page.messages]
        token = page.next_page_token
        if not token:
            break
    assert sorted(bodies) == [b"1", b"2", b"3", b"4"]
    assert sorted(states) == sorted(
        [
            pb.MESSAGE_STATE_LEASED,
            pb.MESSAGE_STATE_VISIBLE,
            pb.MESSAGE_STATE_VISIBLE,
            pb.MESSAGE_STATE_DELAYED,
        ]
    )
    visible_only = await stub.PeekMessages(pb.PeekMessagesRequest(queue="q", max_messages=10))
    assert [m.body for m in visible_only.messages] == [b"2", b"3"]
    assert (await stats(stub)).leased == 1  # peeking leased nothing


async def test_change_visibility_extends_and_reports_visible_at(stub) -> None:
    await create(stub)
    await send(stub, "q", b"1")
    [response] = await receive_once(stub, queue="q", visibility_timeout=D(seconds=5))
    receipt = response.messages[0].receipt
    reply = await stub.ChangeVisibility(
        pb.ChangeVisibilityRequest(
            queue="q",
            entries=[
                pb.ChangeVisibilityEntry(receipt=receipt, visibility_timeout=D(seconds=120)),
                pb.ChangeVisibilityEntry(receipt="forged", visibility_timeout=D(seconds=1)),
            ],
        )
    )
    extended, forged = reply.results
    assert extended.status == OK and extended.receipt == receipt
    assert extended.visible_at.seconds - response.server_time.seconds >= 119
    assert forged.status == pb.LEASE_STATUS_INVALID_RECEIPT and not forged.HasField("visible_at")


async def test_receive_attempt_id_repeats_and_deletes(stub) -> None:
    await create(stub)
    await send(stub, "q", b"1", b"2", b"3")
    [first] = await receive_once(stub, queue="q", max_messages=2, receive_attempt_id="batch-7")
    [again] = await receive_once(stub, queue="q", max_messages=2, receive_attempt_id="batch-7")
    assert [m.receipt for m in again.messages] == [m.receipt for m in first.messages]
    reply = await stub.DeleteMessages(
        pb.DeleteMessagesRequest(queue="q", receive_attempt_ids=["batch-7"])
    )
    assert [(r.receive_attempt_id, r.deleted_count) for r in reply.attempt_results] == [
        ("batch-7", 2)
    ]
    assert (await stats(stub)).total == 1


async def test_update_message_supersedes_the_receipt(stub) -> None:
    await create(stub)
    await send(stub, "q", b"old")
    [response] = await receive_once(stub, queue="q", visibility_timeout=D(seconds=60))
    old_receipt = response.messages[0].receipt
    reply = await stub.UpdateMessage(
        pb.UpdateMessageRequest(
            queue="q", receipt=old_receipt, body=b"new", visibility_timeout=D(seconds=300)
        )
    )
    assert reply.receipt != old_receipt
    assert reply.visible_at.seconds - response.server_time.seconds >= 299
    deleted = await stub.DeleteMessages(
        pb.DeleteMessagesRequest(queue="q", receipts=[old_receipt, reply.receipt])
    )
    assert [r.status for r in deleted.results] == [pb.LEASE_STATUS_RECEIPT_SUPERSEDED, OK]


async def test_update_message_to_zero_releases_it(server, stub) -> None:
    await create(stub)
    await send(stub, "q", b"1")
    [response] = await receive_once(stub, queue="q", visibility_timeout=D(seconds=60))
    waiting = asyncio.create_task(receive_once(stub, queue="q", wait_time=D(seconds=30)))
    await until_sleeping(server, "q")
    await stub.UpdateMessage(
        pb.UpdateMessageRequest(
            queue="q",
            receipt=response.messages[0].receipt,
            visibility_timeout=D(),
            update_mask=field_mask_pb2.FieldMask(paths=["visibility_timeout"]),
        )
    )
    [again] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert again.messages[0].body == b"1"  # the body was not in the mask: kept


async def test_dead_letter_and_redrive(server, stub) -> None:
    await create(stub, "dlq")
    await create(stub, dead_letter_queue="dlq", max_delivery_count=1)
    await send(stub, "q", b"poison")
    await receive_once(stub, queue="q", visibility_timeout=D())  # delivery 1, no lease
    # A waiter on the dead letter queue wakes when a receive on q moves the message there.
    waiting = asyncio.create_task(
        receive_once(stub, queue="dlq", wait_time=D(seconds=30), visibility_timeout=D())
    )
    await until_sleeping(server, "dlq")
    [nothing] = await receive_once(stub, queue="q", wait_time=D())
    assert list(nothing.messages) == []
    [dead] = await asyncio.wait_for(waiting, SAFETY_TIMEOUT)
    assert [(m.body, m.delivery_count) for m in dead.messages] == [(b"poison", 2)]
    assert (await stats(stub)).dead_lettered_total == 1

    moved = await stub.RedriveMessages(pb.RedriveMessagesRequest(queue="dlq"))
    assert moved.moved_count == 1
    [back] = await receive_once(stub, queue="q", wait_time=D())
    assert [(m.body, m.delivery_count) for m in back.messages] == [(b"poison", 1)]


async def test_a_batch_too_big_for_one_response_is_split(stub) -> None:
    size = 8 * 1024 * 1024
    await create(stub, max_message_bytes=size)
    for index in range(8):  # 64 MiB of bodies: more than one gRPC message can carry
        await stub.SendMessages(
            pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=bytes([index]) * size)])
        )
    responses = await receive_once(stub, queue="q", max_messages=10)
    # One response per store chunk: budget.CALL_BYTES (8 MiB) is reached by each message.
    assert len(responses) == 8
    assert [m.body[0] for r in responses for m in r.messages] == list(range(8))
    assert all(r.HasField("server_time") for r in responses)


async def test_message_and_lease_responses_carry_server_time(stub) -> None:
    # API.md: responses carry the server's time so clients need not trust their own clock.
    await create(stub)
    sent = await stub.SendMessages(
        pb.SendMessagesRequest(
            queue="q", entries=[pb.SendEntry(body=b"a"), pb.SendEntry(body=b"b")]
        )
    )
    [response] = await receive_once(stub, queue="q", max_messages=2)
    first, second = (m.receipt for m in response.messages)
    changed = await stub.ChangeVisibility(
        pb.ChangeVisibilityRequest(
            queue="q",
            entries=[pb.ChangeVisibilityEntry(receipt=first, visibility_timeout=D(seconds=9))],
        )
    )
    updated = await stub.UpdateMessage(
        pb.UpdateMessageRequest(
            queue="q", receipt=second, body=b"B", update_mask={"paths": ["body"]}
        )
    )
    deleted = await stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q", receipts=[first]))
    times = [r.server_time.ToSeconds() for r in (sent, response, changed, updated, deleted)]
    assert all(t > 0 for t in times)
    assert times == sorted(times)
    assert changed.results[0].visible_at.ToSeconds() - changed.server_time.ToSeconds() in (8, 9)
