"""Fuzzing a real server: arbitrary protobuf requests (every field of every request, generated from
the descriptors) and raw bytes sent to every QueueService method, with the auth interceptor in
front. After every call:

- the status is never INTERNAL, UNKNOWN, DATA_LOSS or UNIMPLEMENTED, and a unary call never
  hangs to its deadline;
- when the call failed (any status but OK and a stream's own deadline), the stored data is
  exactly what it was before: every queue, its configuration, its counters and every message
  with its state, lease end and delivery count (the store is read directly);
- the server keeps answering its health check, and logs no unexpected error.

The server runs on a FakeClock, so nothing changes by itself between two calls.

Examples per test: LEASEQ_FUZZ_EXAMPLES (default 1500; a few thousand calls in all, ~30-60 s);
e.g. `LEASEQ_FUZZ_EXAMPLES=20000 python -m pytest tests/fuzz -p no:cacheprovider -s` for a long
run. The counts are printed (-s shows them).
"""

from __future__ import annotations

import base64
import logging
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leaseq.server.auth import FixedPolicy, Security, hash_token, parse_policy
from leaseq.server.clock import FakeClock
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.fuzz.strategies import POOL, damaged, messages, near_valid, raw_bytes
from tests.support.server import RunningServer, running_server

EXAMPLES = int(os.environ.get("LEASEQ_FUZZ_EXAMPLES", "1500"))
# About 12 ms an example on 2 cores; the suite's 120 s timeout would cut a long run.
pytestmark = pytest.mark.timeout(120 + EXAMPLES // 10)
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)

SERVICE = pb.DESCRIPTOR.services_by_name["QueueService"]
METHODS = list(SERVICE.methods)
NEVER = {
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.UNIMPLEMENTED,
}
# Statuses after which the stored data may have changed: success, and a stream cut by its own
# deadline (a follow stream delivers until then).
MAY_CHANGE = {grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED}
STREAM_DEADLINE = 0.2
UNARY_DEADLINE = 10.0

ROOT, PEEKER = "fuzz-root-token", "fuzz-peeker-token"
POLICY = f"""
[[principals]]
name = "root"
tokens = ["{hash_token(ROOT)}"]
[[principals.grants]]
queues = ["*"]
actions = ["*"]

[[principals]]
name = "peeker"
tokens = ["{hash_token(PEEKER)}"]
[[principals.grants]]
queues = ["fz-*"]
actions = ["peek"]
"""
CREDENTIALS_ROOT = (("authorization", f"Bearer {ROOT}"),)
_OTHER_CREDENTIALS = st.one_of(
    st.sampled_from(
        [
            (),
            (("authorization", f"Bearer {PEEKER}"),),
            (("authorization", "Bearer wrong"),),
            (("authorization", "Basic Zm9v"),),
        ]
    ),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30).map(
        lambda v: (("authorization", v),)
    ),
)
# Most calls get past auth (root may do anything); about one in five tries others.
CREDENTIALS = st.tuples(st.integers(0, 99), _OTHER_CREDENTIALS).map(
    lambda t: CREDENTIALS_ROOT if t[0] < 80 else t[1]
)


async def snapshot(store: Any) -> list[Any]:
    """Everything observable of the stored data, read from the store (no gRPC in between)."""
    out = []
    for info in await store.list_queues("", None, 10_000):
        stats = await store.stats(info.name)
        messages, after = [], None
        while True:
            page = await store.peek(info.name, 1000, "", True, True, after)
            messages += [
                (
                    m.key,
                    m.message_id,
                    m.body,
                    sorted(m.attributes.items()),
                    m.channel,
                    m.enqueued_at,
                    m.expires_at,
                    m.visible_at,
                    m.delivery_count,
                    m.last_error,
                    m.state,
                )
                for m in page.messages
            ]
            after = page.next_cursor
            if after is None:
                break
        out.append((info, stats, messages))
    return out


def seconds(value: float) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=int(value))


