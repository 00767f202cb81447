"""A consumer survives its server being killed (SIGKILL, SQLite store) and restarted in the
middle of a run: it reconnects its stream, settles what it handled meanwhile, and every message
is handled and deleted; nothing is lost."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from leaseq.client import Consumer, Message, QueueClient, RetryPolicy
from tests.support.process import server_process

pytestmark = pytest.mark.slow

COUNT = 200
WAIT = 30.0
# Patient enough to outlast a restart (about a second), quick enough to notice it is over.
CLIENT_RETRY = RetryPolicy(max_attempts=4, initial_backoff=0.05, max_backoff=0.2)
RECONNECT = RetryPolicy(initial_backoff=0.05, max_backoff=0.5)


def test_the_server_killed_and_restarted_mid_consumption(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'data' / 'leaseq.db'}"
    with server_process(store, tmp_path) as server:
        with QueueClient(server.target, retry=CLIENT_RETRY, timeout=5) as client:
            # A short lease: a batch cut off by the kill is delivered again soon after.
            client.create_queue("work", visibility_timeout=2)
            sent = {
                r.message_id for r in client.send_batch("work", [f"m{i}" for i in range(COUNT)])
            }
            lock = threading.Lock()
            handled: list[str] = []
            halfway, killed, everything = threading.Event(), threading.Event(), threading.Event()

            def handle(msg: Message) -> None:
                with lock:
                    handled.append(msg.message_id)
                    count, distinct = len(handled), len(set(handled))
                if count == COUNT // 4:
                    halfway.set()
                if distinct == COUNT:
                    everything.set()
                if count > COUNT // 4:
                    killed.wait(WAIT)  # these finish while the server is down: settled later

            consumer = Consumer(
                client,
                "work",
                handle,
                concurrency=4,
                max_outstanding=20,
                batch_size=10,
                reconnect=RECONNECT,
            ).start()
            assert halfway.wait(WAIT)
            server.kill()
            killed.set()
            server.start()
            assert everything.wait(WAIT), f"handled {len(set(handled))} of {COUNT}"
            assert consumer.close(timeout=WAIT)
            stats = consumer.stats()
            queue = client.stats("work")

    assert set(handled) == sent  # every message was handled (some maybe twice: at least once)
    assert stats.reconnects >= 1
    assert (queue.total, queue.leased) == (0, 0)  # and all of them were deleted
    assert queue.deleted_total == COUNT
