"""The permission matrix against a real server (mutual TLS, the policy of conftest.py): every
principal x queue x RPC (GetMessages as a long poll and as a follow stream; RedriveMessages also
x destination). Allowed calls succeed; the others get PERMISSION_DENIED and change nothing.
Missing, wrong or malformed credentials get UNAUTHENTICATED on every RPC. The expected outcome
comes from this file's own reading of the policy (`may`), not from the server's code."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import pytest
from google.protobuf import duration_pb2, field_mask_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from leaseq.server.auth import RULES, FixedPolicy, Security, parse_policy
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.security.conftest import CERT_PRINCIPAL, PKI, PRINCIPALS, policy_toml
from tests.support.server import RunningServer, running_server

QUEUES = ["orders-eu", "orders-us", "orders-dlq", "billing", "other"]
ANY = frozenset({"send", "receive", "ack", "peek", "admin", "redrive"})

# What each RPC needs on its queue, in this test's own words (API.md "Security", auth.py).
NEEDS: dict[str, frozenset[str]] = {
    "CreateQueue": frozenset({"admin"}),
    "UpdateQueue": frozenset({"admin"}),
    "DeleteQueue": frozenset({"admin"}),
    "PurgeQueue": frozenset({"admin"}),
    "GetQueue": ANY,
    "GetQueueStats": ANY,
    "SendMessages": frozenset({"send"}),
    "GetMessages": frozenset({"receive"}),
    "GetMessages(follow)": frozenset({"receive"}),
    "PeekMessages": frozenset({"peek"}),
    "ChangeVisibility": frozenset({"ack"}),
    "DeleteMessages": frozenset({"ack"}),
    "UpdateMessage": frozenset({"ack"}),
    "DeadLetterMessages": frozenset({"ack"}),
}
TIMEOUT = 10.0


def may(principal: str, actions: frozenset[str], queue: str) -> bool:
    return any(
        actions & granted and any(fnmatch.fnmatchcase(queue, p) for p in patterns)
        for patterns, granted in PRINCIPALS[principal][1]
    )


def seconds(value: float) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=int(value))


@dataclass
class Caller:
    name: str
    stub: pb_grpc.QueueServiceStub
    metadata: tuple[tuple[str, str], ...]

    def __call__(self, method: str, request, **kwargs):
        return getattr(self.stub, method)(
            request, metadata=self.metadata, timeout=TIMEOUT, **kwargs
        )


@pytest.fixture
def callers(mtls_server: RunningServer, pki: PKI) -> Iterator[dict[str, Caller]]:
    """One channel per principal: token principals present the stranger certificate (which names
    no principal, so the token decides); cert-worker presents worker.internal and no token."""
    channels = []
    out = {}
    for name, (token, _) in PRINCIPALS.items():
        client = pki.worker if name == CERT_PRINCIPAL else pki.stranger
        channel = grpc.secure_channel(mtls_server.target, pki.channel_credentials(client))
        channels.append(channel)
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        out[name] = Caller(name, pb_grpc.QueueServiceStub(channel), metadata)
    yield out
    for channel in channels:
        channel.close()


class Matrix:
    """The calls of the matrix; root (every action on every queue) prepares what they need."""

    def __init__(self, root: Caller) -> None:
        self.root = root
        self.cells = 0

    def ensure_queue(self, queue: str) -> None:
        self.root("CreateQueue", pb.CreateQueueRequest(name=queue))

    def snapshot(self, *queues: str) -> list[tuple[int, int, int, int]]:
        out = []
        for queue in queues:
            s = self.root("GetQueueStats", pb.GetQueueStatsRequest(name=queue)).stats
            out.append((s.visible, s.leased, s.delayed, s.total))
        return out

    def send(self, queue: str) -> None:
        self.root(
            "SendMessages",
            pb.SendMessagesRequest(queue=queue, entries=[pb.SendEntry(id="1", body=b"seed")]),
        )

    def receipt(self, queue: str) -> str:
        """A live lease's receipt on queue (a fresh message, received by root)."""
        self.send(queue)
        [response] = list(
            self.root(
                "GetMessages",
                pb.GetMessagesRequest(
                    queue=queue,
                    max_messages=1,
                    visibility_timeout=seconds(300),
                    wait_time=seconds(0),
                ),
            )
        )
        return response.messages[0].receipt

    def request(self, rpc: str, queue: str) -> tuple[str, object]:
        """(stub method, request) of one cell, after preparing what an allowed call needs."""
        if rpc == "CreateQueue":
            return rpc, pb.CreateQueueRequest(name=queue)  # same config: a no-op when allowed
        if rpc == "UpdateQueue":
            return rpc, pb.UpdateQueueRequest(
                name=queue,
                config=pb.QueueConfig(visibility_timeout=seconds(30)),
                update_mask=field_mask_pb2.FieldMask(paths=["visibility_timeout"]),
            )
        if rpc in ("DeleteQueue", "PurgeQueue", "GetQueue", "GetQueueStats"):
            return rpc, getattr(pb, f"{rpc}Request")(name=queue)
        if rpc == "SendMessages":
            return rpc, pb.SendMessagesRequest(
                queue=queue, entries=[pb.SendEntry(id="a", body=b"matrix")]
            )
        if rpc == "GetMessages":
            return rpc, pb.GetMessagesRequest(
                queue=queue, max_messages=1, visibility_timeout=seconds(300), wait_time=seconds(0)
            )
        if rpc == "GetMessages(follow)":
            self.send(queue)  # something to deliver: the allowed stream's first batch
            return "GetMessages", pb.GetMessagesRequest(
                queue=queue, max_messages=1, visibility_timeout=seconds(300), follow=True
            )
        if rpc == "PeekMessages":
            return rpc, pb.PeekMessagesRequest(queue=queue, max_messages=10, include_leased=True)
        if rpc == "ChangeVisibility":
            entry = pb.ChangeVisibilityEntry(
                receipt=self.receipt(queue), visibility_timeout=seconds(0)
            )
            return rpc, pb.ChangeVisibilityRequest(queue=queue, entries=[entry])
        if rpc == "DeleteMessages":
            return rpc, pb.DeleteMessagesRequest(queue=queue, receipts=[self.receipt(queue)])
        if rpc == "UpdateMessage":
            return rpc, pb.UpdateMessageRequest(
                queue=queue, receipt=self.receipt(queue), body=b"updated"
            )
        if rpc == "DeadLetterMessages":
            return rpc, pb.DeadLetterMessagesRequest(
                queue=queue, receipts=[self.receipt(queue)], reason="matrix"
            )
        raise AssertionError(rpc)

    def outcome(self, caller: Caller, method: str, request, *, stream: bool) -> grpc.StatusCode:
        try:
            if not stream:
                response = caller(method, request)
                if method in ("ChangeVisibility", "DeleteMessages"):
                    assert [r.status for r in response.results] == [pb.LEASE_STATUS_OK]
                return grpc.StatusCode.OK
            call = caller(method, request)
            try:
                first = next(call)
                if request.follow:
                    assert len(first.messages) == 1
            finally:
                call.cancel()
            return grpc.StatusCode.OK
        except grpc.RpcError as error:
            if (
                method == "DeadLetterMessages"
                and error.code() is grpc.StatusCode.FAILED_PRECONDITION
            ):
                # The matrix's queues have no dead letter queue: past the permission check, the
                # call fails on that (and changes nothing), which is what an allowed call does.
                return grpc.StatusCode.OK
            return error.code()


