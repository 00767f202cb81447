"""Giving up on a message: the client's dead_letter (sync and async), a Consumer's handler that
raises Reject (per message, and per named message of a batch), and the retry policy option."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from leaseq.client import (
    AsyncConsumer,
    AsyncQueueClient,
    Consumer,
    FailedPrecondition,
    LeaseStatus,
    Message,
    QueueClient,
    QueueRetryPolicy,
    Reject,
    SendEntry,
)

WAIT = 20.0


@pytest.fixture
def queues(client: QueueClient, queue_name: str) -> tuple[str, str]:
    dlq = queue_name + "-dlq"
    client.create_queue(dlq)
    client.create_queue(queue_name, dead_letter_queue=dlq, max_delivery_count=10)
    return queue_name, dlq


def test_dead_letter_moves_now_and_keeps_the_message(
    client: QueueClient, queues: tuple[str, str]
) -> None:
    queue, dlq = queues
    message_id = client.send(queue, "poison", attributes={"k": "v"})
    [msg] = client.receive(queue, wait_time=0)
    [result] = client.dead_letter(queue, msg, "cannot parse")
    assert result.status is LeaseStatus.OK
    [dead] = client.peek(dlq)
    assert (dead.message_id, dead.text, dead.attributes) == (message_id, "poison", {"k": "v"})
    assert (dead.delivery_count, dead.last_error) == (1, "cannot parse")
    assert dead.enqueued_at == msg.enqueued_at
    # Again: it moved already.
    assert client.dead_letter(queue, [msg.receipt], "again")[0].status is (
        LeaseStatus.MESSAGE_NOT_FOUND
    )


def test_dead_letter_without_a_dead_letter_queue(client: QueueClient, queue: str) -> None:
    client.send(queue, "a")
    [msg] = client.receive(queue, wait_time=0)
    with pytest.raises(FailedPrecondition) as caught:
        client.dead_letter(queue, msg, "why")
    assert caught.value.reason == "NO_DEAD_LETTER_QUEUE"


async def test_async_dead_letter(aclient: AsyncQueueClient, queue_name: str) -> None:
    dlq = queue_name + "-dlq"
    await aclient.create_queue(dlq)
    await aclient.create_queue(queue_name, dead_letter_queue=dlq, max_delivery_count=3)
    await aclient.send(queue_name, "a")
    [msg] = await aclient.receive(queue_name, wait_time=0)
    [result] = await aclient.dead_letter(queue_name, msg, "no")
    assert result.status is LeaseStatus.OK
    assert [m.last_error for m in await aclient.peek(dlq)] == ["no"]


def test_the_retry_policy_option_round_trips(client: QueueClient, queue_name: str) -> None:
    created = client.create_queue(queue_name, retry_policy=(1, timedelta(seconds=4)))
    assert created.config.retry_policy == QueueRetryPolicy(
        timedelta(seconds=1), timedelta(seconds=4)
    )
    assert (
        client.create_queue(
            queue_name, retry_policy=QueueRetryPolicy(timedelta(seconds=1), timedelta(seconds=4))
        )
        == created
    )  # the same configuration: created again, unchanged
    defaults = client.update_queue(queue_name, retry_policy={"minimum_backoff": 2})
    assert defaults.config.retry_policy == QueueRetryPolicy(
        timedelta(seconds=2), timedelta(seconds=600)
    )
    assert client.update_queue(queue_name, retry_policy=None).config.retry_policy is None
    with pytest.raises(TypeError):
        client.update_queue(queue_name, retry_policy=3)


def test_a_handler_that_rejects_dead_letters_at_once(
    client: QueueClient, queues: tuple[str, str]
) -> None:
    queue, dlq = queues
    client.send_batch(queue, [SendEntry("bad"), SendEntry("good")])
    handled: list[str] = []

    def handle(msg: Message) -> None:
        handled.append(msg.text)
        if msg.text == "bad":
            raise Reject("not JSON")

    with Consumer(client, queue, handle) as consumer:
        [dead] = client.receive(dlq, wait_time=WAIT, visibility_timeout=0)
        assert consumer.close(timeout=WAIT)
        stats = consumer.stats()
    # Delivered once from the queue, and once more by this receive from the dead letter queue.
    assert (dead.text, dead.last_error, dead.delivery_count) == ("bad", "not JSON", 2)
    assert sorted(handled) == ["bad", "good"]  # delivered once each: no retry
    assert (stats.rejected, stats.succeeded, stats.failed) == (1, 1, 0)
    assert client.stats(queue).total == 0


def test_a_batch_handler_rejects_the_messages_it_names(
    client: QueueClient, queues: tuple[str, str]
) -> None:
    queue, dlq = queues
    client.send_batch(queue, [SendEntry(f"m{i}") for i in range(4)])

    def handle(batch: list[Message]) -> None:
        raise Reject("odd", messages=[m for m in batch if int(m.text[1:]) % 2])

    with Consumer(client, queue, handle, batch=True, batch_size=4) as consumer:
        dead = client.receive(dlq, 2, wait_time=WAIT, visibility_timeout=0)
        while len(dead) < 2:
            dead += client.receive(dlq, 2, wait_time=WAIT, visibility_timeout=0)
        assert consumer.close(timeout=WAIT)
    assert sorted(m.text for m in dead) == ["m1", "m3"]
    assert all(m.last_error == "odd" for m in dead)
    assert client.stats(queue).total == 0  # the others were deleted as handled


async def test_an_async_handler_that_rejects(
    aclient: AsyncQueueClient, client: QueueClient, queues: tuple[str, str]
) -> None:
    queue, dlq = queues
    await aclient.send(queue, "bad")

    async def handle(msg: Message) -> None:
        raise Reject("no way")

    async with AsyncConsumer(aclient, queue, handle) as consumer:
        [dead] = await aclient.receive(dlq, wait_time=WAIT, visibility_timeout=0)
        assert await consumer.close(timeout=WAIT)
    assert dead.last_error == "no way"
    assert consumer.stats().rejected == 1


def test_reject_without_a_dead_letter_queue_leaves_the_message_to_its_lease(
    client: QueueClient, queue: str
) -> None:
    client.send(queue, "a")
    seen: list[int] = []
    handled = threading.Event()

    def handle(msg: Message) -> None:
        seen.append(msg.delivery_count)
        handled.set()
        raise Reject("no")

    with Consumer(client, queue, handle, visibility_timeout=30) as consumer:
        assert handled.wait(WAIT)
        assert consumer.close(timeout=WAIT)
    # Not lost: still there, leased until its lease ends (then delivered again), seen once.
    stats = client.stats(queue)
    assert (stats.total, stats.leased, seen) == (1, 1, [1])
