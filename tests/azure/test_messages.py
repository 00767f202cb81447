"""Message operations through azure-storage-queue: Put, Get, Peek, Delete, Update, Clear, the
message encodings, and pop receipts that no longer work."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.queue import (
    BinaryBase64DecodePolicy,
    BinaryBase64EncodePolicy,
    QueueClient,
    TextBase64DecodePolicy,
    TextBase64EncodePolicy,
)

from .conftest import connection_string, raw, unique


def _near(when: dt.datetime, seconds: float, slack: float = 30.0) -> bool:
    target = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    return abs((when - target).total_seconds()) <= slack


def test_put_get_delete(queue: QueueClient):
    sent = queue.send_message("hello <&> world")
    assert sent.id and _near(sent.inserted_on, 0) and _near(sent.expires_on, 7 * 86400)
    got = queue.receive_message(visibility_timeout=60)
    assert (got.id, got.content, got.dequeue_count) == (sent.id, "hello <&> world", 1)
    assert _near(got.next_visible_on, 60) and got.pop_receipt
    assert queue.receive_message() is None  # leased
    queue.delete_message(got)
    assert queue.get_queue_properties().approximate_message_count == 0


def test_get_many_up_to_32_oldest_first(queue: QueueClient):
    for i in range(40):
        queue.send_message(f"m{i:02d}")
    got = list(queue.receive_messages(messages_per_page=32, max_messages=32, visibility_timeout=60))
    assert [m.content for m in got] == [f"m{i:02d}" for i in range(32)]
    peeked = list(queue.peek_messages(max_messages=32))
    assert [m.content for m in peeked] == [f"m{i:02d}" for i in range(32, 40)]


def test_ttl_minus_one_and_explicit_ttl(queue: QueueClient):
    forever = queue.send_message("forever", time_to_live=-1)
    assert forever.expires_on.year == 9999  # never, as Azure writes it
    short = queue.send_message("short", time_to_live=120)
    assert _near(short.expires_on, 120)
    expiries = {m.content: m.expires_on for m in queue.peek_messages(max_messages=5)}
    assert expiries["forever"].year == 9999 and _near(expiries["short"], 120)


def test_put_with_visibility_timeout_delays_the_message(queue: QueueClient, grpc_client):
    sent = queue.send_message("later", visibility_timeout=3600)
    assert _near(sent.next_visible_on, 3600)
    assert queue.receive_message() is None
    assert list(queue.peek_messages()) == []  # Azure's peek shows visible messages only
    delayed = grpc_client.peek(queue.queue_name, include_delayed=True)
    assert [m.message_id for m in delayed] == [sent.id.replace("-", "")]


def test_peek_does_not_lease_or_count(queue: QueueClient):
    queue.send_message("p")
    first = list(queue.peek_messages())
    assert [(m.content, m.dequeue_count, m.pop_receipt) for m in first] == [("p", 0, None)]
    assert queue.receive_message().dequeue_count == 1


def test_peek_of_invisible_messages_through_grpc(queue: QueueClient, grpc_client):
    # Azure cannot show leased messages; leaseq's gRPC PeekMessages can (include_leased).
    queue.send_message("leased one")
    got = queue.receive_message(visibility_timeout=600)
    assert list(queue.peek_messages()) == []
    peeked = grpc_client.peek(queue.queue_name, include_leased=True)
    assert [(m.message_id, m.body, m.delivery_count) for m in peeked] == [
        (got.id.replace("-", ""), b"leased one", 1)
    ]
    assert peeked[0].state.name.endswith("LEASED")


def test_a_pop_receipt_stops_working_after_a_redelivery(queue: QueueClient):
    queue.send_message("twice")
    first = queue.receive_message(visibility_timeout=1)
    # The lease is released at once through Update Message with visibility 0 and the message
    # delivered again: the first pop receipt names an older delivery.
    released = queue.update_message(first, visibility_timeout=0)
    second = queue.receive_message(visibility_timeout=60)
    assert second.id == first.id and second.dequeue_count == 2
    for stale in (first.pop_receipt, released.pop_receipt):
        with pytest.raises(ResourceNotFoundError) as caught:
            queue.delete_message(first.id, stale)
        assert caught.value.status_code == 404 and caught.value.error_code == "MessageNotFound"
    queue.delete_message(second)
    # Deleting again with the same pop receipt is harmless (a retried request): 204.
    queue.delete_message(second)
    assert queue.get_queue_properties().approximate_message_count == 0


def test_put_messages_pop_receipt_updates_and_deletes_at_once(queue: QueueClient):
    sent = queue.send_message("v1")
    assert sent.pop_receipt
    updated = queue.update_message(sent, content="v2", visibility_timeout=300)
    assert updated.pop_receipt != sent.pop_receipt and _near(updated.next_visible_on, 300)
    # Invisible now, as Azure's Update Message leaves it: nothing to get, and the new pop
    # receipt keeps working while it is.
    assert queue.receive_message(visibility_timeout=60) is None
    again = queue.update_message(updated, content="v3", visibility_timeout=300)
    with pytest.raises(ResourceNotFoundError):  # Put Message's pop receipt is superseded
        queue.delete_message(sent)
    queue.delete_message(again)
    assert queue.get_queue_properties().approximate_message_count == 0
    # Put Message's pop receipt deletes as well, until a Get Messages delivers the message.
    fresh = queue.send_message("once")
    queue.delete_message(fresh)
    assert queue.peek_messages() == []
    late = queue.send_message("late")
    got = queue.receive_message(visibility_timeout=60)
    assert got.id == late.id
    with pytest.raises(ResourceNotFoundError):
        queue.update_message(late, content="x", visibility_timeout=0)
    with pytest.raises(ResourceNotFoundError):
        queue.delete_message(late)
    queue.delete_message(got)


def test_update_message_text_and_visibility(queue: QueueClient):
    queue.send_message("v1")
    got = queue.receive_message(visibility_timeout=60)
    updated = queue.update_message(got, content="v2", visibility_timeout=300)
    assert updated.pop_receipt != got.pop_receipt and _near(updated.next_visible_on, 300)
    assert updated.content == "v2"
    with pytest.raises(ResourceNotFoundError):  # the old pop receipt is superseded
        queue.update_message(got.id, got.pop_receipt, content="v3", visibility_timeout=0)
    # Visibility only (no body): the text stays; 0 makes it visible now.
    queue.update_message(got.id, updated.pop_receipt, visibility_timeout=0)
    again = queue.receive_message()
    assert (again.content, again.dequeue_count) == ("v2", 2)


def test_update_after_the_lease_ended_is_message_not_found(azure_server, grpc_client):
    name = unique()
    client = QueueClient.from_connection_string(
        connection_string(azure_server), name, retry_total=0
    )
    client.create_queue()
    client.send_message("x")
    got = client.receive_message(visibility_timeout=60)
    # End the lease through gRPC (release), as an expiry would.
    grpc_client.release(name, got.pop_receipt.rpartition(".")[0])
    with pytest.raises(ResourceNotFoundError) as caught:
        client.update_message(got, visibility_timeout=10)
    assert caught.value.error_code == "MessageNotFound"


def test_pop_receipt_of_another_message_is_a_mismatch(queue: QueueClient):
    queue.send_message("a")
    queue.send_message("b")
    a, b = queue.receive_messages(messages_per_page=2, max_messages=2, visibility_timeout=60)
    with pytest.raises(HttpResponseError) as caught:
        queue.delete_message(a.id, b.pop_receipt)
    assert caught.value.status_code == 400 and caught.value.error_code == "PopReceiptMismatch"
    assert queue.get_queue_properties().approximate_message_count == 2


def test_clear_messages_removes_every_state(queue: QueueClient):
    queue.send_message("visible")
    queue.send_message("delayed", visibility_timeout=600)
    queue.send_message("leased")
    queue.receive_message(visibility_timeout=600)
    queue.clear_messages()
    assert queue.get_queue_properties().approximate_message_count == 0


@pytest.mark.parametrize(
    "encode, decode, content",
    [
        (TextBase64EncodePolicy(), TextBase64DecodePolicy(), "text with ünïcode and \x01 control"),
        (BinaryBase64EncodePolicy(), BinaryBase64DecodePolicy(), bytes(range(256))),
        (None, None, "plain <xml> & text"),
    ],
    ids=["text-base64", "binary-base64", "plain-text"],
)
def test_message_encodings_round_trip(azure_server, grpc_client, encode, decode, content):
    name = unique()
    kwargs = {"message_encode_policy": encode, "message_decode_policy": decode} if encode else {}
    client = QueueClient.from_connection_string(
        connection_string(azure_server), name, retry_total=0, **kwargs
    )
    client.create_queue()
    client.send_message(content)
    assert client.receive_message().content == content
    # leaseq keeps the MessageText as sent: base64 text for the base64 policies.
    stored = grpc_client.peek(name, include_leased=True)[0].body
    if encode is None:
        assert stored == content.encode()
    else:
        assert re.fullmatch(rb"[A-Za-z0-9+/=]+", stored)


def test_get_messages_xml_has_the_reference_shape(azure_server, queue: QueueClient):
    queue.send_message("shape")
    reply = raw(
        "GET",
        f"{azure_server.endpoint}/devstoreaccount1/{queue.queue_name}/messages?numofmessages=1",
    )
    assert reply.status_code == 200
    assert re.fullmatch(
        r'<\?xml version="1.0" encoding="utf-8"\?><QueueMessagesList><QueueMessage>'
        r"<MessageId>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}</MessageId>"
        r"<InsertionTime>\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT</InsertionTime>"
        r"<ExpirationTime>\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT</ExpirationTime>"
        r"<PopReceipt>[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{16}</PopReceipt>"
        r"<TimeNextVisible>\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT</TimeNextVisible>"
        r"<DequeueCount>1</DequeueCount><MessageText>shape</MessageText>"
        r"</QueueMessage></QueueMessagesList>",
        reply.text,
    ), reply.text