def test_permission_matrix(callers: dict[str, Caller], mtls_server: RunningServer) -> None:
    matrix = Matrix(callers["root"])
    for queue in QUEUES:
        matrix.ensure_queue(queue)
    allowed = denied = 0

    def cell(
        principal: str,
        needs: list[tuple[frozenset[str], str]],
        run: Callable[[], grpc.StatusCode],
        what: str,
    ) -> None:
        nonlocal allowed, denied
        queues = [q for _, q in needs]
        expect_ok = all(may(principal, actions, q) for actions, q in needs)
        before = matrix.snapshot(*queues)
        code = run()
        matrix.cells += 1
        if expect_ok:
            allowed += 1
            assert code == grpc.StatusCode.OK, f"{principal}: {what} should succeed, got {code}"
        else:
            denied += 1
            assert code == grpc.StatusCode.PERMISSION_DENIED, f"{principal}: {what} got {code}"
            assert matrix.snapshot(*queues) == before, f"{principal}: denied {what} changed data"

    for principal, caller in callers.items():
        for queue in QUEUES:
            for rpc, actions in NEEDS.items():
                method, request = matrix.request(rpc, queue)
                stream = method == "GetMessages"
                cell(
                    principal,
                    [(actions, queue)],
                    # Called within this iteration: the loop variables are the current ones.
                    lambda: matrix.outcome(caller, method, request, stream=stream),  # noqa: B023
                    f"{rpc} on {queue}",
                )
                if rpc == "DeleteQueue":
                    matrix.ensure_queue(queue)
            for destination in ["", *QUEUES]:
                if destination == queue:
                    continue
                request = pb.RedriveMessagesRequest(queue=queue, destination=destination)
                needs = [(frozenset({"redrive"}), queue)]
                if destination:
                    needs.append((frozenset({"redrive"}), destination))
                cell(
                    principal,
                    needs,
                    lambda: matrix.outcome(caller, "RedriveMessages", request, stream=False),  # noqa: B023
                    f"RedriveMessages {queue} -> {destination or '(source)'}",
                )
        # ListQueues: allowed to all, filtered to the queues the principal holds any action on.
        names = [q.name for q in caller("ListQueues", pb.ListQueuesRequest()).queues]
        assert names == sorted(q for q in QUEUES if may(principal, ANY, q)), principal
        matrix.cells += 1
    print(f"permission matrix: {matrix.cells} cells ({allowed} allowed, {denied} denied)")
    assert allowed > 100 and denied > 100
    assert matrix.cells == len(PRINCIPALS) * (len(QUEUES) * (len(NEEDS) + len(QUEUES)) + 1)


