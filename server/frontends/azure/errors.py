"""Azure Queue Storage errors: an HTTP status, an `x-ms-error-code` header and the XML body

    <?xml version="1.0" encoding="utf-8"?>
    <Error><Code>QueueNotFound</Code><Message>The specified queue does not exist.
    RequestId:...
    Time:...</Message></Error>

with extra elements for some codes (OutOfRangeQueryParameterValue: QueryParameterName,
QueryParameterValue, MinimumAllowed, MaximumAllowed; AuthenticationFailed:
AuthenticationErrorDetail). The SDK raises ResourceNotFoundError, ResourceExistsError,
ClientAuthenticationError or HttpResponseError from the code, with the extra elements in
`additional_info`."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core import PermissionDenied
from ...errors import (
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
    code: str
    status: int


OUT_OF_RANGE_QUERY = Kind("OutOfRangeQueryParameterValue", 400)
INVALID_QUERY = Kind("InvalidQueryParameterValue", 400)
MISSING_QUERY = Kind("MissingRequiredQueryParameter", 400)
INVALID_HEADER = Kind("InvalidHeaderValue", 400)
INVALID_MD5 = Kind("InvalidMd5", 400)
MD5_MISMATCH = Kind("Md5Mismatch", 400)
INVALID_XML = Kind("InvalidXmlDocument", 400)
INVALID_RESOURCE_NAME = Kind("InvalidResourceName", 400)
OUT_OF_RANGE_INPUT = Kind("OutOfRangeInput", 400)
INVALID_METADATA = Kind("InvalidMetadata", 400)
METADATA_TOO_LARGE = Kind("MetadataTooLarge", 400)
MESSAGE_TOO_LARGE = Kind("MessageTooLarge", 400)
POP_RECEIPT_MISMATCH = Kind("PopReceiptMismatch", 400)
INVALID_URI = Kind("InvalidUri", 400)
INVALID_INPUT = Kind("InvalidInput", 400)
AUTHENTICATION_FAILED = Kind("AuthenticationFailed", 403)
PERMISSION_MISMATCH = Kind("AuthorizationPermissionMismatch", 403)
QUEUE_NOT_FOUND = Kind("QueueNotFound", 404)
MESSAGE_NOT_FOUND = Kind("MessageNotFound", 404)
RESOURCE_NOT_FOUND = Kind("ResourceNotFound", 404)
UNSUPPORTED_VERB = Kind("UnsupportedHttpVerb", 405)
QUEUE_ALREADY_EXISTS = Kind("QueueAlreadyExists", 409)
QUEUE_IN_USE = Kind("QueueInUse", 409)  # leaseq's: the queue is another queue's dead letter queue
REQUEST_BODY_TOO_LARGE = Kind("RequestBodyTooLarge", 413)
INTERNAL_ERROR = Kind("InternalError", 500)
NOT_IMPLEMENTED = Kind("NotImplemented", 501)
SERVER_BUSY = Kind("ServerBusy", 503)


@dataclass
class AzureError(Exception):
    kind: Kind
    message: str
    details: dict[str, str] = field(default_factory=dict)  # extra elements of <Error>
    retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.kind.code}: {self.message}"


# Azure's sentences exactly (clients match them): what was wrong is in the extra elements.
OUT_OF_RANGE_SENTENCE = (
    "One of the query parameters specified in the request URI is outside the permissible range."
)
INVALID_QUERY_SENTENCE = (
    "Value for one of the query parameters specified in the request URI is invalid."
)
INVALID_NAME_SENTENCE = "The specifed resource name contains invalid characters."  # sic: Azure's
NAME_LENGTH_SENTENCE = "The specified resource name length is not within the permissible limits."
INVALID_INPUT_SENTENCE = "One of the request inputs is not valid."
PERMISSION_SENTENCE = (
    "This request is not authorized to perform this operation using this permission."
)


def invalid_name() -> AzureError:
    return AzureError(INVALID_RESOURCE_NAME, INVALID_NAME_SENTENCE)


def name_length() -> AzureError:
    return AzureError(OUT_OF_RANGE_INPUT, NAME_LENGTH_SENTENCE)


def invalid_input(reason: str) -> AzureError:
    return AzureError(INVALID_INPUT, INVALID_INPUT_SENTENCE, {"Reason": reason})


def out_of_range(name: str, value: str, minimum: object, maximum: object) -> AzureError:
    return AzureError(
        OUT_OF_RANGE_QUERY,
        OUT_OF_RANGE_SENTENCE,
        {
            "QueryParameterName": name,
            "QueryParameterValue": value,
            "MinimumAllowed": str(minimum),
            "MaximumAllowed": str(maximum),
        },
    )


def invalid_query(name: str, value: str, reason: str) -> AzureError:
    return AzureError(
        INVALID_QUERY,
        INVALID_QUERY_SENTENCE,
        {"QueryParameterName": name, "QueryParameterValue": value, "Reason": reason},
    )


def missing_query(name: str) -> AzureError:
    return AzureError(
        MISSING_QUERY,
        "A query parameter that's mandatory for this request is not specified.",
        {"QueryParameterName": name},
    )


def from_domain(error: LeaseqError) -> AzureError:
    """The Azure error for a domain error of the core or the store (out-of-range values are
    checked before the core is called, with Azure's parameter names: operations.py)."""
    if isinstance(error, QueueNotFound):
        return AzureError(QUEUE_NOT_FOUND, "The specified queue does not exist.")
    if isinstance(error, QueueAlreadyExists):
        return AzureError(QUEUE_ALREADY_EXISTS, "The specified queue already exists.")
    if isinstance(error, QueueInUse):
        return AzureError(
            QUEUE_IN_USE,
            f"The queue is the dead letter queue of {error.used_by}: change that queue first.",
        )
    if isinstance(error, PermissionDenied):
        return AzureError(PERMISSION_MISMATCH, PERMISSION_SENTENCE, {"Reason": str(error)})
    if isinstance(error, OverLimit):
        return AzureError(
            SERVER_BUSY,
            f"The queue holds {error.limit} leased messages (its max_in_flight): retry later.",
            retry_after=1.0,
        )
    if isinstance(error, Unavailable):
        return AzureError(SERVER_BUSY, str(error), retry_after=error.retry_after)
    if isinstance(error, OutOfRange):
        return invalid_input(
            f"{error.field} {error.value} is out of range ({error.minimum} .. {error.maximum})"
        )
    return invalid_input(str(error))
