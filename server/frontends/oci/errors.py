"""OCI errors: an HTTP status and the JSON body `{"code": ..., "message": ...}` (with the
opc-request-id header, added by app.py), which the SDK raises as `oci.exceptions.ServiceError`
(its `status`, `code` and `message`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...core import PermissionDenied
from ...errors import (
    InvalidArgument,
    LeaseqError,
    LeaseRejected,
    OverLimit,
    QueueAlreadyExists,
    QueueInUse,
    QueueNotFound,
    Unavailable,
)


@dataclass(frozen=True)
class Kind:
    code: str
    status: int


INVALID_PARAMETER = Kind("InvalidParameter", 400)
MISSING_PARAMETER = Kind("MissingParameter", 400)
LIMIT_EXCEEDED = Kind("LimitExceeded", 400)
NOT_AUTHENTICATED = Kind("NotAuthenticated", 401)
NOT_FOUND = Kind("NotAuthorizedOrNotFound", 404)
RESOURCE_NOT_FOUND = Kind("NotFound", 404)  # a path no operation serves
METHOD_NOT_ALLOWED = Kind("MethodNotAllowed", 405)
CONFLICT = Kind("Conflict", 409)
INCORRECT_STATE = Kind("IncorrectState", 409)
PAYLOAD_TOO_LARGE = Kind("PayloadTooLarge", 413)
TOO_MANY_REQUESTS = Kind("TooManyRequests", 429)
INTERNAL = Kind("InternalServerError", 500)
NOT_IMPLEMENTED = Kind("NotImplemented", 501)
UNAVAILABLE = Kind("ServiceUnavailable", 503)


@dataclass
class OciError(Exception):
    kind: Kind
    message: str
    retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.kind.code}: {self.message}"


def invalid(message: str) -> OciError:
    return OciError(INVALID_PARAMETER, message)


def not_found(what: str = "resource") -> OciError:
    # OCI answers a resource the caller may not see exactly as a missing one.
    return OciError(NOT_FOUND, f"Authorization failed or requested {what} not found.")


def from_domain(error: LeaseqError) -> OciError:
    """The OCI error for a domain error of the core or the store."""
    if isinstance(error, QueueNotFound):
        return not_found("queue")
    if isinstance(error, PermissionDenied):
        # OCI's answer when IAM refuses: the same 404 as a missing resource.
        return OciError(NOT_FOUND, f"Authorization failed or requested resource not found: {error}")
    if isinstance(error, QueueAlreadyExists):
        return OciError(CONFLICT, f"A queue with this displayName exists already: {error}")
    if isinstance(error, QueueInUse):
        return OciError(
            INCORRECT_STATE,
            f"The queue is the dead letter queue of {error.used_by}: change that queue first.",
        )
    if isinstance(error, OverLimit):
        return OciError(
            TOO_MANY_REQUESTS,
            f"The queue holds {error.limit} messages in flight (its max_in_flight): retry later.",
            retry_after=1.0,
        )
    if isinstance(error, Unavailable):
        return OciError(UNAVAILABLE, str(error), retry_after=error.retry_after)
    if isinstance(error, LeaseRejected):
        return OciError(
            NOT_FOUND, f"The receipt no longer names a leased message ({error.status.name})."
        )
    if isinstance(error, InvalidArgument):
        return invalid(str(error))
    return invalid(str(error))
