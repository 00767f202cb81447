"""Kill `leaseq serve` (SQLite) with SIGKILL at random moments under a mixed load, restart it, and
check the history each time:

- no acknowledged send is lost (every message whose SendMessages answer reached the client is
  still there with its body, unless a delete of it was at least attempted);
- no acknowledged delete is undone (a message whose delete answered OK or ALREADY_DELETED is
  never there again);
- delivery counts never go down (a message's count after the restart is at least the highest
  count any receive reported);
- no send is enqueued twice (bodies are unique per send attempt);
- `PRAGMA integrity_check` says ok (run on the file while the server is down).

The load: two senders (batches of 1-20), two receivers (long polls with a short lease; each
message is then deleted, released or left to its lease at random). The kill comes when the load
has completed a random number of operations, so calls are in flight at that moment; calls cut by
it have an unknown outcome and are recorded as such.

Iterations: LEASEQ_CRASH_ITERATIONS (default 20); 200 for a long run:
`LEASEQ_CRASH_ITERATIONS=200 python -m pytest tests/crash -p no:cacheprovider -s`.
The seed is printed and can be replayed with LEASEQ_CRASH_SEED (the timing of the kill still
varies from run to run).
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.process import ServerProcess, free_port

ITERATIONS = int(os.environ.get("LEASEQ_CRASH_ITERATIONS", "20"))
# About 1.5 s an iteration on 2 cores; the suite's 120 s timeout would cut a long run.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120 + 10 * ITERATIONS)]
QUEUE = "crash"
LEASE = duration_pb2.Duration(nanos=800_000_000)  # short: abandoned leases end within the run
CALL_TIMEOUT = 10.0


@dataclass
class History:
    """What the clients were told; shared by the load threads (guarded by lock)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: dict[str, bytes] = field(default_factory=dict)  # acknowledged: message_id -> body
    attempted_bodies: set[bytes] = field(default_factory=set)
    delete_attempted: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)  # acknowledged deletes
    max_count: dict[str, int] = field(default_factory=dict)
    ops: int = 0
    target: int = 0
    reached: threading.Event = field(default_factory=threading.Event)

    def done_op(self) -> None:
        with self.lock:
            self.ops += 1
            if self.ops >= self.target:
                self.reached.set()


class Load:
    """Two senders and two receivers until the server dies (or stop is set)."""

    def __init__(self, target: str, history: History, rng: random.Random, tag: str) -> None:
        self.target = target
        self.history = history
        self.stop = threading.Event()
        self.rngs = [random.Random(rng.random()) for _ in range(4)]
        self.tag = tag
        self.threads = [
            threading.Thread(target=self._run, args=(self._send, 0), daemon=True),
            threading.Thread(target=self._run, args=(self._send, 1), daemon=True),
            threading.Thread(target=self._run, args=(self._receive, 2), daemon=True),
            threading.Thread(target=self._run, args=(self._receive, 3), daemon=True),
        ]
        self.counter = 0
        self.errors: list[str] = []

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
            assert not thread.is_alive(), "a load thread hangs"

    def _run(self, step, index: int) -> None:
        with grpc.insecure_channel(self.target) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            rng = self.rngs[index]
            while not self.stop.is_set():
                try:
                    step(stub, rng, index)
                except grpc.RpcError as error:
                    # The server is gone: this call's outcome is unknown. Any other failure is
                    # a bug the test reports.
                    if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                        self.errors.append(f"{step.__name__}: {error.code()} {error.details()}")
                    return

    def _send(self, stub: pb_grpc.QueueServiceStub, rng: random.Random, index: int) -> None:
        h = self.history
        count = rng.randint(1, 20)
        with h.lock:
            self.counter += count
            bodies = [f"{self.tag}-{index}-{self.counter - i}".encode() for i in range(count)]
            h.attempted_bodies.update(bodies)
        entries = [pb.SendEntry(id=str(i), body=b) for i, b in enumerate(bodies)]
        reply = stub.SendMessages(
            pb.SendMessagesRequest(queue=QUEUE, entries=entries), timeout=CALL_TIMEOUT
        )
        with h.lock:
            for result, body in zip(reply.results, bodies):
                assert not result.HasField("error"), result
                h.sent[result.message_id] = body
        h.done_op()

    def _receive(self, stub: pb_grpc.QueueServiceStub, rng: random.Random, index: int) -> None:
        h = self.history
        request = pb.GetMessagesRequest(
            queue=QUEUE,
            max_messages=10,
            visibility_timeout=LEASE,
            wait_time=duration_pb2.Duration(seconds=1),
        )
        messages = [m for r in stub.GetMessages(request, timeout=CALL_TIMEOUT) for m in r.messages]
        with h.lock:
            for m in messages:
                h.max_count[m.message_id] = max(h.max_count.get(m.message_id, 0), m.delivery_count)
        h.done_op()
        to_delete, to_release = [], []
        for m in messages:
            choice = rng.random()
            if choice < 0.6:
                to_delete.append(m)
            elif choice < 0.8:
                to_release.append(m)
            # else: left to its lease, redelivered when it ends
        if to_delete:
            with h.lock:
                h.delete_attempted.update(m.message_id for m in to_delete)
            reply = stub.DeleteMessages(
                pb.DeleteMessagesRequest(queue=QUEUE, receipts=[m.receipt for m in to_delete]),
                timeout=CALL_TIMEOUT,
            )
            with h.lock:
                for m, result in zip(to_delete, reply.results):
                    if result.status in (pb.LEASE_STATUS_OK, pb.LEASE_STATUS_ALREADY_DELETED):
                        h.deleted.add(m.message_id)
            h.done_op()
        if to_release:
            stub.ChangeVisibility(
                pb.ChangeVisibilityRequest(
                    queue=QUEUE,
                    entries=[
                        pb.ChangeVisibilityEntry(
                            receipt=m.receipt,
                            visibility_timeout=duration_pb2.Duration(),
                            reason="crash test",
                        )
                        for m in to_release
                    ],
                ),
                timeout=CALL_TIMEOUT,
            )
            h.done_op()


