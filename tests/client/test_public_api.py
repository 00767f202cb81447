"""The public names of leaseq.client do not drift, and importing it has no side effects."""

from __future__ import annotations

import inspect
import logging

import leaseq.client
from leaseq.client import AsyncQueueClient, QueueClient

EXPECTED = {
    # clients
    "AsyncMessageStream",
    "AsyncQueueClient",
    "DEFAULT_TARGET",
    "MAX_MESSAGE_SIZE",
    "MessageStream",
    "QueueClient",
    "RetryPolicy",
    "TLSConfig",
    # consumer
    "AsyncConsumer",
    "Backoff",
    "Consumer",
    "ConsumerStats",
    "Reject",
    # Arrow schemas (loaded with pyarrow on first use)
    "ACK_RESULT_SCHEMA",
    "MESSAGE_SCHEMA",
    "SEND_RESULT_SCHEMA",
    # values
    "ChannelStats",
    "DeleteResults",
    "EntryError",
    "LeaseResult",
    "LeaseStatus",
    "Message",
    "MessageState",
    "PeekedMessage",
    "Queue",
    "QueueConfig",
    "QueueRetryPolicy",
    "QueueStats",
    "SendEntry",
    "SendResult",
    "UpdateResult",
    "VisibilityChange",
    # errors
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
    "from_rpc_error",
}


def test_all_is_exactly_the_expected_names() -> None:
    assert sorted(leaseq.client.__all__) == sorted(EXPECTED)
    assert len(leaseq.client.__all__) == len(set(leaseq.client.__all__))


def test_every_name_in_all_exists() -> None:
    for name in leaseq.client.__all__:
        assert getattr(leaseq.client, name) is not None


def test_sync_and_async_clients_have_the_same_methods() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")
        }

    sync, async_ = public(QueueClient), public(AsyncQueueClient)
    assert sync.keys() == async_.keys()
    for name, signature in sync.items():
        assert list(signature.parameters) == list(async_[name].parameters), name
        if name != "stream":  # stream returns an async iterator, not a coroutine
            assert inspect.iscoroutinefunction(getattr(AsyncQueueClient, name)), name


def test_sync_and_async_consumers_have_the_same_interface() -> None:
    from leaseq.client import AsyncConsumer, Consumer

    def public(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(member).parameters)
            for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")
        }

    assert public(Consumer) == public(AsyncConsumer)
    assert list(inspect.signature(Consumer).parameters) == list(
        inspect.signature(AsyncConsumer).parameters
    )
    for name in ("start", "close", "wait"):
        assert inspect.iscoroutinefunction(getattr(AsyncConsumer, name)), name


def test_the_batch_byte_default_is_the_arrow_modules() -> None:
    from leaseq.client import arrow, client

    assert client.DEFAULT_BATCH_BYTES == arrow.DEFAULT_BATCH_BYTES


def test_the_library_does_not_configure_logging() -> None:
    for name in ("leaseq.client", "leaseq.client.consumer"):
        logger = logging.getLogger(name)
        assert logger.handlers == [] or all(
            type(h).__module__.startswith("tests.") for h in logger.handlers
        )
        assert logger.level in (logging.NOTSET, logging.DEBUG)