class Fuzzer:
    """Calls methods by path with raw bytes, checks each outcome, reseeds the data when the
    fuzzer has emptied or bloated it."""

    def __init__(self, server: RunningServer) -> None:
        self.server = server
        self.channel = grpc.insecure_channel(
            server.target,
            options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
        )
        self.stub = pb_grpc.QueueServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.codes: Counter[str] = Counter()
        self.calls = 0
        self.reseeds = 0
        self.state: list[Any] = []
        self.reseed()

    # --- the data under test --------------------------------------------------------------------

    def snapshot(self) -> list[Any]:
        return self.server.call(lambda: snapshot(self.server.store))

    def root(self, method: str, request: Any) -> Any:
        return getattr(self.stub, method)(
            request, metadata=CREDENTIALS_ROOT, timeout=UNARY_DEADLINE
        )

    def receive(self, queue: str, count: int, **kwargs: Any) -> list[pb.ReceivedMessage]:
        request = pb.GetMessagesRequest(
            queue=queue,
            max_messages=count,
            visibility_timeout=seconds(300),
            wait_time=seconds(0),
            **kwargs,
        )
        out = []
        for response in self.stub.GetMessages(request, metadata=CREDENTIALS_ROOT, timeout=10):
            out += response.messages
        return out

    def reseed(self) -> None:
        """Wipe every queue and lay out the seed data; the pool gets its names, receipts, page
        tokens and attempt ids."""
        for _ in range(20):
            names = [
                q.name for q in self.root("ListQueues", pb.ListQueuesRequest(page_size=1000)).queues
            ]
            if not names:
                break
            for name in names:
                try:
                    self.root("DeleteQueue", pb.DeleteQueueRequest(name=name))
                except grpc.RpcError as error:  # a dead letter queue still in use: next pass
                    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        self.root("CreateQueue", pb.CreateQueueRequest(name="fz-dlq"))
        self.root(
            "CreateQueue",
            pb.CreateQueueRequest(
                name="fz-main",
                config=pb.QueueConfig(dead_letter_queue="fz-dlq", max_delivery_count=2),
            ),
        )
        self.root("CreateQueue", pb.CreateQueueRequest(name="fz-other"))
        entries = [
            pb.SendEntry(
                id=str(i),
                body=f"seed-{i}".encode(),
                channel=["", "ch-a", "ch-b"][i % 3],
                attributes={"n": str(i)},
                dedup_id=f"dd-{i}" if i % 4 == 0 else "",
                delay=seconds(600) if i >= 12 else None,
            )
            for i in range(14)
        ]
        self.root("SendMessages", pb.SendMessagesRequest(queue="fz-main", entries=entries))
        self.root(
            "SendMessages",
            pb.SendMessagesRequest(
                queue="fz-other", entries=[pb.SendEntry(body=b"other") for _ in range(3)]
            ),
        )
        leased = self.receive("fz-main", 3)
        attempt = self.receive("fz-main", 1, receive_attempt_id="att-1")
        other = self.receive("fz-other", 1)
        peek = self.root("PeekMessages", pb.PeekMessagesRequest(queue="fz-main", max_messages=1))
        listing = self.root("ListQueues", pb.ListQueuesRequest(page_size=1))
        POOL.set(
            [
                "fz-main",
                "fz-dlq",
                "fz-other",
                "fz-new",
                "ch-a",
                "ch-*",
                "att-1",
                "dd-0",
                peek.next_page_token,
                listing.next_page_token,
            ]
            + [m.receipt for m in leased + attempt + other]
        )
        self.state = self.snapshot()
        self.reseeds += 1

    def needs_reseed(self) -> bool:
        names = {info.name for info, _, _ in self.state}
        total = sum(stats.total for _, stats, _ in self.state)
        visible = {info.name: stats.visible for info, stats, _ in self.state}
        return (
            not {"fz-main", "fz-dlq", "fz-other"} <= names
            or visible.get("fz-main", 0) < 3
            or total > 400
            or len(names) > 12
        )

    # --- one call ---------------------------------------------------------------------------

    def call(self, method: Any, payload: bytes, metadata: Any) -> grpc.StatusCode:
        path = f"/{SERVICE.full_name}/{method.name}"
        self.calls += 1
        try:
            if method.server_streaming:
                stream = self.channel.unary_stream(path)(
                    payload, metadata=metadata, timeout=STREAM_DEADLINE
                )
                for _ in stream:
                    pass
            else:
                self.channel.unary_unary(path)(payload, metadata=metadata, timeout=UNARY_DEADLINE)
            code = grpc.StatusCode.OK
        except grpc.RpcError as error:
            code = error.code()
        self.codes[code.name] += 1
        assert code not in NEVER, (method.name, code, payload[:200])
        if method.server_streaming:
            # A cut stream's handler may still be finishing: wait until it has let go.
            limiter = self.server.app.stream_limiter
            self.server.call(lambda: limiter.wait_until(lambda n: n == 0))
        else:
            assert code != grpc.StatusCode.DEADLINE_EXCEEDED, (method.name, payload[:200])
        return code

    def check(self, method: Any, payload: bytes, metadata: Any) -> None:
        code = self.call(method, payload, metadata)
        after = self.snapshot()
        if code not in MAY_CHANGE:
            assert after == self.state, f"{method.name} failed with {code} but changed data"
        self.state = after
        if self.needs_reseed():
            self.reseed()

    def healthy(self) -> None:
        reply = self.health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

    def report(self, label: str) -> None:
        print(
            f"\nfuzz {label}: {self.calls} calls, {self.reseeds} reseeds, "
            f"statuses {dict(sorted(self.codes.items()))}"
        )


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    security = Security(FixedPolicy(parse_policy(POLICY)))
    with running_server("memory://", FakeClock(), security=security) as running:
        yield running


