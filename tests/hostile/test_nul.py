"""U+0000 in a text field: INVALID_ARGUMENT on every store, per entry in a send batch.
PostgreSQL answered INTERNAL for it (its text cannot hold NUL) and failed the whole batch
for one entry, while SQLite and memory kept it: one rule for all stores now, in validation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2, field_mask_pb2

from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.hostile.conftest import url_for
from tests.support.server import running_server

NUL = "\x00"
ZERO = duration_pb2.Duration()


@pytest.fixture(params=("memory", "sqlite", "postgres"))
def stub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[pb_grpc.QueueServiceStub]:
    for url in url_for(request.param, tmp_path):
        with running_server(url) as server, grpc.insecure_channel(server.target) as channel:
            yield pb_grpc.QueueServiceStub(channel)


def _refused(call, request) -> str:
    """The field named by the INVALID_ARGUMENT the call must get."""
    with pytest.raises(grpc.RpcError) as caught:
        result = call(request)
        if hasattr(result, "__next__"):
            list(result)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert "U+0000" in caught.value.details()
    return caught.value.details()


def test_nul_is_refused_per_entry_in_a_send_batch(stub) -> None:
    stub.CreateQueue(pb.CreateQueueRequest(name="q"))
    entries = [
        pb.SendEntry(id="good-1", body=b"1", channel="c", dedup_id="d1", attributes={"k": "v"}),
        pb.SendEntry(id="attr-key", body=b"x", attributes={f"k{NUL}": "v"}),
        pb.SendEntry(id="attr-value", body=b"x", attributes={"k": f"v{NUL}"}),
        pb.SendEntry(id="channel", body=b"x", channel=f"c{NUL}"),
        pb.SendEntry(id="dedup", body=b"x", dedup_id=f"d{NUL}"),
        pb.SendEntry(id="good-2", body=b"2"),
    ]
    reply = stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries))
    by_id = {r.id: r for r in reply.results}
    assert by_id["good-1"].message_id and by_id["good-2"].message_id
    for entry_id, field in (
        ("attr-key", "entries[1].attributes"),
        ("attr-value", "entries[2].attributes"),
        ("channel", "entries[3].channel"),
        ("dedup", "entries[4].dedup_id"),
    ):
        error = by_id[entry_id].error
        assert error.code == 3 and error.message.startswith(field) and "U+0000" in error.message
    [received] = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=10, wait_time=ZERO))
    assert sorted(m.body for m in received.messages) == [b"1", b"2"]
    assert [dict(m.attributes) for m in received.messages if m.body == b"1"] == [{"k": "v"}]


def test_nul_is_refused_in_every_other_text_field(stub) -> None:
    stub.CreateQueue(pb.CreateQueueRequest(name="dlq"))
    stub.CreateQueue(
        pb.CreateQueueRequest(
            name="q", config=pb.QueueConfig(dead_letter_queue="dlq", max_delivery_count=5)
        )
    )
    stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"x")] * 2))
    [received] = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=2, wait_time=ZERO))
    receipt = received.messages[0].receipt

    get = {"queue": "q", "max_messages": 1, "wait_time": ZERO}
    _refused(stub.GetMessages, pb.GetMessagesRequest(**get, receive_attempt_id=f"a{NUL}"))
    _refused(stub.GetMessages, pb.GetMessagesRequest(**get, channel_filter=f"c{NUL}*"))
    _refused(
        stub.PeekMessages, pb.PeekMessagesRequest(queue="q", max_messages=1, channel_filter=NUL)
    )
    _refused(
        stub.ChangeVisibility,
        pb.ChangeVisibilityRequest(
            queue="q",
            entries=[
                pb.ChangeVisibilityEntry(receipt=receipt, visibility_timeout=ZERO, reason=f"r{NUL}")
            ],
        ),
    )
    _refused(
        stub.DeleteMessages, pb.DeleteMessagesRequest(queue="q", receive_attempt_ids=[f"a{NUL}"])
    )
    _refused(
        stub.UpdateMessage,
        pb.UpdateMessageRequest(
            queue="q",
            receipt=receipt,
            attributes={"k": NUL},
            update_mask=field_mask_pb2.FieldMask(paths=["attributes"]),
        ),
    )
    _refused(stub.RedriveMessages, pb.RedriveMessagesRequest(queue="dlq", channel_filter=NUL))
    with pytest.raises(grpc.RpcError) as caught:
        stub.ListQueues(pb.ListQueuesRequest(prefix=f"q{NUL}"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Nothing was changed by the refused calls: both messages are still leased, unchanged.
    stats = stub.GetQueueStats(pb.GetQueueStatsRequest(name="q")).stats
    assert (stats.leased, stats.visible) == (2, 0)
