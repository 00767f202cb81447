"""The server's clock jumps an hour forward and then ten minutes back, under load, on the
injectable FakeClock (both stores). What README "Clock steps" promises:

- forward: leases, delays and TTLs that end within the jump have ended: leased messages are
  visible again (the old receipt can no longer extend: LEASE_EXPIRED), delayed ones are visible,
  expired ones are gone for good (counted in expired_total), waiting long polls wake at once;
- back: nothing comes back and nothing is lost; every instant already stored (a lease's end, a
  delay's end, an expiry, a send's visibility) stays where it is, so a lease or delay taken
  before the step simply lasts longer by the step, an expiry comes later by the step, and a
  message sent or released within the step is invisible until the clock is back at that time;
- in all of it, every acknowledged send is accounted for: still stored, deleted, or expired.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.server.clock import FakeClock
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import RunningServer, running_server

HOUR, TEN_MINUTES = 3600, 600
T0 = 1_800_000_000.0
SAFETY = 10.0


def d(seconds: float) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=int(seconds))


def set_time(server: RunningServer, when: float) -> None:
    """Set the FakeClock to any instant (backwards too) and wake every waiting stream, as a
    clock step would on a real server (the next timer or call sees the new time)."""
    clock = server.clock
    assert isinstance(clock, FakeClock)

    async def move() -> None:
        clock.set(when)
        server.app.service.longpoll.wake_all()

    server.call(move)


def until_sleeping(server: RunningServer, queue: str) -> None:
    """Until a stream of queue is parked: the server's gauge, looked at every few ms (as in
    tests/service/conftest.py: the stream's progress is invisible to the client)."""
    deadline = time.monotonic() + SAFETY
    while server.sleeping(queue) < 1:
        assert time.monotonic() < deadline, f"no stream of {queue} parked"
        time.sleep(0.005)


@pytest.fixture(params=["memory", "sqlite"])
def server(request, tmp_path) -> Iterator[RunningServer]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'clock.db'}"
    with running_server(url, FakeClock(T0)) as running:
        yield running