def test_every_rpc_of_the_service_has_a_rule() -> None:
    methods = {m.name for m in pb.DESCRIPTOR.services_by_name["QueueService"].methods}
    assert methods == set(RULES)
    assert {rpc.split("(")[0] for rpc in NEEDS} | {"ListQueues", "RedriveMessages"} == methods


def _requests() -> dict[str, object]:
    """One plausible request per RPC (all on queue orders-eu)."""
    q = "orders-eu"
    return {
        "CreateQueue": pb.CreateQueueRequest(name=q),
        "GetQueue": pb.GetQueueRequest(name=q),
        "ListQueues": pb.ListQueuesRequest(),
        "UpdateQueue": pb.UpdateQueueRequest(name=q),
        "DeleteQueue": pb.DeleteQueueRequest(name=q),
        "PurgeQueue": pb.PurgeQueueRequest(name=q),
        "GetQueueStats": pb.GetQueueStatsRequest(name=q),
        "SendMessages": pb.SendMessagesRequest(queue=q, entries=[pb.SendEntry(body=b"x")]),
        "GetMessages": pb.GetMessagesRequest(queue=q, max_messages=1, wait_time=seconds(0)),
        "PeekMessages": pb.PeekMessagesRequest(queue=q, max_messages=1),
        "ChangeVisibility": pb.ChangeVisibilityRequest(queue=q),
        "DeleteMessages": pb.DeleteMessagesRequest(queue=q, receipts=["x"]),
        "UpdateMessage": pb.UpdateMessageRequest(queue=q, receipt="x"),
        "RedriveMessages": pb.RedriveMessagesRequest(queue=q),
        "DeadLetterMessages": pb.DeadLetterMessagesRequest(queue=q, receipts=["x"]),
    }


def _code(stub: pb_grpc.QueueServiceStub, method: str, request, metadata) -> grpc.StatusCode:
    try:
        result = getattr(stub, method)(request, metadata=metadata, timeout=TIMEOUT)
        if method == "GetMessages":
            list(result)
        return grpc.StatusCode.OK
    except grpc.RpcError as error:
        return error.code()


BAD_CREDENTIALS = {
    "no token": (),
    "wrong token": (("authorization", "Bearer tok-not-in-the-policy"),),
    "a hash as token": (("authorization", "Bearer sha256:" + "0" * 64),),
    "not bearer": (("authorization", "Basic dG9rLXJvb3QtNWQxYw=="),),
    "empty bearer": (("authorization", "Bearer "),),
    "oversized": (("authorization", "Bearer " + "x" * 5000),),
}


