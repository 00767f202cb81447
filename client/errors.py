"""The client's exceptions: one small tree, decoded from gRPC status codes and their details.

Every error a server reports arrives as a gRPC status code plus, in the trailers, a
``google.rpc.Status`` whose details say more (API.md, "Errors"). ``from_rpc_error`` turns a
``grpc.RpcError`` into one of these classes, so callers never need to look at gRPC codes::

    LeaseqError                    any failure reported by the server or the transport
    +-- InvalidArgument            INVALID_ARGUMENT: .field .value .minimum .maximum (BadRequest,
    |                              ErrorInfo OUT_OF_RANGE), .violations (every BadRequest entry)
    +-- NotFound                   NOT_FOUND (e.g. UpdateMessage on a deleted message)
    |   +-- QueueNotFound          ErrorInfo QUEUE_NOT_FOUND: .queue
    +-- QueueAlreadyExists         ALREADY_EXISTS (create with another configuration): .queue
    +-- FailedPrecondition         FAILED_PRECONDITION (a lease expired or was superseded, a
    |                              queue in use as a dead letter queue): .reason says which
    +-- ResourceExhausted          RESOURCE_EXHAUSTED
    |   +-- OverLimit              ErrorInfo OVER_LIMIT (max_in_flight reached): .queue .limit
    +-- PermissionDenied           PERMISSION_DENIED
    +-- Unauthenticated            UNAUTHENTICATED
    +-- Unavailable                UNAVAILABLE (draining, store or network down): .retry_after
    +-- DeadlineExceeded           DEADLINE_EXCEEDED

Every error carries ``.code`` (a ``grpc.StatusCode``), ``.details`` (the server's message),
``.reason`` and ``.metadata`` (from ``ErrorInfo``, when the server sent one). Codes without a class
of their own (INTERNAL, UNKNOWN, CANCELLED, ...) raise the base class.

Example::

    try:
        client.receive("jobs", max_messages=20_000)
    except InvalidArgument as e:
        print(e.field, e.minimum, e.maximum)   # max_messages 1 10000
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import grpc
import grpc.aio
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

__all__ = [
    "DeadlineExceeded",
    "FailedPrecondition",
    "FieldViolation",
    "InvalidArgument",
    "LeaseqError",
    "NotFound",
    "OverLimit",
    "PermissionDenied",
    "QueueAlreadyExists",
    "QueueNotFound",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "error_for_status",
    "from_rpc_error",
]


@dataclass(frozen=True)
class FieldViolation:
    """One entry of a ``google.rpc.BadRequest``: which request field was wrong, and why."""

    field: str
    description: str


class LeaseqError(Exception):
    """Base of every error raised by the leaseq client for a failed call.

    Attributes:
        code: the gRPC status code.
        details: the server's (or transport's) message.
        reason: ``ErrorInfo.reason`` when the server sent one (e.g. ``"QUEUE_NOT_FOUND"``,
            ``"LEASE_EXPIRED"``), else ``""``.
        metadata: ``ErrorInfo.metadata`` (e.g. ``{"queue": "jobs"}``), else empty.
    """

    code: grpc.StatusCode
    details: str
    reason: str
    metadata: Mapping[str, str]

    def __init__(
        self,
        details: str = "",
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(details or code.name)
        self.code = code
        self.details = details
        self.reason = reason
        self.metadata = dict(metadata or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.details!r}, code={self.code.name})"


class InvalidArgument(LeaseqError):
    """The request was malformed or a value was out of range.

    ``field`` names the offending request field (e.g. ``"max_messages"``,
    ``"config.visibility_timeout"``). For an out-of-range value (ErrorInfo ``OUT_OF_RANGE``)
    ``value``, ``minimum`` and ``maximum`` hold the server's renderings of the value and bounds
    (strings, since a bound may be a duration such as ``"43200s"``); otherwise they are None.
    """

    field: str
    value: str | None
    minimum: str | None
    maximum: str | None
    violations: tuple[FieldViolation, ...]

    def __init__(
        self,
        details: str = "",
        *,
        code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        violations: tuple[FieldViolation, ...] = (),
    ) -> None:
        super().__init__(details, code=code, reason=reason, metadata=metadata)
        self.violations = violations
        meta = self.metadata
        self.field = meta.get("field") or (violations[0].field if violations else "")
        out_of_range = reason == "OUT_OF_RANGE"
        self.value = meta.get("value") if out_of_range else None
        self.minimum = meta.get("minimum") if out_of_range else None
        self.maximum = meta.get("maximum") if out_of_range else None


class NotFound(LeaseqError):
    """Something the request names does not exist (``reason`` says what, when known)."""


class QueueNotFound(NotFound):
    """The named queue does not exist. ``queue`` is its name."""

    @property
    def queue(self) -> str:
        return self.metadata.get("queue", "")


class QueueAlreadyExists(LeaseqError):
    """A queue of that name exists with another configuration. ``queue`` is its name."""

    @property
    def queue(self) -> str:
        return self.metadata.get("queue", "")


class FailedPrecondition(LeaseqError):
    """The system is not in a state the call needs (``reason``: ``LEASE_EXPIRED``,
    ``RECEIPT_SUPERSEDED``, ``QUEUE_IN_USE``, ...)."""


class ResourceExhausted(LeaseqError):
    """A limit was reached."""


class OverLimit(ResourceExhausted):
    """The queue already holds ``max_in_flight`` leased messages; retry after some settle."""

    @property
    def queue(self) -> str:
        return self.metadata.get("queue", "")

    @property
    def limit(self) -> int | None:
        raw = self.metadata.get("limit")
        return int(raw) if raw and raw.isdigit() else None


class PermissionDenied(LeaseqError):
    """The caller's credentials do not allow this action on this queue."""


