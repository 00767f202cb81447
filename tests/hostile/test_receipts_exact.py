"""Only the exact receipt string issued is accepted: the same receipt in the
standard base64 alphabet ('+' and '/' for '-' and '_') decodes to the same bytes, and was
accepted by every store. It is INVALID_RECEIPT now, and the message stays leased."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.hostile.conftest import url_for
from tests.support.server import running_server

_STANDARD = str.maketrans("-_", "+/")
INVALID = pb.LEASE_STATUS_INVALID_RECEIPT


@pytest.fixture(params=("memory", "sqlite", "postgres"))
def stub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[pb_grpc.QueueServiceStub]:
    for url in url_for(request.param, tmp_path):
        with running_server(url) as server, grpc.insecure_channel(server.target) as channel:
            yield pb_grpc.QueueServiceStub(channel)


def _received_with_url_characters(stub: pb_grpc.QueueServiceStub) -> list[pb.ReceivedMessage]:
    """Received messages whose receipt has a '-' or '_' (most have one; 100 make it certain)."""
    stub.CreateQueue(pb.CreateQueueRequest(name="q"))
    stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"x")] * 100))
    [response] = stub.GetMessages(
        pb.GetMessagesRequest(queue="q", max_messages=100, wait_time=duration_pb2.Duration())
    )
    chosen = [m for m in response.messages if set(m.receipt) & {"-", "_"}]
    assert len(chosen) >= 3
    return chosen


def _leased(stub: pb_grpc.QueueServiceStub) -> int:
    return stub.GetQueueStats(pb.GetQueueStatsRequest(name="q")).stats.leased


def test_a_receipt_in_the_standard_base64_alphabet_is_invalid(stub) -> None:
    first, second, third, *_ = _received_with_url_characters(stub)
    leased = _leased(stub)

    deleted = stub.DeleteMessages(
        pb.DeleteMessagesRequest(queue="q", receipts=[first.receipt.translate(_STANDARD)])
    )
    assert [r.status for r in deleted.results] == [INVALID]

    changed = stub.ChangeVisibility(
        pb.ChangeVisibilityRequest(
            queue="q",
            entries=[
                pb.ChangeVisibilityEntry(
                    receipt=second.receipt.translate(_STANDARD),
                    visibility_timeout=duration_pb2.Duration(),
                )
            ],
        )
    )
    assert [r.status for r in changed.results] == [INVALID]

    with pytest.raises(grpc.RpcError) as refused:
        stub.UpdateMessage(
            pb.UpdateMessageRequest(
                queue="q", receipt=third.receipt.translate(_STANDARD), body=b"y"
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "receipt" in refused.value.details()

    assert _leased(stub) == leased  # nothing was deleted, released or changed
    # The exact strings issued still work.
    deleted = stub.DeleteMessages(
        pb.DeleteMessagesRequest(queue="q", receipts=[first.receipt, second.receipt])
    )
    assert [r.status for r in deleted.results] == [pb.LEASE_STATUS_OK] * 2
