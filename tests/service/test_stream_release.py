"""A GetMessages stream that ends leaves nothing leased that it did not send,
and a follow stream whose grant was revoked leases nothing more.

The streams' clients never read (a receive window of one byte), so nothing the server sends on
them completes: every message such a stream leased is one it did not send, and must be visible
again once the stream is gone (released with ChangeVisibility 0), not when its 600 s lease ends.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.server.auth import PolicyFile, Security, hash_token
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import RunningServer, running_server

NOT_READING = [("grpc.http2.lookahead_bytes", 1), ("grpc.http2.bdp_probe", 0)]
LEASE = duration_pb2.Duration(seconds=600)
ROUNDS = 12
STREAMS = 4
SAFETY = 60.0  # seconds: a safety net for a loaded machine, never reached when all is well


def _stats(stub: pb_grpc.QueueServiceStub, queue: str) -> pb.QueueStats:
    return stub.GetQueueStats(pb.GetQueueStatsRequest(name=queue)).stats


def _wait_until(condition) -> None:
    deadline = time.monotonic() + SAFETY
    while not condition():
        assert time.monotonic() < deadline, "the server did not get there"
        time.sleep(0.02)


def _streams_gone(server: RunningServer) -> None:
    """Until no GetMessages stream runs, then until their releases are done."""
    limiter = server.app.stream_limiter
    assert limiter is not None

    async def gone() -> None:
        await limiter.wait_until(lambda active: active == 0)
        await server.app.service.settle()

    server.call(gone, timeout=SAFETY)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_follow_streams_cancelled_under_traffic_leave_nothing_leased(
    store: str, tmp_path: Path
) -> None:
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path / 'q.db'}"
    rng = random.Random(14)
    with running_server(url) as server, grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        stub.CreateQueue(pb.CreateQueueRequest(name="work"))
        stop = threading.Event()
        sent = [0]

        def sender() -> None:
            while not stop.is_set():
                entries = [pb.SendEntry(body=b"m") for _ in range(20)]
                stub.SendMessages(pb.SendMessagesRequest(queue="work", entries=entries))
                sent[0] += len(entries)

        traffic = threading.Thread(target=sender)
        traffic.start()
        try:
            for _ in range(ROUNDS):
                channels = [
                    grpc.insecure_channel(server.target, options=NOT_READING)
                    for _ in range(STREAMS)
                ]
                calls = []
                for index, chan in enumerate(channels):
                    # Every other stream ends by its deadline, the others by a cancel.
                    timeout = rng.uniform(0.05, 0.5) if index % 2 else None
                    calls.append(
                        pb_grpc.QueueServiceStub(chan).GetMessages(
                            pb.GetMessagesRequest(
                                queue="work",
                                max_messages=rng.choice([1, 10, 100]),
                                follow=True,
                                visibility_timeout=LEASE,
                            ),
                            timeout=timeout,
                        )
                    )
                # Cancel at once in some rounds (often during a store call), after the streams
                # leased something in others.
                if rng.random() < 0.5:
                    _wait_until(lambda: _stats(stub, "work").leased > 0)
                for call in calls:
                    call.cancel()
                for chan in channels:
                    chan.close()
        finally:
            stop.set()
            traffic.join()
        _streams_gone(server)
        stats = _stats(stub, "work")
        # Nothing was read, so nothing was deleted: every message is visible again.
        assert (stats.leased, stats.visible) == (0, sent[0])


TOKEN = "tok-release-test"
POLICY = f"""
[[principals]]
name = "app"
tokens = ["{hash_token(TOKEN)}"]

[[principals.grants]]
queues = ["jobs"]
actions = ["send", "receive", "admin", "peek"]
"""


def test_a_revoked_follow_stream_leases_no_further_message(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    security = Security(PolicyFile(path, check_interval=0.0))
    with running_server(security=security) as server, grpc.insecure_channel(server.target) as ch:
        stub = pb_grpc.QueueServiceStub(ch)
        stub.CreateQueue(pb.CreateQueueRequest(name="jobs"), metadata=metadata)

        def send(body: bytes) -> None:
            stub.SendMessages(
                pb.SendMessagesRequest(queue="jobs", entries=[pb.SendEntry(body=body)]),
                metadata=metadata,
            )

        send(b"first")
        stream = stub.GetMessages(
            pb.GetMessagesRequest(
                queue="jobs", max_messages=1, follow=True, visibility_timeout=LEASE
            ),
            metadata=metadata,
            timeout=SAFETY,
        )
        assert [m.body for m in next(stream).messages] == [b"first"]
        path.write_text(POLICY.replace('"receive", ', ""))  # receive revoked
        send(b"second")
        with pytest.raises(grpc.RpcError) as revoked:
            next(stream)
        assert revoked.value.code() == grpc.StatusCode.PERMISSION_DENIED
        _streams_gone(server)
        page = server.call(
            lambda: server.store.peek("jobs", 10, include_leased=True, include_delayed=True)
        )
        counts = {m.body: m.delivery_count for m in page.messages}
        # The stream's one message stays leased (it was sent); the next one was never taken.
        assert counts == {b"first": 1, b"second": 0}