@pytest.fixture
def fuzzer(server: RunningServer, caplog: pytest.LogCaptureFixture) -> Iterator[Fuzzer]:
    caplog.set_level(logging.WARNING, logger="leaseq")
    fuzzer = Fuzzer(server)
    yield fuzzer
    fuzzer.channel.close()
    unexpected = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not unexpected, [r.getMessage() for r in unexpected]


# Half arbitrary requests, half plausible ones with a few arbitrary fields (they get further).
REQUESTS = st.one_of(
    [
        st.tuples(
            st.just(m),
            st.one_of(messages(m.input_type), near_valid(m.input_type, m.name)),
            CREDENTIALS,
        )
        for m in METHODS
    ]
)
RAW = st.one_of(
    [st.tuples(st.just(m), raw_bytes(messages(m.input_type)), CREDENTIALS) for m in METHODS]
)


def test_arbitrary_requests_never_break_the_server(fuzzer: Fuzzer) -> None:
    @FUZZ_SETTINGS
    @given(REQUESTS)
    def run(call: tuple[Any, Any, Any]) -> None:
        method, request, metadata = call
        fuzzer.check(method, request.SerializeToString(), metadata)

    run()
    fuzzer.healthy()
    fuzzer.report("requests")
    assert fuzzer.calls >= EXAMPLES


def test_raw_bytes_never_break_the_server(fuzzer: Fuzzer) -> None:
    @FUZZ_SETTINGS
    @given(RAW)
    def run(call: tuple[Any, bytes, Any]) -> None:
        fuzzer.check(*call)

    run()
    fuzzer.healthy()
    fuzzer.report("raw bytes")
    assert fuzzer.calls >= EXAMPLES
    assert fuzzer.codes["INVALID_ARGUMENT"] > 0


def test_forged_truncated_and_foreign_receipts_are_invalid_receipt(fuzzer: Fuzzer) -> None:
    """Any string but a receipt this queue issued: INVALID_RECEIPT in DeleteMessages and
    ChangeVisibility results, INVALID_ARGUMENT (reason INVALID_RECEIPT) from UpdateMessage;
    nothing changes, and the real receipts still work afterwards."""
    leased = fuzzer.receive("fz-main", 2)
    issued = {m.receipt for m in leased}
    foreign = [m.receipt for m in fuzzer.receive("fz-other", 1)]
    # A queue deleted and created again under the same name: its old receipts are foreign too.
    fuzzer.root("CreateQueue", pb.CreateQueueRequest(name="fz-reborn"))
    fuzzer.root(
        "SendMessages", pb.SendMessagesRequest(queue="fz-reborn", entries=[pb.SendEntry(body=b"r")])
    )
    reborn = [m.receipt for m in fuzzer.receive("fz-reborn", 1)]
    fuzzer.root("DeleteQueue", pb.DeleteQueueRequest(name="fz-reborn"))
    fuzzer.root("CreateQueue", pb.CreateQueueRequest(name="fz-reborn"))
    fuzzer.root(
        "SendMessages", pb.SendMessagesRequest(queue="fz-reborn", entries=[pb.SendEntry(body=b"r")])
    )
    before = fuzzer.snapshot()
    seen = Counter()

    receipts = st.one_of(
        st.sampled_from(sorted(issued)).flatmap(damaged),  # few distinct: flatmap is cheap here
        st.sampled_from(foreign + reborn),
        st.text(max_size=70),
        st.binary(min_size=20, max_size=40).map(
            lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
        ),
    )

    @settings(FUZZ_SETTINGS, max_examples=max(100, EXAMPLES // 5))
    @given(receipt=receipts)
    def run(receipt: str) -> None:
        if receipt in issued:
            return  # damaged() may give the original back
        queue = "fz-reborn" if receipt in reborn else "fz-main"
        deleted = fuzzer.root(
            "DeleteMessages", pb.DeleteMessagesRequest(queue=queue, receipts=[receipt])
        )
        assert [r.status for r in deleted.results] == [pb.LEASE_STATUS_INVALID_RECEIPT], receipt
        changed = fuzzer.root(
            "ChangeVisibility",
            pb.ChangeVisibilityRequest(
                queue=queue,
                entries=[pb.ChangeVisibilityEntry(receipt=receipt, visibility_timeout=seconds(0))],
            ),
        )
        assert [r.status for r in changed.results] == [pb.LEASE_STATUS_INVALID_RECEIPT], receipt
        with pytest.raises(grpc.RpcError) as error:
            fuzzer.root(
                "UpdateMessage", pb.UpdateMessageRequest(queue=queue, receipt=receipt, body=b"u")
            )
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        seen["receipts"] += 1
        fuzzer.calls += 3

    run()
    assert fuzzer.snapshot() == before
    done = fuzzer.root(
        "DeleteMessages", pb.DeleteMessagesRequest(queue="fz-main", receipts=sorted(issued))
    )
    assert [r.status for r in done.results] == [pb.LEASE_STATUS_OK] * len(issued)
    print(f"\nfuzz receipts: {seen['receipts']} receipts, {fuzzer.calls} calls")
