"""SQS errors: the codes, HTTP statuses and the two names each one has on the wire.

SQS moved from the query protocol to JSON keeping its old error codes: a JSON error answer says
`{"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": ...}` (the shape name) plus the
header `x-amzn-query-error: AWS.SimpleQueueService.NonExistentQueue;Sender` (the query code),
from which botocore raises `client.exceptions.QueueDoesNotExist` with
`Error.Code == "AWS.SimpleQueueService.NonExistentQueue"`, as against AWS. The query protocol
answers `<ErrorResponse><Error><Type>Sender</Type><Code>` + the query code.

`from_domain` maps leaseq's domain errors (errors.py, core.PermissionDenied); a front-end check
raises `SqsError` directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core import PermissionDenied
from ...errors import (
    InvalidArgument,
    LeaseqError,
    OutOfRange,
    OverLimit,
    QueueAlreadyExists,
    QueueInUse,
    QueueNotFound,
    Unavailable,
)


@dataclass(frozen=True)
class Kind:
    shape: str  # JSON __type (botocore's modeled exception name when there is one)
    code: str  # the query protocol's code (and x-amzn-query-error)
    status: int
    sender: bool = True  # the caller's fault (Type Sender) or ours (Receiver)
    namespace: str = "com.amazonaws.sqs"  # of the JSON __type


def _kind(shape: str, code: str | None = None, status: int = 400, sender: bool = True) -> Kind:
    return Kind(shape, code or shape, status, sender)


def _auth_kind(shape: str, code: str, status: int) -> Kind:
    """An error of AWS's authentication layer: on the JSON protocol its __type is the common
    one of AWS's JSON services (botocore still reports `code`, from x-amzn-query-error)."""
    return Kind(shape, code, status, True, "com.amazon.coral.service")


QUEUE_DOES_NOT_EXIST = _kind("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue")
QUEUE_NAME_EXISTS = _kind("QueueNameExists", "QueueAlreadyExists")
RECEIPT_HANDLE_IS_INVALID = _kind("ReceiptHandleIsInvalid")
MESSAGE_NOT_INFLIGHT = _kind("MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight")
INVALID_PARAMETER_VALUE = _kind("InvalidParameterValue")
INVALID_ATTRIBUTE_NAME = _kind("InvalidAttributeName")
INVALID_ATTRIBUTE_VALUE = _kind("InvalidAttributeValue")
INVALID_MESSAGE_CONTENTS = _kind("InvalidMessageContents")
MISSING_PARAMETER = _kind("MissingParameter")
OVER_LIMIT = _kind("OverLimit", status=403)
BATCH_ENTRY_IDS_NOT_DISTINCT = _kind(
    "BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
)
TOO_MANY_ENTRIES = _kind(
    "TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
)
EMPTY_BATCH = _kind("EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest")
INVALID_BATCH_ENTRY_ID = _kind("InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId")
BATCH_REQUEST_TOO_LONG = _kind("BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong")
UNSUPPORTED_OPERATION = _kind("UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation")
PURGE_QUEUE_IN_PROGRESS = _kind(
    "PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", status=403
)
INVALID_ADDRESS = _kind("InvalidAddress", status=404)
RESOURCE_NOT_FOUND = _kind("ResourceNotFoundException", status=404)
INVALID_ACTION = _kind("InvalidAction")
MALFORMED_QUERY = _kind("MalformedQueryString")  # a form body that does not parse
MALFORMED_JSON = _kind("SerializationException")  # a JSON body that does not parse
REQUEST_TOO_LARGE = _kind("RequestEntityTooLarge", status=413)
METHOD_NOT_ALLOWED = _kind("InvalidAction", status=405)
ACCESS_DENIED = _kind("AccessDenied", status=403)
MISSING_AUTHENTICATION = _auth_kind(
    "MissingAuthenticationTokenException", "MissingAuthenticationToken", 403
)
INCOMPLETE_SIGNATURE = _auth_kind("IncompleteSignatureException", "IncompleteSignature", 400)
INVALID_CLIENT_TOKEN = _auth_kind("UnrecognizedClientException", "InvalidClientTokenId", 403)
SIGNATURE_DOES_NOT_MATCH = _auth_kind("InvalidSignatureException", "SignatureDoesNotMatch", 403)
REQUEST_EXPIRED = _auth_kind("InvalidSignatureException", "RequestExpired", 400)
SERVICE_UNAVAILABLE = _kind("ServiceUnavailable", status=503, sender=False)
INTERNAL_ERROR = _kind("InternalError", status=500, sender=False)


class SqsError(Exception):
    def __init__(self, kind: Kind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def invalid_value(parameter: str, value: object, reason: str) -> SqsError:
    """SQS's wording of a bad parameter value."""
    return SqsError(
        INVALID_PARAMETER_VALUE,
        f"Value {value} for parameter {parameter} is invalid. Reason: {reason}",
    )


def missing(parameter: str) -> SqsError:
    return SqsError(MISSING_PARAMETER, f"The request must contain the parameter {parameter}.")


def from_domain(error: LeaseqError) -> SqsError:
    """The SQS error for a domain error of the core or the store."""
    if isinstance(error, SqsError):  # pragma: no cover - not a LeaseqError
        return error
    if isinstance(error, QueueNotFound):
        return SqsError(QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.")
    if isinstance(error, QueueAlreadyExists):
        return SqsError(
            QUEUE_NAME_EXISTS,
            f"A queue named {error.name} already exists with different attributes.",
        )
    if isinstance(error, QueueInUse):
        return SqsError(
            INVALID_PARAMETER_VALUE,
            f"Queue {error.name} is the dead letter queue of {error.used_by}: remove that "
            "queue's RedrivePolicy first (leaseq refuses to orphan a redrive policy).",
        )
    if isinstance(error, OverLimit):
        return SqsError(
            OVER_LIMIT,
            f"Too many messages in flight: the queue holds {error.limit} leased messages.",
        )
    if isinstance(error, PermissionDenied):
        return SqsError(ACCESS_DENIED, f"Access to the resource is denied: {error}")
    if isinstance(error, Unavailable):
        return SqsError(SERVICE_UNAVAILABLE, str(error))
    if isinstance(error, OutOfRange):
        return SqsError(
            INVALID_PARAMETER_VALUE,
            f"Value {error.value} for parameter {error.field} is invalid. Reason: must be "
            f"between {error.minimum} and {error.maximum}.",
        )
    if isinstance(error, InvalidArgument):
        return SqsError(INVALID_PARAMETER_VALUE, str(error))
    return SqsError(INVALID_PARAMETER_VALUE, str(error))
