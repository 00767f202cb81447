"""Values a client sends are echoed bounded: a 32 MiB queue name used to be written
whole into the access log (log amplification) and into PERMISSION_DENIED and UpdateQueue mask
errors, until gRPC refused the trailers (RESOURCE_EXHAUSTED). Against a real `leaseq serve` with
an auth policy, logging at info (where PERMISSION_DENIED and INVALID_ARGUMENT are logged)."""

from __future__ import annotations

from pathlib import Path

import grpc
from google.protobuf import field_mask_pb2

from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.hostile.policy import ALICE, POLICY_TOML, ROOT

HUGE = 32 * 1024 * 1024
BOUND = 1000  # a message: its own words plus a clipped value or two (120 characters each)


def _status(call, request, metadata) -> tuple[grpc.StatusCode, str]:
    try:
        call(request, metadata=metadata, timeout=60)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


def test_huge_values_get_their_status_with_a_bounded_message_and_log_line(
    serve_process, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY_TOML)
    server = serve_process(
        tmp_path, "memory://", "--auth-policy", str(policy), "--log-level", "info"
    ).start()
    huge_name = "h" * HUGE
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    with grpc.insecure_channel(server.target, options=options) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        stub.CreateQueue(pb.CreateQueueRequest(name="a-q"), metadata=ROOT)
        outcomes = {
            # Alice may touch only a-*: refused by the policy before the name is checked.
            "denied": _status(stub.GetQueue, pb.GetQueueRequest(name=huge_name), ALICE),
            "denied stream": _status(
                lambda r, **kw: list(stub.GetMessages(r, **kw)),
                pb.GetMessagesRequest(queue=huge_name, max_messages=1),
                ALICE,
            ),
            "bad name": _status(stub.GetQueue, pb.GetQueueRequest(name=huge_name), ROOT),
            "bad queue mask": _status(
                stub.UpdateQueue,
                pb.UpdateQueueRequest(
                    name="a-q", update_mask=field_mask_pb2.FieldMask(paths=["p" * HUGE])
                ),
                ROOT,
            ),
            "bad message mask": _status(
                stub.UpdateMessage,
                pb.UpdateMessageRequest(
                    queue="a-q",
                    receipt="r",
                    update_mask=field_mask_pb2.FieldMask(paths=["p" * HUGE]),
                ),
                ROOT,
            ),
        }
    expected = {
        "denied": grpc.StatusCode.PERMISSION_DENIED,
        "denied stream": grpc.StatusCode.PERMISSION_DENIED,
        "bad name": grpc.StatusCode.INVALID_ARGUMENT,
        "bad queue mask": grpc.StatusCode.INVALID_ARGUMENT,
        "bad message mask": grpc.StatusCode.INVALID_ARGUMENT,
    }
    assert {what: code for what, (code, _) in outcomes.items()} == expected
    for what, (_, details) in outcomes.items():
        assert len(details) < BOUND, (what, len(details))
    assert "more characters" in outcomes["denied"][1]
    assert "more characters" in outcomes["bad queue mask"][1]
    server.terminate()
    assert server.wait(30) == 0
    log = server.stderr()
    lines = log.splitlines()
    assert sum('"rpc_code": "PERMISSION_DENIED"' in line for line in lines) == 2
    assert max(len(line) for line in lines) < 2 * BOUND
    assert len(log) < 64 * 1024  # not a copy of the 32 MiB values