def stored(target: str) -> dict[str, tuple[bytes, int]]:
    """Every message of the queue, whatever its state: message_id -> (body, delivery_count)."""
    out: dict[str, tuple[bytes, int]] = {}
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        token = ""
        while True:
            page = stub.PeekMessages(
                pb.PeekMessagesRequest(
                    queue=QUEUE,
                    max_messages=1000,
                    include_leased=True,
                    include_delayed=True,
                    page_token=token,
                ),
                timeout=CALL_TIMEOUT,
            )
            for m in page.messages:
                assert m.message_id not in out
                out[m.message_id] = (m.body, m.delivery_count)
            token = page.next_page_token
            if not token:
                return out


def integrity(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def check(history: History, found: dict[str, tuple[bytes, int]]) -> None:
    with history.lock:
        lost = [
            mid for mid in history.sent if mid not in found and mid not in history.delete_attempted
        ]
        assert not lost, f"acknowledged sends lost: {lost[:5]} ({len(lost)})"
        undone = sorted(history.deleted & set(found))
        assert not undone, f"acknowledged deletes undone: {undone[:5]}"
        for mid, (body, count) in found.items():
            if mid in history.sent:
                assert body == history.sent[mid], mid
            assert body in history.attempted_bodies, f"a message nobody sent: {body!r}"
            assert count >= history.max_count.get(mid, 0), (
                f"{mid}: delivery count {count} < {history.max_count[mid]} seen before the crash"
            )
        bodies = [body for body, _ in found.values()]
        assert len(bodies) == len(set(bodies)), "a send was enqueued twice"


# relaxed: leases and acks are not fsync'd on their own, but a kill of the process (not of the
# OS) loses nothing it wrote, so every rule above holds for it as well.
@pytest.mark.parametrize("durability", ["full", "relaxed"])
def test_sigkill_at_random_moments_loses_nothing_acknowledged(
    tmp_path: Path, durability: str
) -> None:
    seed = int(os.environ.get("LEASEQ_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    print(f"\ncrash loop: seed {seed} (LEASEQ_CRASH_SEED), {ITERATIONS} iterations")
    db = tmp_path / "data" / "crash.db"
    url = f"sqlite:///{db}" + ("?durability=relaxed" if durability == "relaxed" else "")
    server = ServerProcess(url, free_port(), tmp_path / "server.log")
    server.start()
    history = History()
    try:
        with grpc.insecure_channel(server.target) as channel:
            pb_grpc.QueueServiceStub(channel).CreateQueue(pb.CreateQueueRequest(name=QUEUE))
        for iteration in range(ITERATIONS):
            with history.lock:
                history.target = history.ops + rng.randint(0, 40)
                history.reached.clear()
                if history.ops >= history.target:
                    history.reached.set()
            load = Load(server.target, history, rng, f"i{iteration}")
            load.start()
            assert history.reached.wait(timeout=60), "the load made no progress"
            server.kill()  # SIGKILL while the load's calls are in flight
            load.join()
            assert not load.errors, load.errors
            assert integrity(db) == "ok", f"iteration {iteration}"
            server.start()
            check(history, stored(server.target))
        print(
            f"crash loop: {ITERATIONS} kills; {len(history.sent)} sends acknowledged, "
            f"{len(history.deleted)} deletes acknowledged, {history.ops} operations"
        )
        assert len(history.sent) > 0 and len(history.deleted) > 0
        assert "Traceback" not in server.log_path.read_text()
    finally:
        if server.process is not None and server.process.poll() is None:
            server.kill()
