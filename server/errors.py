"""Domain errors, and their mapping to gRPC status codes with google.rpc details.

Stores and validation raise these; only `to_rpc_status` knows gRPC. The table is API.md's:

    LeaseqError
    +-- InvalidArgument            INVALID_ARGUMENT   BadRequest field violation
    |   +-- OutOfRange             INVALID_ARGUMENT   + ErrorInfo OUT_OF_RANGE {field, value, minimum, maximum}
    +-- QueueNotFound              NOT_FOUND          ErrorInfo QUEUE_NOT_FOUND {queue}
    +-- QueueAlreadyExists         ALREADY_EXISTS     ErrorInfo QUEUE_ALREADY_EXISTS {queue}
    +-- QueueInUse                 FAILED_PRECONDITION ErrorInfo QUEUE_IN_USE {queue, used_by}
    +-- NoDeadLetterQueue          FAILED_PRECONDITION ErrorInfo NO_DEAD_LETTER_QUEUE {queue}
    +-- OverLimit                  RESOURCE_EXHAUSTED ErrorInfo OVER_LIMIT {queue, limit}
    +-- LeaseRejected              (UpdateMessage) by LeaseStatus: INVALID_RECEIPT -> INVALID_ARGUMENT,
    |                              LEASE_EXPIRED / RECEIPT_SUPERSEDED -> FAILED_PRECONDITION,
    |                              MESSAGE_NOT_FOUND / ALREADY_DELETED -> NOT_FOUND; ErrorInfo reason = status name
    +-- Unavailable                UNAVAILABLE        RetryInfo
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.rpc import status_pb2

    from .domain.types import LeaseStatus

ERROR_DOMAIN = "leaseq.v1"

# How much of a value a client sent may be echoed (error messages, error details, log lines).
ECHO_CHARS = 120


def clip(value: object, limit: int = ECHO_CHARS) -> str:
    """A client's value as an error message, an error detail or a log line may show it: at most
    `limit` characters, then how many were left out. Every echo of a client's value goes through
    this: a 32 MiB queue name once made a 32 MiB access-log line, and a PERMISSION_DENIED whose
    trailers gRPC refused to send (RESOURCE_EXHAUSTED)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text) - limit} more characters)"


class LeaseqError(Exception):
    """Base of every error the service reports to a caller on purpose."""


class InvalidArgument(LeaseqError):
    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}" if field else description)
        self.field = field
        self.description = description


class OutOfRange(InvalidArgument):
    def __init__(self, field: str, value: object, minimum: object, maximum: object) -> None:
        super().__init__(field, f"{value} is out of range [{minimum}, {maximum}]")
        self.value = value
        self.minimum = minimum
        self.maximum = maximum


class QueueNotFound(LeaseqError):
    def __init__(self, name: str) -> None:
        super().__init__(f"queue {clip(name)!r} does not exist")
        self.name = name


class QueueAlreadyExists(LeaseqError):
    def __init__(self, name: str) -> None:
        super().__init__(f"queue {clip(name)!r} already exists with another configuration")
        self.name = name


class QueueInUse(LeaseqError):
    def __init__(self, name: str, used_by: str) -> None:
        super().__init__(f"queue {clip(name)!r} is the dead letter queue of {clip(used_by)!r}")
        self.name = name
        self.used_by = used_by


class NoDeadLetterQueue(LeaseqError):
    """DeadLetterMessages on a queue that has no dead letter queue."""

    def __init__(self, name: str) -> None:
        super().__init__(f"queue {clip(name)!r} has no dead letter queue")
        self.name = name


class OverLimit(LeaseqError):
    """The queue holds max_in_flight leased messages. retry_at: when the earliest lease ends."""

    def __init__(self, name: str, limit: int, retry_at: float | None = None) -> None:
        super().__init__(f"queue {clip(name)!r} has {limit} messages in flight (max_in_flight)")
        self.name = name
        self.limit = limit
        self.retry_at = retry_at


class LeaseRejected(LeaseqError):
    """UpdateMessage could not act on the receipt; status says why."""

    def __init__(self, status: LeaseStatus) -> None:
        super().__init__(f"receipt rejected: {status.name}")
        self.status = status


class Unavailable(LeaseqError):
    def __init__(self, description: str, retry_after: float = 1.0) -> None:
        super().__init__(description)
        self.retry_after = retry_after


def to_rpc_status(error: LeaseqError) -> status_pb2.Status:
    """The google.rpc.Status (code, message, details) for a domain error."""
    import grpc
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import code_pb2, error_details_pb2, status_pb2

    details: list[any_pb2.Any] = []

    def error_info(reason: str, **metadata: object) -> None:
        details.append(
            error_details_pb2.ErrorInfo(
                reason=reason,
                domain=ERROR_DOMAIN,
                metadata={k: clip(v) for k, v in metadata.items()},
            )
        )

    if isinstance(error, InvalidArgument):
        code = code_pb2.INVALID_ARGUMENT
        details.append(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=error.field, description=error.description
                    )
                ]
            )
        )
        if isinstance(error, OutOfRange):
            error_info(
                "OUT_OF_RANGE",
                field=error.field,
                value=error.value,
                minimum=error.minimum,
                maximum=error.maximum,
            )
    elif isinstance(error, QueueNotFound):
        code = code_pb2.NOT_FOUND
        error_info("QUEUE_NOT_FOUND", queue=error.name)
    elif isinstance(error, QueueAlreadyExists):
        code = code_pb2.ALREADY_EXISTS
        error_info("QUEUE_ALREADY_EXISTS", queue=error.name)
    elif isinstance(error, QueueInUse):
        code = code_pb2.FAILED_PRECONDITION
        error_info("QUEUE_IN_USE", queue=error.name, used_by=error.used_by)
    elif isinstance(error, NoDeadLetterQueue):
        code = code_pb2.FAILED_PRECONDITION
        error_info("NO_DEAD_LETTER_QUEUE", queue=error.name)
    elif isinstance(error, OverLimit):
        code = code_pb2.RESOURCE_EXHAUSTED
        error_info("OVER_LIMIT", queue=error.name, limit=error.limit)
    elif isinstance(error, LeaseRejected):
        name = error.status.name
        if name == "INVALID_RECEIPT":
            code = code_pb2.INVALID_ARGUMENT
            details.append(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field="receipt", description="not a receipt of this queue"
                        )
                    ]
                )
            )
        elif name in ("LEASE_EXPIRED", "RECEIPT_SUPERSEDED"):
            code = code_pb2.FAILED_PRECONDITION
        else:
            code = code_pb2.NOT_FOUND
        error_info(name)
    elif isinstance(error, Unavailable):
        code = code_pb2.UNAVAILABLE
        seconds = max(0.0, error.retry_after)
        details.append(
            error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(
                    seconds=int(seconds), nanos=int((seconds % 1) * 1e9)
                )
            )
        )
    else:  # pragma: no cover - every subclass is listed above
        code = grpc.StatusCode.INTERNAL.value[0]

    packed = []
    for detail in details:
        any_msg = any_pb2.Any()
        any_msg.Pack(detail)
        packed.append(any_msg)
    return status_pb2.Status(code=code, message=str(error), details=packed)
