"""The leaseq Python client.

Example::

    from leaseq.client import QueueClient

    with QueueClient("127.0.0.1:50051") as client:
        client.create_queue("jobs")
        client.send("jobs", "hello")
        [msg] = client.receive("jobs", wait_time=1)
        client.delete("jobs", msg)

``AsyncQueueClient`` has the same methods as coroutines. Errors are ``LeaseqError`` s (see
``leaseq.client.errors`` for the tree). ``Consumer`` / ``AsyncConsumer`` run a handler over a
queue with automatic lease extension (``leaseq.client.consumer``); ``send_arrow``,
``receive_arrow`` and ``ack_arrow`` move ``pyarrow`` tables (``leaseq.client.arrow``; the
schemas ``MESSAGE_SCHEMA``, ``SEND_RESULT_SCHEMA`` and ``ACK_RESULT_SCHEMA`` are importable from
here, which loads pyarrow on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .client import (
    DEFAULT_TARGET,
    MAX_MESSAGE_SIZE,
    AsyncMessageStream,
    AsyncQueueClient,
    MessageStream,
    QueueClient,
    TLSConfig,
)
from .consumer import AsyncConsumer, Backoff, Consumer, ConsumerStats, Reject
from .errors import (
    DeadlineExceeded,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    LeaseqError,
    NotFound,
    OverLimit,
    PermissionDenied,
    QueueAlreadyExists,
    QueueNotFound,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    from_rpc_error,
)
from .retry import RetryPolicy
from .types import (
    ChannelStats,
    DeleteResults,
    EntryError,
    LeaseResult,
    LeaseStatus,
    Message,
    MessageState,
    PeekedMessage,
    Queue,
    QueueConfig,
    QueueRetryPolicy,
    QueueStats,
    SendEntry,
    SendResult,
    UpdateResult,
    VisibilityChange,
)

if TYPE_CHECKING:
    from .arrow import ACK_RESULT_SCHEMA, MESSAGE_SCHEMA, SEND_RESULT_SCHEMA

_ARROW_NAMES = frozenset({"ACK_RESULT_SCHEMA", "MESSAGE_SCHEMA", "SEND_RESULT_SCHEMA"})


def __getattr__(name: str) -> Any:
    # The Arrow schemas load pyarrow (a quarter of a second): only when first asked for.
    if name in _ARROW_NAMES:
        from . import arrow

        return getattr(arrow, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACK_RESULT_SCHEMA",
    "DEFAULT_TARGET",
    "MAX_MESSAGE_SIZE",
    "MESSAGE_SCHEMA",
    "SEND_RESULT_SCHEMA",
    "AsyncConsumer",
    "AsyncMessageStream",
    "AsyncQueueClient",
    "Backoff",
    "ChannelStats",
    "Consumer",
    "ConsumerStats",
    "DeadlineExceeded",
    "DeleteResults",
    "EntryError",
    "FailedPrecondition",
    "FieldViolation",
    "InvalidArgument",
    "LeaseResult",
    "LeaseStatus",
    "LeaseqError",
    "Message",
    "MessageState",
    "MessageStream",
    "NotFound",
    "OverLimit",
    "PeekedMessage",
    "PermissionDenied",
    "Queue",
    "QueueAlreadyExists",
    "QueueClient",
    "QueueConfig",
    "QueueNotFound",
    "QueueRetryPolicy",
    "QueueStats",
    "Reject",
    "ResourceExhausted",
    "RetryPolicy",
    "SendEntry",
    "SendResult",
    "TLSConfig",
    "Unauthenticated",
    "Unavailable",
    "UpdateResult",
    "VisibilityChange",
    "from_rpc_error",
]
