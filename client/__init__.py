"""The leaseq Python client.

Example::

    from leaseq.client import QueueClient

    with QueueClient("127.0.0.1:50051") as client:
        client.create_queue("jobs")
        client.send("jobs", "hello")
        [msg] = client.receive("jobs", wait_time=1)
        client.delete("jobs", msg)

``AsyncQueueClient`` has the same methods as coroutines. Errors are ``LeaseqError`` s (see
``leaseq.client.errors`` for the tree).
"""

from __future__ import annotations

from .client import (
    DEFAULT_TARGET,
    MAX_MESSAGE_SIZE,
    AsyncMessageStream,
    AsyncQueueClient,
    MessageStream,
    QueueClient,
    TLSConfig,
)
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
    QueueStats,
    SendEntry,
    SendResult,
    UpdateResult,
    VisibilityChange,
)

__all__ = [
    "DEFAULT_TARGET",
    "MAX_MESSAGE_SIZE",
    "AsyncMessageStream",
    "AsyncQueueClient",
    "ChannelStats",
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
    "QueueStats",
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
