"""Errors a real server reports arrive as the right LeaseqError subclass, details decoded."""

from __future__ import annotations

import socket

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

from leaseq.client import (
    DeadlineExceeded,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    LeaseqError,
    NotFound,
    OverLimit,
    PermissionDenied,
    QueueAlreadyExists,
    QueueClient,
    QueueNotFound,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    from_rpc_error,
)
from leaseq.client.errors import error_for_status
from tests.support.server import running_server


def test_out_of_range_carries_field_value_and_bounds(client: QueueClient, queue: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        client.receive(queue, max_messages=20_000)
    error = caught.value
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.reason == "OUT_OF_RANGE"
    assert (error.field, error.value, error.minimum, error.maximum) == (
        "max_messages",
        "20000",
        "1",
        "10000",
    )
    assert error.violations[0].field == "max_messages"
    assert "out of range" in str(error)


def test_out_of_range_duration_bounds(client: QueueClient, queue_name: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        client.create_queue(queue_name, visibility_timeout=7 * 86400 + 1)
    error = caught.value
    assert error.field == "config.visibility_timeout"
    assert (error.minimum, error.maximum) == ("0s", "604800s")
    with pytest.raises(QueueNotFound):  # bad input changed nothing
        client.get_queue(queue_name)


def test_bad_request_without_range(client: QueueClient) -> None:
    with pytest.raises(InvalidArgument) as caught:
        client.create_queue("no spaces allowed")
    error = caught.value
    assert error.field == "name"
    assert error.value is None and error.minimum is None and error.maximum is None
    assert error.violations and error.violations[0].description


def test_queue_not_found(client: QueueClient, queue_name: str) -> None:
    with pytest.raises(QueueNotFound) as caught:
        client.stats(queue_name)
    error = caught.value
    assert isinstance(error, NotFound)
    assert error.code is grpc.StatusCode.NOT_FOUND and error.reason == "QUEUE_NOT_FOUND"
    assert error.queue == queue_name


def test_queue_already_exists(client: QueueClient, queue: str) -> None:
    with pytest.raises(QueueAlreadyExists) as caught:
        client.create_queue(queue, visibility_timeout=99)
    assert caught.value.queue == queue
    assert caught.value.code is grpc.StatusCode.ALREADY_EXISTS


def test_queue_in_use_is_a_failed_precondition(client: QueueClient, queue_name: str) -> None:
    dlq = client.create_queue(f"{queue_name}-dlq").name
    client.create_queue(queue_name, dead_letter_queue=dlq, max_delivery_count=2)
    with pytest.raises(FailedPrecondition) as caught:
        client.delete_queue(dlq)
    assert caught.value.reason == "QUEUE_IN_USE"


def test_update_with_a_superseded_receipt(client: QueueClient, queue: str) -> None:
    client.send(queue, "a")
    [msg] = client.receive(queue, visibility_timeout=60, wait_time=0)
    client.update_message(queue, msg, body="b")
    with pytest.raises(FailedPrecondition) as caught:
        client.update_message(queue, msg, body="c")
    assert caught.value.reason == "RECEIPT_SUPERSEDED"


def test_update_a_deleted_message_is_not_found(client: QueueClient, queue: str) -> None:
    client.send(queue, "a")
    [msg] = client.receive(queue, visibility_timeout=60, wait_time=0)
    client.delete(queue, msg)
    with pytest.raises(NotFound) as caught:
        client.update_message(queue, msg, body="c")
    assert not isinstance(caught.value, QueueNotFound)
    assert caught.value.reason == "ALREADY_DELETED"


def test_over_limit(client: QueueClient, queue_name: str) -> None:
    client.create_queue(queue_name, max_in_flight=1)
    client.send_batch(queue_name, ["a", "b"])
    client.receive(queue_name, visibility_timeout=60, wait_time=0)
    with pytest.raises(OverLimit) as caught:
        client.receive(queue_name, visibility_timeout=60, wait_time=0)
    error = caught.value
    assert isinstance(error, ResourceExhausted)
    assert (error.queue, error.limit) == (queue_name, 1)


def test_unavailable_carries_retry_info() -> None:
    with running_server() as server:
        server.drain()  # new calls: UNAVAILABLE with RetryInfo
        with QueueClient(server.target, retry=None) as client, pytest.raises(Unavailable) as caught:
            client.list_queues()
    assert caught.value.retry_after == pytest.approx(1.0)


def test_deadline_exceeded() -> None:
    # A listener that never answers (a hung server): the call can only end by its deadline.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        target = f"127.0.0.1:{silent.getsockname()[1]}"
        with QueueClient(target, timeout=0.3, retry=None) as client:
            with pytest.raises(DeadlineExceeded) as caught:
                client.list_queues()
    assert caught.value.code is grpc.StatusCode.DEADLINE_EXCEEDED


def test_errors_are_chained_to_the_grpc_error(client: QueueClient, queue_name: str) -> None:
    with pytest.raises(QueueNotFound) as caught:
        client.get_queue(queue_name)
    assert isinstance(caught.value.__cause__, grpc.RpcError)


# --- the mapping itself, for codes this server does not produce yet ---------------------------


def _status(code: grpc.StatusCode, message: str, *details: object) -> status_pb2.Status:
    packed = []
    for detail in details:
        any_msg = any_pb2.Any()
        any_msg.Pack(detail)  # type: ignore[arg-type]
        packed.append(any_msg)
    return status_pb2.Status(code=code.value[0], message=message, details=packed)


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (grpc.StatusCode.PERMISSION_DENIED, PermissionDenied),
        (grpc.StatusCode.UNAUTHENTICATED, Unauthenticated),
        (grpc.StatusCode.DEADLINE_EXCEEDED, DeadlineExceeded),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, ResourceExhausted),
        (grpc.StatusCode.INTERNAL, LeaseqError),
        (grpc.StatusCode.UNKNOWN, LeaseqError),
    ],
)
def test_codes_map_to_classes(code: grpc.StatusCode, cls: type[LeaseqError]) -> None:
    error = error_for_status(code, "nope", _status(code, "nope"))
    assert type(error) is cls
    assert (error.code, error.details, str(error)) == (code, "nope", "nope")


def test_entry_error_code_numbers_map_too() -> None:
    error = error_for_status(3, "too big")
    assert isinstance(error, InvalidArgument) and error.field == ""


def test_details_are_decoded() -> None:
    status = _status(
        grpc.StatusCode.UNAVAILABLE,
        "store down",
        error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2, nanos=5 * 10**8)),
        error_details_pb2.ErrorInfo(reason="STORE_DOWN", domain="leaseq.v1", metadata={"a": "b"}),
    )
    error = error_for_status(grpc.StatusCode.UNAVAILABLE, "store down", status)
    assert isinstance(error, Unavailable)
    assert (error.retry_after, error.reason, error.metadata) == (2.5, "STORE_DOWN", {"a": "b"})


def test_bad_request_violations_are_kept() -> None:
    violations = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field="entries[1].body", description="x"),
            error_details_pb2.BadRequest.FieldViolation(field="entries[2].ttl", description="y"),
        ]
    )
    code = grpc.StatusCode.INVALID_ARGUMENT
    error = error_for_status(code, "bad", _status(code, "bad", violations))
    assert isinstance(error, InvalidArgument)
    assert error.field == "entries[1].body"
    assert error.violations == (
        FieldViolation("entries[1].body", "x"),
        FieldViolation("entries[2].ttl", "y"),
    )


def test_a_bare_rpc_error() -> None:
    error = from_rpc_error(grpc.RpcError())
    assert type(error) is LeaseqError and error.code is grpc.StatusCode.UNKNOWN
