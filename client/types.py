"""The values the client hands to and gets back from a leaseq server.

Plain frozen dataclasses and enums, independent of protobuf, so user code never touches
generated messages. Conventions, kept everywhere:

- Times are timezone-aware ``datetime`` objects in UTC.
- Durations that come back from the server are ``timedelta``; durations going in may be seconds
  (``int``/``float``) or ``timedelta`` (see ``DurationLike``).
- Bodies come back as ``bytes``; going in they may be ``bytes`` or ``str`` (encoded as UTF-8).

Example::

    msg = client.receive("jobs")[0]
    print(msg.text, msg.delivery_count, msg.visible_at - msg.server_time)  # lease time left
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict

import grpc

__all__ = [
    "Body",
    "ChannelStats",
    "DeleteResults",
    "DurationLike",
    "EntryError",
    "LeaseResult",
    "LeaseStatus",
    "Message",
    "MessageState",
    "PeekedMessage",
    "Queue",
    "QueueConfig",
    "QueueConfigOptions",
    "QueueRetryPolicy",
    "QueueStats",
    "SendEntry",
    "SendOptions",
    "SendResult",
    "UpdateResult",
    "VisibilityChange",
]

DurationLike = int | float | timedelta
"""A duration given to the client: seconds, or a ``timedelta``."""

Body = bytes | str
"""A message body given to the client: bytes, or text that is sent UTF-8 encoded."""


class LeaseStatus(enum.IntEnum):
    """Outcome of one lease operation (change visibility, delete) on one receipt.

    Values equal the wire enum ``leaseq.v1.LeaseStatus``.
    """

    UNSPECIFIED = 0
    OK = 1
    LEASE_EXPIRED = 2
    RECEIPT_SUPERSEDED = 3
    MESSAGE_NOT_FOUND = 4
    INVALID_RECEIPT = 5
    ALREADY_DELETED = 6


class MessageState(enum.IntEnum):
    """Where a peeked message stands. Values equal the wire enum ``leaseq.v1.MessageState``."""

    UNSPECIFIED = 0
    VISIBLE = 1
    LEASED = 2
    DELAYED = 3


# --- queues ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRetryPolicy:
    """A queue's retry policy (the wire's ``RetryPolicy``): a message whose lease ended, or that
    was released without a delay, is visible again after ``min(maximum_backoff, minimum_backoff
    * 2^(n-1))``, n its delivery count. The option ``retry_policy`` of ``create_queue`` takes
    one, a ``(minimum, maximum)`` pair of durations, or a mapping with those two keys."""

    minimum_backoff: timedelta = timedelta(seconds=10)
    maximum_backoff: timedelta = timedelta(seconds=600)


RetryPolicyLike = (
    QueueRetryPolicy | tuple["DurationLike", "DurationLike"] | Mapping[str, "DurationLike"]
)
"""A retry policy given to ``create_queue``/``update_queue``."""


class QueueConfigOptions(TypedDict, total=False):
    """Keyword arguments of ``create_queue`` and ``update_queue`` (all optional).

    For ``update_queue`` a key given as None returns that field to its default.
    """

    visibility_timeout: DurationLike | None
    receive_wait_time: DurationLike | None
    message_retention: DurationLike | None
    default_delay: DurationLike | None
    max_message_bytes: int | None
    dead_letter_queue: str | None
    max_delivery_count: int | None
    max_in_flight: int | None
    dedup_window: DurationLike | None
    retry_policy: RetryPolicyLike | None
    ordering: str | None
    content_based_dedup: bool | None
    dedup_scope: str | None


@dataclass(frozen=True)
class QueueConfig:
    """A queue's effective configuration, as the server reports it.

    Defaults are API.md's; a field the server leaves unset reads as its default.
    ``ordering`` is "none", "fifo" or "fair" (chosen at creation; see API.md, Message groups);
    ``content_based_dedup`` and ``dedup_scope`` ("queue" or "group") are a FIFO queue's.
    ``dataclasses.asdict(config)`` gives keyword arguments ``create_queue`` accepts, which copies
    a queue's configuration::

        client.create_queue("jobs-copy", **dataclasses.asdict(client.get_queue("jobs").config))
    """

    visibility_timeout: timedelta = timedelta(seconds=30)
    receive_wait_time: timedelta = timedelta(seconds=30)
    message_retention: timedelta = timedelta(days=7)
    default_delay: timedelta = timedelta(0)
    max_message_bytes: int = 1024 * 1024
    dead_letter_queue: str | None = None
    max_delivery_count: int | None = None
    max_in_flight: int = 120_000
    dedup_window: timedelta = timedelta(minutes=5)
    retry_policy: QueueRetryPolicy | None = None
    ordering: str = "none"
    content_based_dedup: bool = False
    dedup_scope: str = "queue"


@dataclass(frozen=True)
class Queue:
    """A queue: its name, effective configuration and creation time."""

    name: str
    config: QueueConfig
    create_time: datetime


@dataclass(frozen=True)
class ChannelStats:
    """Counts of one channel of a queue (``channel == ""`` is the default channel)."""

    channel: str
    visible: int
    leased: int
    delayed: int
    total: int


@dataclass(frozen=True)
class QueueStats:
    """Exact counts of a queue's messages at one moment.

    ``visible + leased + delayed == total``; the ``*_total`` counters are ever-growing.
    """

    visible: int
    leased: int
    delayed: int
    total: int
    oldest_visible_age: timedelta
    dead_lettered_total: int
    expired_total: int
    deleted_total: int
    channels: tuple[ChannelStats, ...] = ()
    groups: int = 0  # FIFO and FAIR queues: groups holding messages
    blocked_groups: int = 0  # of those, the ones no receive can deliver from now


# --- sending ---------------------------------------------------------------------------------


class SendOptions(TypedDict, total=False):
    """Keyword arguments of ``send`` (all optional): see ``SendEntry``."""

    attributes: Mapping[str, str]
    channel: str
    delay: DurationLike | None
    ttl: DurationLike | None
    dedup_id: str
    group: str


@dataclass(frozen=True)
class SendEntry:
    """One message of ``send_batch``.

    Attributes:
        body: bytes, or text sent UTF-8 encoded.
        attributes: up to 16 string pairs.
        channel: at most 64 characters; "" is the default channel.
        delay: invisible until this has passed; None means the queue's default_delay.
        ttl: time to live; None means the queue's message_retention.
        dedup_id: a repeat within the queue's dedup_window enqueues nothing. Batches in which
            every entry has one are retried automatically when the server is unavailable.
        id: echoed in the entry's ``SendResult``; "" means its position in the batch.
        group: the message group (1-128 of letters, digits and ASCII punctuation), required on
            a FIFO queue; "" means none.

    Example::

        client.send_batch("jobs", [SendEntry("a", channel="eu"), SendEntry(b"b", delay=10)])
    """

    body: Body
    attributes: Mapping[str, str] = field(default_factory=dict)
    channel: str = ""
    delay: DurationLike | None = None
    ttl: DurationLike | None = None
    dedup_id: str = ""
    id: str = ""
    group: str = ""


@dataclass(frozen=True)
class EntryError:
    """Why one entry of a batch failed: a gRPC status code and a message."""

    code: grpc.StatusCode
    message: str


@dataclass(frozen=True)
class SendResult:
    """The outcome of one ``SendEntry``, in request order.

    ``duplicate`` is True when the entry's dedup_id was seen within the dedup window: nothing
    was enqueued and ``message_id`` is the original message's.
    """

    id: str
    message_id: str
    duplicate: bool = False
    error: EntryError | None = None

    @property
    def ok(self) -> bool:
        """True when the entry was accepted (including as a duplicate)."""
        return self.error is None


# --- receiving -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One delivery of a message, as ``receive`` and ``stream`` return it.

    ``receipt`` names this delivery: pass it to ``delete``, ``extend``, ``release`` or
    ``update_message``. ``visible_at`` is when the lease ends; ``server_time`` is the server's
    clock when it sent the message, so ``visible_at - server_time`` is the lease length without
    trusting the local clock.
    """

    message_id: str
    receipt: str
    body: bytes
    attributes: Mapping[str, str]
    channel: str
    enqueued_at: datetime
    expires_at: datetime
    visible_at: datetime
    delivery_count: int
    last_error: str
    server_time: datetime | None = None
    group: str = ""
    sequence: int = 0  # messages with a group: increasing in send order

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (raises ``UnicodeDecodeError`` for binary bodies)."""
        return self.body.decode("utf-8")


@dataclass(frozen=True)
class PeekedMessage:
    """A message as ``peek`` sees it: no receipt, and its current ``state``."""

    message_id: str
    body: bytes
    attributes: Mapping[str, str]
    channel: str
    enqueued_at: datetime
    expires_at: datetime
    visible_at: datetime
    delivery_count: int
    last_error: str
    state: MessageState
    group: str = ""
    sequence: int = 0

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (raises ``UnicodeDecodeError`` for binary bodies)."""
        return self.body.decode("utf-8")