class Unauthenticated(LeaseqError):
    """No credentials, or credentials the server does not accept."""


class Unavailable(LeaseqError):
    """The server cannot answer now (draining, store unreachable, network down).

    ``retry_after`` is the server's ``RetryInfo`` delay in seconds, or None when it sent none
    (e.g. the connection itself failed).
    """

    retry_after: float | None

    def __init__(
        self,
        details: str = "",
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(details, code=code, reason=reason, metadata=metadata)
        self.retry_after = retry_after


class DeadlineExceeded(LeaseqError):
    """The call's deadline passed before the server answered."""


_BY_CODE: dict[grpc.StatusCode, type[LeaseqError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    # OUT_OF_RANGE is what gRPC itself uses for some range errors; treat it the same way.
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: QueueAlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}

# ErrorInfo reasons that pick a narrower class than the status code alone.
_BY_REASON: dict[str, type[LeaseqError]] = {
    "QUEUE_NOT_FOUND": QueueNotFound,
    "OVER_LIMIT": OverLimit,
}

_CODE_BY_NUMBER: dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


def status_code(number: int) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` of a ``google.rpc.Code`` number (UNKNOWN when not a code)."""
    return _CODE_BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN)


def error_for_status(
    code: grpc.StatusCode | int,
    details: str,
    status: status_pb2.Status | None = None,
) -> LeaseqError:
    """The exception for a status code, its message and (optionally) its rich details.

    Also used for per-entry errors (``EntryError`` of a send), which carry a code number and a
    message only.
    """
    if isinstance(code, int):
        code = status_code(code)
    reason = ""
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    retry_after: float | None = None
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
            metadata.update(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend(FieldViolation(v.field, v.description) for v in bad.field_violations)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.ToTimedelta().total_seconds()
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code, LeaseqError)
    if issubclass(cls, InvalidArgument):
        return cls(
            details, code=code, reason=reason, metadata=metadata, violations=tuple(violations)
        )
    if issubclass(cls, Unavailable):
        return cls(details, code=code, reason=reason, metadata=metadata, retry_after=retry_after)
    return cls(details, code=code, reason=reason, metadata=metadata)


# A per-entry error names its field first, as every validation message of the server does
# ("entries[0].body: body plus attributes is ..."; docs/api.md, SendMessages).
_ENTRY_FIELD = re.compile(r"(entries\[\d+\](?:\.\w+|\[[^\]]*\])*): (.*)", re.DOTALL)


def error_for_entry(code: grpc.StatusCode | int, message: str) -> LeaseqError:
    """The exception for one entry's error (a ``SendResult.error``): its code and message,
    with ``field`` (for ``InvalidArgument``) read from the message's leading field path."""
    found = _ENTRY_FIELD.match(message)
    if found is None:
        return error_for_status(code, message)
    bad = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(
                field=found.group(1), description=found.group(2)
            )
        ]
    )
    status = status_pb2.Status(message=message)
    status.details.add().Pack(bad)
    return error_for_status(code, message, status)


def from_rpc_error(error: grpc.RpcError) -> LeaseqError:
    """Translate a failed gRPC call (sync or ``grpc.aio``) into the matching ``LeaseqError``.

    Example::

        try:
            stub.GetQueue(request)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
    """
    # Sync errors are grpc.Call objects; grpc.aio's AioRpcError is not, but has the same
    # code()/details()/trailing_metadata() methods. A bare RpcError has none of them.
    if not isinstance(error, (grpc.Call, grpc.aio.AioRpcError)):
        return LeaseqError(str(error) or "RPC failed", code=grpc.StatusCode.UNKNOWN)
    code = error.code() or grpc.StatusCode.UNKNOWN
    details = error.details() or ""
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]  # duck-typed, see above
    except ValueError:
        # The trailers' Status disagrees with the call's code or message (a proxy rewrote one of
        # them): trust the call's code and message, drop the details rather than fail here.
        status = None
    return error_for_status(code, details, status)
