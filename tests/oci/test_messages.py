"""The OCI messages API through the real SDK's QueueClient: the seed document's flow (consume,
extend, delete, let a lease lapse, dead-letter after the delivery count) and each operation."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import oci
import pytest
from oci.queue.models import (
    DeleteMessagesDetails,
    DeleteMessagesDetailsEntry,
    MessageMetadata,
    PutMessagesDetails,
    PutMessagesDetailsEntry,
    UpdateMessageDetails,
    UpdateMessagesDetails,
    UpdateMessagesDetailsEntry,
)

from .conftest import create_queue


def put(
    messages: oci.queue.QueueClient,
    queue_id: str,
    *contents: str,
    channel: str | None = None,
    **props: str,
) -> list[int]:
    entries = [
        PutMessagesDetailsEntry(
            content=c,
            metadata=MessageMetadata(channel_id=channel, custom_properties=props or None)
            if channel or props
            else None,
        )
        for c in contents
    ]
    answer = messages.put_messages(queue_id, PutMessagesDetails(messages=entries))
    return [m.id for m in answer.data.messages]


def test_put_get_update_delete(messages: oci.queue.QueueClient, queue_id: str) -> None:
    ids = put(messages, queue_id, "one", "two", channel="eu", kind="order")
    assert len(ids) == 2 and all(isinstance(i, int) and 0 <= i < 2**63 for i in ids)
    got = messages.get_messages(
        queue_id, limit=5, visibility_in_seconds=60, timeout_in_seconds=0
    ).data.messages
    assert [m.content for m in got] == ["one", "two"]
    assert [m.id for m in got] == ids
    first = got[0]
    assert first.delivery_count == 1 and first.metadata.channel_id == "eu"
    assert first.metadata.custom_properties == {"kind": "order"}
    assert first.visible_after > datetime.now(UTC) and first.expire_after > first.visible_after
    # Extend one lease, then delete both (one alone, one in a batch).
    extended = messages.update_message(
        queue_id, first.receipt, UpdateMessageDetails(visibility_in_seconds=120)
    ).data
    assert extended.id == first.id and extended.visible_after > first.visible_after
    messages.delete_message(queue_id, first.receipt)
    result = messages.delete_messages(
        queue_id,
        DeleteMessagesDetails(entries=[DeleteMessagesDetailsEntry(receipt=got[1].receipt)]),
    ).data
    assert result.client_failures == 0 and result.server_failures == 0
    stats = messages.get_stats(queue_id).data
    assert stats.queue.visible_messages == 0 and stats.queue.in_flight_messages == 0


def test_stats_channels_and_filter(messages: oci.queue.QueueClient, queue_id: str) -> None:
    put(messages, queue_id, "a1", channel="alpha")
    put(messages, queue_id, "b1", "b2", channel="beta")
    put(messages, queue_id, "plain")
    assert messages.list_channels(queue_id).data.items == ["alpha", "beta"]
    assert messages.list_channels(queue_id, channel_filter="be*").data.items == ["beta"]
    stats = messages.get_stats(queue_id, channel_id="beta").data
    assert stats.channel_id == "beta" and stats.queue.visible_messages == 2
    assert messages.get_stats(queue_id).data.queue.visible_messages == 4
    got = messages.get_messages(
        queue_id, limit=10, channel_filter="beta", timeout_in_seconds=0
    ).data.messages
    assert sorted(m.content for m in got) == ["b1", "b2"]
    stats = messages.get_stats(queue_id, channel_id="beta").data
    assert stats.queue.in_flight_messages == 2 and stats.queue.visible_messages == 0


def test_update_messages_release_and_refusals(
    messages: oci.queue.QueueClient, queue_id: str
) -> None:
    put(messages, queue_id, "x")
    [m] = messages.get_messages(
        queue_id, visibility_in_seconds=300, timeout_in_seconds=0
    ).data.messages
    result = messages.update_messages(
        queue_id,
        UpdateMessagesDetails(
            entries=[
                UpdateMessagesDetailsEntry(receipt=m.receipt, visibility_in_seconds=0),
                UpdateMessagesDetailsEntry(receipt="AAAA.12", visibility_in_seconds=10),
            ]
        ),
    ).data
    assert result.client_failures == 1
    assert result.entries[0].id == m.id and result.entries[1].error_code == 400
    # Released: delivered again at once, with a new receipt; the old one no longer deletes.
    [again] = messages.get_messages(queue_id, timeout_in_seconds=0).data.messages
    assert again.id == m.id and again.delivery_count == 2 and again.receipt != m.receipt
    with pytest.raises(oci.exceptions.ServiceError) as refused:
        messages.delete_message(queue_id, m.receipt)
    assert refused.value.status == 404 and refused.value.code == "NotAuthorizedOrNotFound"


def test_long_poll_returns_when_a_message_arrives(
    messages: oci.queue.QueueClient, queue_id: str, grpc_client
) -> None:
    import threading

    name = queue_id.rpartition(".")[2]
    got: list[object] = []
    waiter = threading.Thread(
        target=lambda: got.extend(
            messages.get_messages(queue_id, timeout_in_seconds=20).data.messages
        )
    )
    started = time.monotonic()
    waiter.start()
    grpc_client.send(name, b"late")
    waiter.join(25)
    assert [m.content for m in got] == ["late"]  # type: ignore[attr-defined]
    assert time.monotonic() - started < 15


def test_lease_lapses_then_dead_letters(
    admin: oci.queue.QueueAdminClient, messages: oci.queue.QueueClient
) -> None:
    queue_id = create_queue(admin, dead_letter_queue_delivery_count=2, visibility_in_seconds=1)
    put(messages, queue_id, "poison")
    seen = []
    deadline = time.monotonic() + 20
    # Each delivery's lease (1 s) lapses unextended; the third receive finds it dead-lettered.
    while time.monotonic() < deadline:
        got = messages.get_messages(queue_id, timeout_in_seconds=2).data.messages
        seen += [m.delivery_count for m in got]
        if messages.get_stats(queue_id).data.dlq.visible_messages == 1:
            break
    assert seen == [1, 2]
    stats = messages.get_stats(queue_id).data
    assert stats.queue.visible_messages == 0 and stats.dlq.visible_messages == 1