# --- leases ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VisibilityChange:
    """One entry of ``change_visibility``: the lease of ``receipt`` ends ``visibility_timeout``
    after the call (0 releases the message now); ``reason`` is stored as its last_error."""

    receipt: str
    visibility_timeout: DurationLike
    reason: str = ""


@dataclass(frozen=True)
class LeaseResult:
    """The outcome of one receipt in ``change_visibility``/``extend``/``release``/``delete``.

    ``visible_at`` is set for a successful visibility change only.
    """

    receipt: str
    status: LeaseStatus
    visible_at: datetime | None = None

    @property
    def ok(self) -> bool:
        return self.status is LeaseStatus.OK


@dataclass(frozen=True)
class DeleteResults:
    """What ``delete`` did: one ``LeaseResult`` per receipt, and per receive attempt id the
    number of messages deleted."""

    results: tuple[LeaseResult, ...] = ()
    attempt_results: Mapping[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every receipt's message is gone because of this call or an earlier one
        with the same receipt (OK or ALREADY_DELETED, so a retried ack counts as success)."""
        return all(r.status in (LeaseStatus.OK, LeaseStatus.ALREADY_DELETED) for r in self.results)


@dataclass(frozen=True)
class UpdateResult:
    """What ``update_message`` returns: the new receipt (the old one is superseded) and when
    the message becomes visible."""

    receipt: str
    visible_at: datetime
