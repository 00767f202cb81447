"""A message is on disk before SendMessages answers: SIGKILL right after the answers loses none."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.process import server_process

pytestmark = pytest.mark.slow


def _send_batches(target: str, queue: str, batches: int, size: int, tag: str) -> list[str]:
    acknowledged = []
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        for batch in range(batches):
            entries = [
                pb.SendEntry(id=str(i), body=f"{tag}-{batch}-{i}".encode()) for i in range(size)
            ]
            reply = stub.SendMessages(pb.SendMessagesRequest(queue=queue, entries=entries))
            acknowledged += [r.message_id for r in reply.results if not r.HasField("error")]
    return acknowledged


def test_sigkill_after_answers_loses_no_acknowledged_message(tmp_path) -> None:
    store_url = f"sqlite:///{tmp_path / 'data' / 'leaseq.db'}"
    with server_process(store_url, tmp_path) as server:
        with grpc.insecure_channel(server.target) as channel:
            pb_grpc.QueueServiceStub(channel).CreateQueue(pb.CreateQueueRequest(name="durable"))
        # Concurrent single sends (group commit) and batches, all answered before the kill.
        with ThreadPoolExecutor(8) as pool:
            singles = pool.map(
                lambda n: _send_batches(server.target, "durable", 10, 1, f"single{n}"), range(8)
            )
            acknowledged = [mid for part in singles for mid in part]
        acknowledged += _send_batches(server.target, "durable", 5, 500, "batch")
        server.kill()

        server.start()
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            found = set()
            token = ""
            while True:
                page = stub.PeekMessages(
                    pb.PeekMessagesRequest(
                        queue="durable",
                        max_messages=1000,
                        include_leased=True,
                        include_delayed=True,
                        page_token=token,
                    )
                )
                found.update(m.message_id for m in page.messages)
                token = page.next_page_token
                if not token:
                    break
            stats = stub.GetQueueStats(pb.GetQueueStatsRequest(name="durable")).stats

    assert len(acknowledged) == 80 + 2500
    assert set(acknowledged) <= found
    assert stats.total == len(found) == len(acknowledged)