def test_missing_wrong_or_malformed_credentials_are_unauthenticated(
    mtls_server: RunningServer, pki: PKI
) -> None:
    """Under mTLS with a certificate the policy does not know, and over plaintext."""
    checked = 0
    with grpc.secure_channel(mtls_server.target, pki.channel_credentials(pki.stranger)) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        for label, metadata in BAD_CREDENTIALS.items():
            for method, request in _requests().items():
                assert _code(stub, method, request, metadata) == grpc.StatusCode.UNAUTHENTICATED, (
                    label,
                    method,
                )
                checked += 1
        # The certificate's principal, but a wrong token: the token decides.
        with grpc.secure_channel(mtls_server.target, pki.channel_credentials(pki.worker)) as ch2:
            code = _code(
                pb_grpc.QueueServiceStub(ch2),
                "GetQueue",
                pb.GetQueueRequest(name="orders-us"),
                BAD_CREDENTIALS["wrong token"],
            )
            assert code == grpc.StatusCode.UNAUTHENTICATED
        # Health and reflection need no token.
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        services = {s.name for s in next(reflection).list_services_response.service}
        assert "leaseq.v1.QueueService" in services
    print(f"unauthenticated cells: {checked}")


def test_tokens_over_plaintext_and_health_stays_open() -> None:
    """A policy without TLS (loopback): tokens alone authenticate."""
    security = Security(FixedPolicy(parse_policy(policy_toml())))
    with running_server(security=security) as server, grpc.insecure_channel(server.target) as ch:
        stub = pb_grpc.QueueServiceStub(ch)
        root = (("authorization", f"Bearer {PRINCIPALS['root'][0]}"),)
        # grpc lower-cases keys; the scheme is case-insensitive (RFC 7235).
        sender = (("authorization", f"bearer {PRINCIPALS['sender'][0]}"),)
        stub.CreateQueue(pb.CreateQueueRequest(name="orders-eu"), metadata=root)
        reply = stub.SendMessages(
            pb.SendMessagesRequest(queue="orders-eu", entries=[pb.SendEntry(body=b"x")]),
            metadata=sender,
        )
        assert reply.results[0].message_id
        for label, metadata in BAD_CREDENTIALS.items():
            assert _code(stub, "GetQueue", pb.GetQueueRequest(name="orders-eu"), metadata) == (
                grpc.StatusCode.UNAUTHENTICATED
            ), label
        assert (
            _code(
                stub,
                "PeekMessages",
                pb.PeekMessagesRequest(queue="orders-eu", max_messages=1),
                sender,
            )
            == grpc.StatusCode.PERMISSION_DENIED
        )
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_dead_letter_queue_needs_admin_on_both_queues() -> None:
    security = Security(FixedPolicy(parse_policy(policy_toml())))
    operator = (("authorization", f"Bearer {PRINCIPALS['operator'][0]}"),)
    root = (("authorization", f"Bearer {PRINCIPALS['root'][0]}"),)
    with running_server(security=security) as server, grpc.insecure_channel(server.target) as ch:
        stub = pb_grpc.QueueServiceStub(ch)
        for name in ("orders-dlq", "other"):
            stub.CreateQueue(pb.CreateQueueRequest(name=name), metadata=root)

        def create(dlq: str) -> grpc.StatusCode:
            config = pb.QueueConfig(dead_letter_queue=dlq, max_delivery_count=3)
            return _code(
                stub,
                "CreateQueue",
                pb.CreateQueueRequest(name=f"orders-x-{dlq}", config=config),
                operator,
            )

        assert create("orders-dlq") == grpc.StatusCode.OK
        assert create("other") == grpc.StatusCode.PERMISSION_DENIED  # no admin on "other"


def test_no_token_or_body_is_logged(
    mtls_server: RunningServer, pki: PKI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret_body = b"body-that-must-not-be-logged-6b1e"
    with grpc.secure_channel(mtls_server.target, pki.channel_credentials(pki.stranger)) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        for name in ("root", "sender", "nobody"):
            metadata = (("authorization", f"Bearer {PRINCIPALS[name][0]}"),)
            for queue in ("orders-eu", "other"):
                _code(stub, "CreateQueue", pb.CreateQueueRequest(name=queue), metadata)
                _code(
                    stub,
                    "SendMessages",
                    pb.SendMessagesRequest(queue=queue, entries=[pb.SendEntry(body=secret_body)]),
                    metadata,
                )
        for metadata in BAD_CREDENTIALS.values():
            _code(stub, "GetQueue", pb.GetQueueRequest(name="orders-eu"), metadata)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "denied" in text  # the denials were logged (at DEBUG) ...
    for token, _ in PRINCIPALS.values():  # ... without any token or body
        if token:
            assert token not in text
    assert "tok-not-in-the-policy" not in text
    assert secret_body.decode() not in text