class Load:
    """A sender and a receiver-deleter on queue "load", in steps the test paces with events."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.sent: set[str] = set()
        self.deleted: set[str] = set()
        self.ops = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.progress = threading.Condition(self.lock)
        self.threads = [
            threading.Thread(target=self._run, args=(self._send,), daemon=True),
            threading.Thread(target=self._run, args=(self._receive,), daemon=True),
        ]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(SAFETY)

    def more(self, ops: int) -> None:
        """Until the load has done ops more operations (so each clock step lands mid-load)."""
        with self.progress:
            goal = self.ops + ops
            assert self.progress.wait_for(lambda: self.ops >= goal or self.errors, SAFETY)
            assert not self.errors, self.errors

    def _run(self, step) -> None:
        with grpc.insecure_channel(self.target) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            while not self.stop.is_set():
                try:
                    step(stub)
                except Exception as error:  # reported by more()
                    with self.progress:
                        self.errors.append(repr(error))
                        self.progress.notify_all()
                    return
                with self.progress:
                    self.ops += 1
                    self.progress.notify_all()

    def _send(self, stub) -> None:
        reply = stub.SendMessages(
            pb.SendMessagesRequest(queue="load", entries=[pb.SendEntry(body=b"l")] * 3),
            timeout=SAFETY,
        )
        with self.lock:
            self.sent.update(r.message_id for r in reply.results)

    def _receive(self, stub) -> None:
        request = pb.GetMessagesRequest(
            queue="load", max_messages=5, visibility_timeout=d(30), wait_time=d(0)
        )
        messages = [m for r in stub.GetMessages(request, timeout=SAFETY) for m in r.messages]
        if messages:
            reply = stub.DeleteMessages(
                pb.DeleteMessagesRequest(queue="load", receipts=[m.receipt for m in messages]),
                timeout=SAFETY,
            )
            ok = {pb.LEASE_STATUS_OK}
            with self.lock:
                self.deleted.update(
                    m.message_id for m, r in zip(messages, reply.results) if r.status in ok
                )


def test_an_hour_forward_and_ten_minutes_back_under_load(server: RunningServer) -> None:
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        for name in ("clk", "load", "waiting"):
            stub.CreateQueue(pb.CreateQueueRequest(name=name))

        def send(queue: str, body: bytes, **entry) -> str:
            reply = stub.SendMessages(
                pb.SendMessagesRequest(queue=queue, entries=[pb.SendEntry(body=body, **entry)])
            )
            return reply.results[0].message_id

        def receive(
            queue: str, vt: float = 300, max_messages: int = 10
        ) -> list[pb.ReceivedMessage]:
            request = pb.GetMessagesRequest(
                queue=queue, max_messages=max_messages, visibility_timeout=d(vt), wait_time=d(0)
            )
            return [m for r in stub.GetMessages(request) for m in r.messages]

        def bodies(queue: str) -> dict[bytes, pb.PeekedMessage]:
            page = stub.PeekMessages(
                pb.PeekMessagesRequest(
                    queue=queue, max_messages=100, include_leased=True, include_delayed=True
                )
            )
            return {m.body: m for m in page.messages}

        def stats(queue: str) -> pb.QueueStats:
            return stub.GetQueueStats(pb.GetQueueStatsRequest(name=queue)).stats

        # T0: a lease of 5 min, a delay of 30 min, TTLs of 30 min and 2 h, a plain message.
        send("clk", b"leased")
        [leased] = receive("clk", vt=300, max_messages=1)
        send("clk", b"delayed", delay=d(1800))
        send("clk", b"short-ttl", ttl=d(1800))
        send("clk", b"long-ttl", ttl=d(2 * HOUR))
        send("clk", b"plain", dedup_id="once")
        # A long poll waits for a message delayed by 30 min (it sleeps on the server).
        send("waiting", b"later", delay=d(1800))
        results: list[list[pb.ReceivedMessage]] = []
        poll = threading.Thread(
            target=lambda: results.append(
                [
                    m
                    for r in stub.GetMessages(
                        pb.GetMessagesRequest(queue="waiting", max_messages=1, wait_time=d(30)),
                        timeout=SAFETY,
                    )
                    for m in r.messages
                ]
            )
        )
        poll.start()
        until_sleeping(server, "waiting")

        with Load(server.target) as load:
            load.more(20)
            server.advance(HOUR)  # ----------------------------------------- T0 + 1 h
            load.more(20)

            poll.join(SAFETY)
            assert [m.body for m in results[0]] == [b"later"]  # woke at once, delay over

            state = bodies("clk")
            assert set(state) == {b"leased", b"delayed", b"long-ttl", b"plain"}
            assert stats("clk").expired_total == 1  # short-ttl: gone, never delivered
            assert state[b"leased"].state == pb.MESSAGE_STATE_VISIBLE
            assert state[b"delayed"].state == pb.MESSAGE_STATE_VISIBLE
            extend = stub.ChangeVisibility(
                pb.ChangeVisibilityRequest(
                    queue="clk",
                    entries=[
                        pb.ChangeVisibilityEntry(receipt=leased.receipt, visibility_timeout=d(60))
                    ],
                )
            )
            assert extend.results[0].status == pb.LEASE_STATUS_LEASE_EXPIRED

            # Lease everything for 5 min at T0+1h (ends T0+1h05), and delay a new one by 1 min.
            again = {m.body: m for m in receive("clk", vt=300)}
            assert set(again) == {b"leased", b"delayed", b"long-ttl", b"plain"}
            assert again[b"leased"].delivery_count == 2
            lease_end = again[b"plain"].visible_at.ToSeconds()
            assert lease_end == T0 + HOUR + 300
            send("clk", b"delayed-later", delay=d(60))
            send("clk", b"fresh")  # visible from T0+1h on

            load.more(20)
            set_time(server, T0 + HOUR - TEN_MINUTES)  # ----------------------- back 10 min
            load.more(20)

            # Nothing came back, nothing was lost; stored instants stay where they are.
            state = bodies("clk")
            assert set(state) == {
                b"leased",
                b"delayed",
                b"long-ttl",
                b"plain",
                b"delayed-later",
                b"fresh",
            }
            assert stats("clk").expired_total == 1
            for body in (b"leased", b"delayed", b"long-ttl", b"plain"):
                assert state[body].state == pb.MESSAGE_STATE_LEASED  # the lease lasts longer
                assert state[body].visible_at.ToSeconds() == lease_end
            assert state[b"delayed-later"].state == pb.MESSAGE_STATE_DELAYED
            # Sent within the step: visible again once the clock is back at its send time.
            assert state[b"fresh"].state == pb.MESSAGE_STATE_DELAYED
            assert state[b"fresh"].visible_at.ToSeconds() == T0 + HOUR
            assert receive("clk") == []  # nothing delivered early
            # The live leases still answer to their receipts (extend from the new "now").
            extend = stub.ChangeVisibility(
                pb.ChangeVisibilityRequest(
                    queue="clk",
                    entries=[
                        pb.ChangeVisibilityEntry(
                            receipt=again[b"plain"].receipt, visibility_timeout=d(60)
                        )
                    ],
                )
            )
            assert extend.results[0].status == pb.LEASE_STATUS_OK
            assert extend.results[0].visible_at.ToSeconds() == T0 + HOUR - TEN_MINUTES + 60
            # The dedup window (5 min from T0) had passed before the step back: a new send.
            assert send("clk", b"plain-2", dedup_id="once") != state[b"plain"].message_id

            load.more(20)
            server.advance(TEN_MINUTES + 300)  # ---------------------------- T0 + 1h05
            load.more(20)

        assert not load.errors, load.errors
        # Every lease and delay has ended by now; the long TTL (T0+2h) has not.
        delivered = {m.body: m for m in receive("clk", vt=300)}
        assert set(delivered) == {
            b"leased",
            b"delayed",
            b"long-ttl",
            b"plain",
            b"delayed-later",
            b"plain-2",
            b"fresh",
        }
        assert delivered[b"leased"].delivery_count == 3

        # The load's books balance: sent = deleted + still stored (its messages never expire).
        s = stats("load")
        assert s.expired_total == 0
        assert len(load.sent) == s.deleted_total + s.total
        assert load.deleted <= load.sent and len(load.deleted) == s.deleted_total
        stored = {
            m.message_id
            for m in stub.PeekMessages(
                pb.PeekMessagesRequest(
                    queue="load", max_messages=10_000, include_leased=True, include_delayed=True
                )
            ).messages
        }
        assert stored == load.sent - load.deleted
        print(f"\nclock: load sent {len(load.sent)}, deleted {len(load.deleted)}, ops {load.ops}")
