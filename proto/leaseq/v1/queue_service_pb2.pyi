import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Ordering(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ORDERING_UNSPECIFIED: _ClassVar[Ordering]
    ORDERING_NONE: _ClassVar[Ordering]
    ORDERING_FIFO: _ClassVar[Ordering]
    ORDERING_FAIR: _ClassVar[Ordering]

class DedupScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEDUP_SCOPE_UNSPECIFIED: _ClassVar[DedupScope]
    DEDUP_SCOPE_QUEUE: _ClassVar[DedupScope]
    DEDUP_SCOPE_GROUP: _ClassVar[DedupScope]

class MessageState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_STATE_UNSPECIFIED: _ClassVar[MessageState]
    MESSAGE_STATE_VISIBLE: _ClassVar[MessageState]
    MESSAGE_STATE_LEASED: _ClassVar[MessageState]
    MESSAGE_STATE_DELAYED: _ClassVar[MessageState]

class LeaseStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_STATUS_UNSPECIFIED: _ClassVar[LeaseStatus]
    LEASE_STATUS_OK: _ClassVar[LeaseStatus]
    LEASE_STATUS_LEASE_EXPIRED: _ClassVar[LeaseStatus]
    LEASE_STATUS_RECEIPT_SUPERSEDED: _ClassVar[LeaseStatus]
    LEASE_STATUS_MESSAGE_NOT_FOUND: _ClassVar[LeaseStatus]
    LEASE_STATUS_INVALID_RECEIPT: _ClassVar[LeaseStatus]
    LEASE_STATUS_ALREADY_DELETED: _ClassVar[LeaseStatus]
ORDERING_UNSPECIFIED: Ordering
ORDERING_NONE: Ordering
ORDERING_FIFO: Ordering
ORDERING_FAIR: Ordering
DEDUP_SCOPE_UNSPECIFIED: DedupScope
DEDUP_SCOPE_QUEUE: DedupScope
DEDUP_SCOPE_GROUP: DedupScope
MESSAGE_STATE_UNSPECIFIED: MessageState
MESSAGE_STATE_VISIBLE: MessageState
MESSAGE_STATE_LEASED: MessageState
MESSAGE_STATE_DELAYED: MessageState
LEASE_STATUS_UNSPECIFIED: LeaseStatus
LEASE_STATUS_OK: LeaseStatus
LEASE_STATUS_LEASE_EXPIRED: LeaseStatus
LEASE_STATUS_RECEIPT_SUPERSEDED: LeaseStatus
LEASE_STATUS_MESSAGE_NOT_FOUND: LeaseStatus
LEASE_STATUS_INVALID_RECEIPT: LeaseStatus
LEASE_STATUS_ALREADY_DELETED: LeaseStatus

class QueueConfig(_message.Message):
    __slots__ = ("visibility_timeout", "receive_wait_time", "message_retention", "default_delay", "max_message_bytes", "dead_letter_queue", "max_delivery_count", "max_in_flight", "dedup_window", "retry_policy", "ordering", "content_based_dedup", "dedup_scope")
    VISIBILITY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_WAIT_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_RETENTION_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_DELAY_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DEDUP_WINDOW_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    ORDERING_FIELD_NUMBER: _ClassVar[int]
    CONTENT_BASED_DEDUP_FIELD_NUMBER: _ClassVar[int]
    DEDUP_SCOPE_FIELD_NUMBER: _ClassVar[int]
    visibility_timeout: _duration_pb2.Duration
    receive_wait_time: _duration_pb2.Duration
    message_retention: _duration_pb2.Duration
    default_delay: _duration_pb2.Duration
    max_message_bytes: int
    dead_letter_queue: str
    max_delivery_count: int
    max_in_flight: int
    dedup_window: _duration_pb2.Duration
    retry_policy: RetryPolicy
    ordering: Ordering
    content_based_dedup: bool
    dedup_scope: DedupScope
    def __init__(self, visibility_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., receive_wait_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., message_retention: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., default_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_message_bytes: _Optional[int] = ..., dead_letter_queue: _Optional[str] = ..., max_delivery_count: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., dedup_window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., ordering: _Optional[_Union[Ordering, str]] = ..., content_based_dedup: _Optional[bool] = ..., dedup_scope: _Optional[_Union[DedupScope, str]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("minimum_backoff", "maximum_backoff")
    MINIMUM_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    minimum_backoff: _duration_pb2.Duration
    maximum_backoff: _duration_pb2.Duration
    def __init__(self, minimum_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., maximum_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Queue(_message.Message):
    __slots__ = ("name", "config", "create_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: QueueConfig
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateQueueRequest(_message.Message):
    __slots__ = ("name", "config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: QueueConfig
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ...) -> None: ...

class CreateQueueResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class GetQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetQueueResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ("prefix", "page_size", "page_token")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_size: int
    page_token: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues", "next_page_token")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[Queue]
    next_page_token: str
    def __init__(self, queues: _Optional[_Iterable[_Union[Queue, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateQueueRequest(_message.Message):
    __slots__ = ("name", "config", "update_mask")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: QueueConfig
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class UpdateQueueResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class DeleteQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteQueueResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PurgeQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PurgeQueueResponse(_message.Message):
    __slots__ = ("purged_count",)
    PURGED_COUNT_FIELD_NUMBER: _ClassVar[int]
    purged_count: int
    def __init__(self, purged_count: _Optional[int] = ...) -> None: ...

class GetQueueStatsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetQueueStatsResponse(_message.Message):
    __slots__ = ("stats",)
    STATS_FIELD_NUMBER: _ClassVar[int]
    stats: QueueStats
    def __init__(self, stats: _Optional[_Union[QueueStats, _Mapping]] = ...) -> None: ...

class QueueStats(_message.Message):
    __slots__ = ("visible", "leased", "delayed", "total", "oldest_visible_age", "dead_lettered_total", "expired_total", "deleted_total", "channels", "groups", "blocked_groups")
    VISIBLE_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    OLDEST_VISIBLE_AGE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DELETED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_GROUPS_FIELD_NUMBER: _ClassVar[int]
    visible: int
    leased: int
    delayed: int
    total: int
    oldest_visible_age: _duration_pb2.Duration
    dead_lettered_total: int
    expired_total: int
    deleted_total: int
    channels: _containers.RepeatedCompositeFieldContainer[ChannelStats]
    groups: int
    blocked_groups: int
    def __init__(self, visible: _Optional[int] = ..., leased: _Optional[int] = ..., delayed: _Optional[int] = ..., total: _Optional[int] = ..., oldest_visible_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., dead_lettered_total: _Optional[int] = ..., expired_total: _Optional[int] = ..., deleted_total: _Optional[int] = ..., channels: _Optional[_Iterable[_Union[ChannelStats, _Mapping]]] = ..., groups: _Optional[int] = ..., blocked_groups: _Optional[int] = ...) -> None: ...

class ChannelStats(_message.Message):
    __slots__ = ("channel", "visible", "leased", "delayed", "total")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    visible: int
    leased: int
    delayed: int
    total: int
    def __init__(self, channel: _Optional[str] = ..., visible: _Optional[int] = ..., leased: _Optional[int] = ..., delayed: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class SendEntry(_message.Message):
    __slots__ = ("id", "body", "attributes", "channel", "delay", "ttl", "dedup_id", "group")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    id: str
    body: bytes
    attributes: _containers.ScalarMap[str, str]
    channel: str
    delay: _duration_pb2.Duration
    ttl: _duration_pb2.Duration
    dedup_id: str
    group: str
    def __init__(self, id: _Optional[str] = ..., body: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., channel: _Optional[str] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., dedup_id: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class SendMessagesRequest(_message.Message):
    __slots__ = ("queue", "entries")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    queue: str
    entries: _containers.RepeatedCompositeFieldContainer[SendEntry]
    def __init__(self, queue: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[SendEntry, _Mapping]]] = ...) -> None: ...

class EntryError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class SendResult(_message.Message):
    __slots__ = ("id", "message_id", "duplicate", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    message_id: str
    duplicate: bool
    error: EntryError
    def __init__(self, id: _Optional[str] = ..., message_id: _Optional[str] = ..., duplicate: _Optional[bool] = ..., error: _Optional[_Union[EntryError, _Mapping]] = ...) -> None: ...

class SendMessagesResponse(_message.Message):
    __slots__ = ("results", "server_time")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    server_time: _timestamp_pb2.Timestamp
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ..., server_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetMessagesRequest(_message.Message):
    __slots__ = ("queue", "max_messages", "visibility_timeout", "wait_time", "channel_filter", "follow", "max_outstanding", "receive_attempt_id")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIME_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FILTER_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTSTANDING_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max_messages: int
    visibility_timeout: _duration_pb2.Duration
    wait_time: _duration_pb2.Duration
    channel_filter: str
    follow: bool
    max_outstanding: int
    receive_attempt_id: str
    def __init__(self, queue: _Optional[str] = ..., max_messages: _Optional[int] = ..., visibility_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., wait_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., channel_filter: _Optional[str] = ..., follow: _Optional[bool] = ..., max_outstanding: _Optional[int] = ..., receive_attempt_id: _Optional[str] = ...) -> None: ...

class GetMessagesResponse(_message.Message):
    __slots__ = ("messages", "server_time")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ReceivedMessage]
    server_time: _timestamp_pb2.Timestamp
    def __init__(self, messages: _Optional[_Iterable[_Union[ReceivedMessage, _Mapping]]] = ..., server_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReceivedMessage(_message.Message):
    __slots__ = ("message_id", "receipt", "body", "attributes", "channel", "enqueued_at", "expires_at", "visible_at", "delivery_count", "last_error", "group", "sequence")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    receipt: str
    body: bytes
    attributes: _containers.ScalarMap[str, str]
    channel: str
    enqueued_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    visible_at: _timestamp_pb2.Timestamp
    delivery_count: int
    last_error: str
    group: str
    sequence: int
    def __init__(self, message_id: _Optional[str] = ..., receipt: _Optional[str] = ..., body: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., channel: _Optional[str] = ..., enqueued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., visible_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivery_count: _Optional[int] = ..., last_error: _Optional[str] = ..., group: _Optional[str] = ..., sequence: _Optional[int] = ...) -> None: ...

class PeekMessagesRequest(_message.Message):
    __slots__ = ("queue", "max_messages", "channel_filter", "include_leased", "include_delayed", "page_token")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FILTER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_LEASED_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DELAYED_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max_messages: int
    channel_filter: str
    include_leased: bool
    include_delayed: bool
    page_token: str
    def __init__(self, queue: _Optional[str] = ..., max_messages: _Optional[int] = ..., channel_filter: _Optional[str] = ..., include_leased: _Optional[bool] = ..., include_delayed: _Optional[bool] = ..., page_token: _Optional[str] = ...) -> None: ...

class PeekedMessage(_message.Message):
    __slots__ = ("message_id", "body", "attributes", "channel", "enqueued_at", "expires_at", "visible_at", "delivery_count", "last_error", "state", "group", "sequence")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    body: bytes
    attributes: _containers.ScalarMap[str, str]
    channel: str
    enqueued_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    visible_at: _timestamp_pb2.Timestamp
    delivery_count: int
    last_error: str
    state: MessageState
    group: str
    sequence: int
    def __init__(self, message_id: _Optional[str] = ..., body: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., channel: _Optional[str] = ..., enqueued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., visible_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivery_count: _Optional[int] = ..., last_error: _Optional[str] = ..., state: _Optional[_Union[MessageState, str]] = ..., group: _Optional[str] = ..., sequence: _Optional[int] = ...) -> None: ...

class PeekMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token", "server_time")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[PeekedMessage]
    next_page_token: str
    server_time: _timestamp_pb2.Timestamp
    def __init__(self, messages: _Optional[_Iterable[_Union[PeekedMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., server_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ChangeVisibilityEntry(_message.Message):
    __slots__ = ("receipt", "visibility_timeout", "reason")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    visibility_timeout: _duration_pb2.Duration
    reason: str
    def __init__(self, receipt: _Optional[str] = ..., visibility_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class ChangeVisibilityRequest(_message.Message):
    __slots__ = ("queue", "entries")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    queue: str
    entries: _containers.RepeatedCompositeFieldContainer[ChangeVisibilityEntry]
    def __init__(self, queue: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[ChangeVisibilityEntry, _Mapping]]] = ...) -> None: ...

class ChangeVisibilityResult(_message.Message):
    __slots__ = ("receipt", "status", "visible_at")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_AT_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    status: LeaseStatus
    visible_at: _timestamp_pb2.Timestamp
    def __init__(self, receipt: _Optional[str] = ..., status: _Optional[_Union[LeaseStatus, str]] = ..., visible_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ChangeVisibilityResponse(_message.Message):
    __slots__ = ("results", "server_time")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ChangeVisibilityResult]
    server_time: _timestamp_pb2.Timestamp
    def __init__(self, results: _Optional[_Iterable[_Union[ChangeVisibilityResult, _Mapping]]] = ..., server_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeleteMessagesRequest(_message.Message):
    __slots__ = ("queue", "receipts", "receive_attempt_ids")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    receipts: _containers.RepeatedScalarFieldContainer[str]
    receive_attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, queue: _Optional[str] = ..., receipts: _Optional[_Iterable[str]] = ..., receive_attempt_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteResult(_message.Message):
    __slots__ = ("receipt", "status")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    status: LeaseStatus
    def __init__(self, receipt: _Optional[str] = ..., status: _Optional[_Union[LeaseStatus, str]] = ...) -> None: ...

class AttemptDeleteResult(_message.Message):
    __slots__ = ("receive_attempt_id", "deleted_count")
    RECEIVE_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    DELETED_COUNT_FIELD_NUMBER: _ClassVar[int]
    receive_attempt_id: str
    deleted_count: int
    def __init__(self, receive_attempt_id: _Optional[str] = ..., deleted_count: _Optional[int] = ...) -> None: ...

class DeleteMessagesResponse(_message.Message):
    __slots__ = ("results", "attempt_results", "server_time")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_RESULTS_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteResult]
    attempt_results: _containers.RepeatedCompositeFieldContainer[AttemptDeleteResult]
    server_time: _timestamp_pb2.Timestamp
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteResult, _Mapping]]] = ..., attempt_results: _Optional[_Iterable[_Union[AttemptDeleteResult, _Mapping]]] = ..., server_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UpdateMessageRequest(_message.Message):
    __slots__ = ("queue", "receipt", "body", "attributes", "visibility_timeout", "update_mask")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    queue: str
    receipt: str
    body: bytes
    attributes: _containers.ScalarMap[str, str]
    visibility_timeout: _duration_pb2.Duration
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, queue: _Optional[str] = ..., receipt: _Optional[str] = ..., body: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., visibility_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class UpdateMessageResponse(_message.Message):
    __slots__ = ("receipt", "visible_at", "server_time")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_AT_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    visible_at: _timestamp_pb2.Timestamp
    server_time: _timestamp_pb2.Timestamp
    def __init__(self, receipt: _Optional[str] = ..., visible_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., server_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RedriveMessagesRequest(_message.Message):
    __slots__ = ("queue", "destination", "max_messages", "channel_filter")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FILTER_FIELD_NUMBER: _ClassVar[int]
    queue: str
    destination: str
    max_messages: int
    channel_filter: str
    def __init__(self, queue: _Optional[str] = ..., destination: _Optional[str] = ..., max_messages: _Optional[int] = ..., channel_filter: _Optional[str] = ...) -> None: ...

class RedriveMessagesResponse(_message.Message):
    __slots__ = ("moved_count",)
    MOVED_COUNT_FIELD_NUMBER: _ClassVar[int]
    moved_count: int
    def __init__(self, moved_count: _Optional[int] = ...) -> None: ...

class DeadLetterMessagesRequest(_message.Message):
    __slots__ = ("queue", "receipts", "reason")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    queue: str
    receipts: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    def __init__(self, queue: _Optional[str] = ..., receipts: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ...) -> None: ...

class DeadLetterResult(_message.Message):
    __slots__ = ("receipt", "status")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    status: LeaseStatus
    def __init__(self, receipt: _Optional[str] = ..., status: _Optional[_Union[LeaseStatus, str]] = ...) -> None: ...

class DeadLetterMessagesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeadLetterResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DeadLetterResult, _Mapping]]] = ...) -> None: ...
