"""Every QueueClient method, round trip against a real server (memory store)."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, timedelta

import pytest

from leaseq.client import (
    DeleteResults,
    InvalidArgument,
    LeaseStatus,
    Message,
    MessageState,
    QueueClient,
    QueueConfig,
    QueueNotFound,
    SendEntry,
    VisibilityChange,
)
from tests.support.server import running_server


def seconds(delta: timedelta) -> float:
    return delta.total_seconds()


# --- queues ----------------------------------------------------------------------------------


def test_create_get_and_create_again(client: QueueClient, queue_name: str) -> None:
    created = client.create_queue(
        queue_name,
        visibility_timeout=45,
        receive_wait_time=timedelta(seconds=2.5),
        message_retention=timedelta(days=1),
        max_message_bytes=4096,
        max_in_flight=10,
        dedup_window=60,
    )
    assert created.name == queue_name
    assert created.config == QueueConfig(
        visibility_timeout=timedelta(seconds=45),
        receive_wait_time=timedelta(seconds=2.5),
        message_retention=timedelta(days=1),
        max_message_bytes=4096,
        max_in_flight=10,
        dedup_window=timedelta(seconds=60),
    )
    assert created.create_time.tzinfo is UTC
    assert client.get_queue(queue_name) == created
    # Same name and same configuration: a no-op that returns the queue.
    assert client.create_queue(queue_name, **dataclasses.asdict(created.config)) == created


def test_defaults_are_filled_in(client: QueueClient, queue_name: str) -> None:
    assert client.create_queue(queue_name).config == QueueConfig()


def test_list_queues_follows_every_page(client: QueueClient, queue_name: str) -> None:
    names = [f"{queue_name}-{i}" for i in range(5)]
    for name in reversed(names):
        client.create_queue(name)
    listed = client.list_queues(queue_name, page_size=2)
    assert [q.name for q in listed] == names  # name order, all three pages
    assert client.list_queues(f"{queue_name}-4") == [client.get_queue(names[4])]
    assert client.list_queues("no-such-prefix-") == []


def test_update_queue_changes_only_the_given_fields(client: QueueClient, queue_name: str) -> None:
    dlq = client.create_queue(f"{queue_name}-dlq").name
    client.create_queue(queue_name, visibility_timeout=45, max_in_flight=10)
    updated = client.update_queue(
        queue_name, dead_letter_queue=dlq, max_delivery_count=3, visibility_timeout=None
    )
    assert updated.config.dead_letter_queue == dlq
    assert updated.config.max_delivery_count == 3
    assert updated.config.visibility_timeout == timedelta(seconds=30)  # None: back to default
    assert updated.config.max_in_flight == 10  # not named: unchanged
    assert client.get_queue(queue_name) == updated


def test_delete_queue(client: QueueClient, queue: str) -> None:
    client.delete_queue(queue)
    with pytest.raises(QueueNotFound):
        client.get_queue(queue)


def test_purge_queue_counts_every_state(client: QueueClient, queue: str) -> None:
    client.send_batch(queue, ["a", "b", "c"])
    client.send(queue, "later", delay=600)
    client.receive(queue, visibility_timeout=60, wait_time=0)
    assert client.purge_queue(queue) == 4
    assert client.stats(queue).total == 0


def test_stats(client: QueueClient, queue: str) -> None:
    client.send_batch(queue, [SendEntry("a", channel="eu"), "b", "c"])
    client.send(queue, "delayed", delay=600)
    client.receive(queue, visibility_timeout=60, wait_time=0)  # leases "a", the oldest
    stats = client.stats(queue)
    assert (stats.visible, stats.leased, stats.delayed, stats.total) == (2, 1, 1, 4)
    assert stats.oldest_visible_age >= timedelta(0)
    by_channel = {c.channel: c for c in stats.channels}
    assert by_channel["eu"].leased == 1
    assert by_channel[""].total == 3


# --- sending ---------------------------------------------------------------------------------


def test_send_str_and_bytes(client: QueueClient, queue: str) -> None:
    first = client.send(queue, "héllo", attributes={"k": "v"}, channel="c1")
    second = client.send(queue, b"\x00\xff")
    assert first and second and first != second
    messages = client.receive(queue, 10, wait_time=0)
    assert [m.body for m in messages] == ["héllo".encode(), b"\x00\xff"]
    assert messages[0].text == "héllo"
    assert (messages[0].attributes, messages[0].channel) == ({"k": "v"}, "c1")


def test_send_batch_reports_each_entry(client: QueueClient, queue_name: str) -> None:
    client.create_queue(queue_name, max_message_bytes=1024)
    results = client.send_batch(
        queue_name, ["ok", SendEntry(b"x" * 2000, id="big"), SendEntry("also ok", id="mine")]
    )
    assert [r.id for r in results] == ["0", "big", "mine"]
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error is not None and results[1].error.code.name == "INVALID_ARGUMENT"
    assert client.stats(queue_name).total == 2


def test_send_raises_the_entry_error(client: QueueClient, queue_name: str) -> None:
    client.create_queue(queue_name, max_message_bytes=1024)
    with pytest.raises(InvalidArgument) as raised:
        client.send(queue_name, b"x" * 2000)
    # The field the message names is the error's field too.
    assert raised.value.field == "entries[0].body"
    assert str(raised.value).startswith("entries[0].body: ")


@pytest.mark.parametrize(
    ("attributes", "says"),
    [
        ({"a": 1}, "entries[0].attributes: values must be str, got int for 'a'"),
        ({2: "b"}, "entries[0].attributes: keys must be str, got int 2"),
        ([("a", "b")], "entries[0].attributes: a mapping of str to str, got list"),
    ],
)
def test_send_attributes_of_another_type_say_which(
    client: QueueClient, queue: str, attributes: object, says: str
) -> None:
    with pytest.raises(TypeError) as raised:
        client.send(queue, "x", attributes=attributes)  # type: ignore[arg-type]
    assert str(raised.value) == says
    with pytest.raises(TypeError, match="^attributes: values must be str"):
        client.update_message(queue, "r", attributes={"a": None})  # type: ignore[dict-item]
    assert client.stats(queue).total == 0  # nothing was sent


def test_send_dedup(client: QueueClient, queue: str) -> None:
    first = client.send(queue, "a", dedup_id="d-1")
    [again] = client.send_batch(queue, [SendEntry("a", dedup_id="d-1")])
    assert again.duplicate and again.message_id == first
    assert client.stats(queue).total == 1


def test_send_delay_and_ttl(client: QueueClient, queue: str) -> None:
    client.send(queue, "a", delay=timedelta(minutes=10), ttl=3600)
    [peeked] = client.peek(queue, include_delayed=True)
    assert peeked.state is MessageState.DELAYED
    assert seconds(peeked.visible_at - peeked.enqueued_at) == pytest.approx(600, abs=1)
    assert peeked.expires_at - peeked.enqueued_at == timedelta(hours=1)


# --- receiving -------------------------------------------------------------------------------


def test_receive_fields(client: QueueClient, queue: str) -> None:
    message_id = client.send(queue, "a")
    [msg] = client.receive(queue, visibility_timeout=90, wait_time=0)
    assert msg.message_id == message_id
    assert msg.receipt and msg.delivery_count == 1 and msg.last_error == ""
    for when in (msg.enqueued_at, msg.expires_at, msg.visible_at, msg.server_time):
        assert when is not None and when.tzinfo is UTC
    assert msg.server_time is not None
    assert seconds(msg.visible_at - msg.server_time) == pytest.approx(90, abs=1)


def test_receive_nothing_with_zero_wait(client: QueueClient, queue: str) -> None:
    assert client.receive(queue, 10, wait_time=0) == []


def test_receive_long_poll_wakes_on_send(client: QueueClient, queue: str) -> None:
    sender = threading.Timer(0.2, client.send, args=(queue, "late"))
    sender.start()
    try:
        messages = client.receive(queue, wait_time=20)
    finally:
        sender.join()
    assert [m.body for m in messages] == [b"late"]


def test_receive_channel_filter(client: QueueClient, queue: str) -> None:
    client.send_batch(queue, [SendEntry("a", channel="eu-1"), SendEntry("b", channel="us")])
    assert [m.body for m in client.receive(queue, 10, wait_time=0, channel="eu-*")] == [b"a"]
    assert [m.body for m in client.receive(queue, 10, wait_time=0, channel="us")] == [b"b"]


def test_receive_attempt_id_repeats_exactly(client: QueueClient, queue: str) -> None:
    client.send_batch(queue, ["a", "b", "c"])
    first = client.receive(queue, 2, wait_time=0, attempt_id="attempt-1")
    again = client.receive(queue, 2, wait_time=0, attempt_id="attempt-1")
    assert [m.receipt for m in again] == [m.receipt for m in first]
    assert len(first) == 2


def test_stream_follows_until_cancelled(client: QueueClient, queue: str) -> None:
    with client.stream(queue, max_messages=10, visibility_timeout=60) as stream:
        client.send(queue, "one")
        batch = next(stream)
        assert [m.body for m in batch] == [b"one"]
        client.send_batch(queue, ["two", "three"])
        seen: list[bytes] = []
        while len(seen) < 2:
            seen += [m.body for m in next(stream)]
        assert seen == [b"two", b"three"]
        stream.cancel()
        assert list(stream) == []  # cancelled: iteration just ends


def test_stream_cancel_from_another_thread(client: QueueClient, queue: str) -> None:
    stream = client.stream(queue)
    # Nothing is sent, so the iteration below blocks until the other thread cancels.
    canceller = threading.Timer(0.2, stream.cancel)
    canceller.start()
    assert list(stream) == []
    canceller.join()


def test_stream_errors_are_leaseq_errors(client: QueueClient, queue_name: str) -> None:
    with client.stream(queue_name) as stream, pytest.raises(QueueNotFound):
        next(stream)


# --- peeking ---------------------------------------------------------------------------------


def test_peek_has_no_side_effects(client: QueueClient, queue: str) -> None:
    client.send_batch(queue, ["a", "b", "c"])
    client.send(queue, "d", delay=600)
    [leased] = client.receive(queue, visibility_timeout=60, wait_time=0)
    visible = client.peek(queue, 10)
    assert [m.body for m in visible] == [b"b", b"c"]
    assert {m.state for m in visible} == {MessageState.VISIBLE}
    everything = client.peek(queue, 10, include_leased=True, include_delayed=True)
    assert {m.body: m.state for m in everything} == {
        b"a": MessageState.LEASED,
        b"b": MessageState.VISIBLE,
        b"c": MessageState.VISIBLE,
        b"d": MessageState.DELAYED,
    }
    assert client.peek(queue, 1) == visible[:1]
    assert [m.delivery_count for m in client.peek(queue, 10)] == [0, 0]
    assert leased.delivery_count == 1


def test_peek_channel(client: QueueClient, queue: str) -> None:
    client.send_batch(queue, [SendEntry("a", channel="x"), SendEntry("b", channel="y")])
    assert [m.body for m in client.peek(queue, channel="y")] == [b"b"]


# --- leases ----------------------------------------------------------------------------------


def test_change_visibility_batch(client: QueueClient, queue: str) -> None:
    client.send_batch(queue, ["a", "b"])
    a, b = client.receive(queue, 2, visibility_timeout=60, wait_time=0)
    results = client.change_visibility(
        queue, [(a.receipt, 300), VisibilityChange(b.receipt, timedelta(0), "bad input")]
    )
    assert [r.status for r in results] == [LeaseStatus.OK, LeaseStatus.OK]
    assert results[0].visible_at is not None and results[0].visible_at > a.visible_at
    [again] = client.receive(queue, wait_time=0)  # b was released
    assert again.message_id == b.message_id
    assert again.delivery_count == 2 and again.last_error == "bad input"


def test_extend(client: QueueClient, queue: str) -> None:
    client.send(queue, "a")
    [msg] = client.receive(queue, visibility_timeout=30, wait_time=0)
    result = client.extend(queue, msg, 600)
    assert result.ok and result.receipt == msg.receipt
    assert result.visible_at is not None
    assert seconds(result.visible_at - msg.visible_at) == pytest.approx(570, abs=2)


def test_release_with_reason_and_delay(client: QueueClient, queue: str) -> None:
    client.send(queue, "a")
    [msg] = client.receive(queue, visibility_timeout=60, wait_time=0)
    # With a delay the message stays leased until then (SQS's ChangeMessageVisibility).
    assert client.release(queue, msg.receipt, delay=600, reason="try later").ok
    [peeked] = client.peek(queue, include_leased=True)
    assert peeked.state is MessageState.LEASED and peeked.last_error == "try later"
    assert client.release(queue, msg).ok
    assert [m.state for m in client.peek(queue)] == [MessageState.VISIBLE]
    # The lease is over, so a second release of the same receipt reports it.
    assert client.release(queue, msg.receipt).status is LeaseStatus.LEASE_EXPIRED


def test_delete_by_receipt_and_by_message(client: QueueClient, queue: str) -> None:
    client.send_batch(queue, ["a", "b", "c"])
    a, b, c = client.receive(queue, 3, visibility_timeout=60, wait_time=0)
    single = client.delete(queue, a.receipt)
    assert (
        single == DeleteResults(results=(single.results[0],), attempt_results={})
        and single.results[0].status is LeaseStatus.OK
    )
    both = client.delete(queue, [b, c.receipt])
    assert both.ok and [r.receipt for r in both.results] == [b.receipt, c.receipt]
    # A retried ack is harmless and says so.
    repeat = client.delete(queue, [a])
    assert repeat.results[0].status is LeaseStatus.ALREADY_DELETED and repeat.ok
    assert client.stats(queue).total == 0


def test_delete_reports_bad_receipts(client: QueueClient, queue: str) -> None:
    result = client.delete(queue, ["not-a-receipt"])
    assert result.results[0].status is LeaseStatus.INVALID_RECEIPT
    assert not result.ok


def test_delete_by_attempt_id(client: QueueClient, queue: str) -> None:
    client.send_batch(queue, ["a", "b", "c"])
    client.receive(queue, 2, visibility_timeout=60, wait_time=0, attempt_id="batch-7")
    result = client.delete(queue, [], attempt_ids=["batch-7"])
    assert result.results == () and result.attempt_results == {"batch-7": 2}
    assert client.stats(queue).total == 1


def test_update_message(client: QueueClient, queue: str) -> None:
    client.send(queue, "old", attributes={"a": "1"})
    [msg] = client.receive(queue, visibility_timeout=60, wait_time=0)
    updated = client.update_message(
        queue, msg, body="new", attributes={"b": "2"}, visibility_timeout=0
    )
    assert updated.receipt != msg.receipt
    [again] = client.receive(queue, wait_time=0)  # visibility 0: visible at once
    assert (again.body, again.attributes) == (b"new", {"b": "2"})


def test_update_message_needs_something_to_update(client: QueueClient, queue: str) -> None:
    with pytest.raises(ValueError):
        client.update_message(queue, "receipt")


def test_update_message_body_only_keeps_attributes(client: QueueClient, queue: str) -> None:
    client.send(queue, "old", attributes={"a": "1"})
    [msg] = client.receive(queue, visibility_timeout=60, wait_time=0)
    updated = client.update_message(queue, msg.receipt, body=b"new")
    [peeked] = client.peek(queue, include_leased=True)
    assert (peeked.body, peeked.attributes) == (b"new", {"a": "1"})
    assert client.delete(queue, updated.receipt).ok


def test_redrive(client: QueueClient, queue_name: str) -> None:
    dlq = client.create_queue(f"{queue_name}-dlq").name
    client.create_queue(queue_name, dead_letter_queue=dlq, max_delivery_count=1)
    message_id = client.send(queue_name, "poison")
    [msg] = client.receive(queue_name, visibility_timeout=60, wait_time=0)
    client.release(queue_name, msg, reason="boom")
    # Delivered once already: the next receive moves it to the dead letter queue instead.
    assert client.receive(queue_name, wait_time=0) == []
    [dead] = client.peek(dlq)
    assert dead.message_id == message_id and dead.last_error == "boom"
    assert client.redrive(dlq) == 1
    [back] = client.receive(queue_name, wait_time=0)
    assert back.message_id == message_id and back.delivery_count == 1


def test_redrive_to_destination_with_limit(client: QueueClient, queue_name: str) -> None:
    dlq = client.create_queue(f"{queue_name}-dlq").name
    other = client.create_queue(f"{queue_name}-other").name
    client.create_queue(queue_name, dead_letter_queue=dlq, max_delivery_count=1)
    client.send_batch(queue_name, ["a", "b"])
    client.change_visibility(
        queue_name, [(m, 0) for m in client.receive(queue_name, 2, wait_time=0)]
    )
    assert client.receive(queue_name, 2, wait_time=0) == []
    assert client.redrive(dlq, destination=other, max_messages=1) == 1
    assert [m.body for m in client.peek(other)] == [b"a"]


def test_receipts_accept_messages(client: QueueClient, queue: str) -> None:
    client.send(queue, "a")
    [msg] = client.receive(queue, visibility_timeout=60, wait_time=0)
    assert isinstance(msg, Message)
    [result] = client.change_visibility(queue, [(msg, 120)])
    assert result.ok


def test_stream_ends_when_the_server_drains() -> None:
    with running_server() as server, QueueClient(server.target) as client:
        client.create_queue("q")
        with client.stream("q") as stream:
            client.send("q", "a")
            assert [m.body for m in next(stream)] == [b"a"]
            server.drain()  # follow streams end cleanly: iteration just stops
            assert list(stream) == []
