"""What makes a request's values valid: one definition of a valid message, a valid queue
configuration and each range, used by every front end.

A front end reads its wire format into domain values (`types`) and checks them here; a rule
fails with `InvalidArgument` (anything malformed) or `OutOfRange` (a number outside its range:
the field, the value and both bounds). Field names are leaseq's request paths
("entries[3].delay", "config.visibility_timeout"); a dialect with other names or other error
shapes translates the error in its own module. Durations in OUT_OF_RANGE are written as proto3
JSON writes them ("43200s", "0.500s"), so a client can tell seconds from counts.

What only the store can know (a missing queue, a dead letter queue that does not exist, an
updated body too big for the message's current attributes) stays with the store.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import fields

from ..errors import InvalidArgument, OutOfRange, clip
from . import limits
from .types import NewMessage, Ordering, QueueConfig, RetryPolicy

NUL = "\x00"
# U+0000 and the surrogate code points U+D800..U+DFFF: a str holding a surrogate alone is not
# Unicode text (it has no UTF-8 form), yet JSON's "\\udfff" and aiohttp's surrogateescape'd
# header bytes make one in-process.
_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")

CONFIG_FIELDS = tuple(f.name for f in fields(QueueConfig))
"""QueueConfig's fields in declaration order, so the first bad field reported is stable."""


# --- values -------------------------------------------------------------------------------------


_EXACT_SECONDS = 315_576_000_000  # google/protobuf/duration.proto's bound: ~10,000 years


def format_seconds(seconds: float) -> str:
    """A duration as proto3 JSON writes one ("30s", "0.200s", "-1.500s"): 0, 3, 6 or 9
    fractional digits, the fewest that hold the value to the nanosecond."""
    if math.isinf(seconds) or math.isnan(seconds):
        return str(seconds)
    if abs(seconds) > _EXACT_SECONDS:  # an HTTP dialect's 1e308: no nanosecond count holds it
        return f"{seconds:g}s"
    total = round(seconds * 1_000_000_000)
    sign = "-" if total < 0 else ""
    whole, nanos = divmod(abs(total), 1_000_000_000)
    if nanos == 0:
        return f"{sign}{whole}s"
    if nanos % 1_000_000 == 0:
        return f"{sign}{whole}.{nanos // 1_000_000:03d}s"
    if nanos % 1_000 == 0:
        return f"{sign}{whole}.{nanos // 1_000:06d}s"
    return f"{sign}{whole}.{nanos:09d}s"


def queue_name(name: str, field: str = "name") -> str:
    if not limits.NAME_PATTERN.fullmatch(name):
        raise InvalidArgument(
            field, "a queue name is 1-80 characters of A-Z a-z 0-9 _ - (perhaps ending in .fifo)"
        )
    return name


def int_range(value: int, field: str, minimum: int, maximum: int) -> int:
    if not minimum <= value <= maximum:
        raise OutOfRange(field, value, minimum, maximum)
    return value


def seconds_range(value: float, field: str, minimum: float, maximum: float) -> float:
    if not minimum <= value <= maximum:
        raise OutOfRange(
            field, format_seconds(value), format_seconds(minimum), format_seconds(maximum)
        )
    return value


def batch_size(count: int, field: str) -> int:
    return int_range(count, field, limits.MIN_BATCH, limits.MAX_BATCH)


def valid_text(value: str, field: str) -> str:
    """The one rule for every text field, on every store and from every front end: valid
    Unicode (no lone surrogate: it cannot be written as UTF-8, so a store or a gRPC answer
    holding one fails every later read of it) and no U+0000 (PostgreSQL's text cannot hold it;
    one rule keeps a message portable between stores)."""
    found = _NOT_TEXT.search(value)
    if found is None:
        return value
    if found.group() == NUL:
        raise InvalidArgument(field, "must not contain U+0000 (NUL)")
    raise InvalidArgument(
        field, f"must be valid Unicode text (holds the lone surrogate U+{ord(found.group()):04X})"
    )


def max_length(value: str, field: str, limit: int) -> str:
    """A text field the store keeps or matches: at most limit characters, and valid text (see
    `valid_text`)."""
    if len(value) > limit:
        raise InvalidArgument(field, f"at most {limit} characters (got {len(value)})")
    return valid_text(value, field)


def state_changes(namespace: str, changes: Mapping[str, str | None]) -> None:
    """A change of a front end's own pairs (Store.update_queue_state, update_settings): a
    namespace and names of 1 to MAX_STATE_NAME characters, values of at most MAX_STATE_VALUE,
    at most MAX_STATE_CHANGES names per change, all valid text."""
    for name in (namespace, *changes):
        if not name:
            raise InvalidArgument("state", "names and namespaces must not be empty")
        max_length(name, "state", limits.MAX_STATE_NAME)
    if len(changes) > limits.MAX_STATE_CHANGES:
        raise InvalidArgument("state", f"at most {limits.MAX_STATE_CHANGES} names per change")
    for value in changes.values():
        if value is not None:
            max_length(value, "state", limits.MAX_STATE_VALUE)


RESERVED_ATTRIBUTE_PREFIXES = ("sqs:",)
"""Attribute names a front end keeps for itself ("sqs:types": the SQS types of the message's
attributes, frontends/sqs/message_attributes.py). Only that front end may write them: a value
another sender wrote would be read by the dialect as its own (a poison message for its readers)."""


def attributes(values: dict[str, str], field: str, owned_prefix: str = "") -> dict[str, str]:
    """Message attributes: at most MAX_ATTRIBUTES, each key and value valid text (`valid_text`),
    no reserved name (RESERVED_ATTRIBUTE_PREFIXES) unless under owned_prefix, the caller's own."""
    if len(values) > limits.MAX_ATTRIBUTES:
        raise InvalidArgument(field, f"at most {limits.MAX_ATTRIBUTES} attributes")
    for key, value in values.items():
        valid_text(key, field)
        valid_text(value, field)
        if key.startswith(RESERVED_ATTRIBUTE_PREFIXES) and not (
            owned_prefix and key.startswith(owned_prefix)
        ):
            raise InvalidArgument(
                field,
                f"attribute name {clip(key)!r} is reserved: names starting with "
                f"{' or '.join(RESERVED_ATTRIBUTE_PREFIXES)} are kept by a front end",
            )
    return values


def channel_filter(value: str, field: str = "channel_filter") -> str:
    """An exact channel, or a prefix ending in '*'; empty means every channel."""
    prefix = value[:-1] if value.endswith("*") else value
    if "*" in prefix:
        raise InvalidArgument(field, "'*' is allowed only as the last character (a prefix)")
    max_length(prefix, field, limits.MAX_CHANNEL)
    return value


def attempt_id(value: str, field: str = "receive_attempt_id") -> str:
    return max_length(value, field, limits.MAX_ATTEMPT_ID)


def visibility_timeout(value: float, field: str = "visibility_timeout") -> float:
    return seconds_range(value, field, 0.0, limits.MAX_VISIBILITY)


def wait_time(value: float, field: str = "wait_time") -> float:
    return seconds_range(value, field, 0.0, limits.MAX_WAIT)


def reason(value: str, field: str = "reason") -> str:
    return max_length(value, field, limits.MAX_REASON)


def delete_attempt_ids(attempt_ids: Sequence[str], field: str = "receive_attempt_ids") -> None:
    for index, attempt in enumerate(attempt_ids):
        where = f"{field}[{index}]"
        # An empty id would name every message delivered without an attempt id.
        if not attempt:
            raise InvalidArgument(where, "must not be empty")
        max_length(attempt, where, limits.MAX_ATTEMPT_ID)


# --- queue configurations -------------------------------------------------------------------


def check_config(name: str, config: QueueConfig) -> QueueConfig:
    """Every field of a whole configuration within API.md's ranges, and the rules between
    fields; InvalidArgument/OutOfRange naming "config.<field>"."""
    for field_name in CONFIG_FIELDS:
        value = getattr(config, field_name)
        path = f"config.{field_name}"
        if field_name in limits.CONFIG_DURATIONS:
            seconds_range(value, path, *limits.CONFIG_DURATIONS[field_name])
        elif field_name in limits.CONFIG_INTS and value is not None:
            int_range(value, path, *limits.CONFIG_INTS[field_name])
        elif field_name == "dead_letter_queue" and value is not None:
            queue_name(value, path)
        elif field_name == "retry_policy" and value is not None:
            retry_policy(value, path)
    return check_config_relations(name, config)


def retry_policy(policy: RetryPolicy, path: str = "config.retry_policy") -> RetryPolicy:
    """Both backoffs within limits.RETRY_BACKOFF, the maximum not below the minimum."""
    low, high = limits.RETRY_BACKOFF
    seconds_range(policy.minimum_backoff, f"{path}.minimum_backoff", low, high)
    seconds_range(policy.maximum_backoff, f"{path}.maximum_backoff", policy.minimum_backoff, high)
    return policy


def check_config_relations(name: str, config: QueueConfig) -> QueueConfig:
    """The checks that involve more than one field (each field already in its range)."""
    if config.default_delay > config.message_retention:
        raise OutOfRange(
            "config.default_delay",
            format_seconds(config.default_delay),
            format_seconds(0.0),
            format_seconds(config.message_retention),
        )
    if (config.dead_letter_queue is None) != (config.max_delivery_count is None):
        missing = "max_delivery_count" if config.max_delivery_count is None else "dead_letter_queue"
        raise InvalidArgument(
            f"config.{missing}", "dead_letter_queue and max_delivery_count are set together"
        )
    if config.dead_letter_queue == name:
        raise InvalidArgument(
            "config.dead_letter_queue", "a queue cannot be its own dead letter queue"
        )
    if config.ordering is not Ordering.FIFO:
        if config.content_based_dedup:
            raise InvalidArgument("config.content_based_dedup", "only a FIFO queue has it")
        if config.dedup_scope != QueueConfig.dedup_scope:
            raise InvalidArgument("config.dedup_scope", "only a FIFO queue has it")
    return config


def check_config_change(current: QueueConfig, new: QueueConfig) -> None:
    """What an update may not change: the ordering is chosen at creation."""
    if new.ordering is not current.ordering:
        raise InvalidArgument(
            "config.ordering", "a queue's ordering is chosen at creation and cannot change"
        )


def check_dead_letter_pair(config: QueueConfig, dead_letter_config: QueueConfig) -> None:
    """A queue and its dead letter queue: of the same ordering, except that a FAIR queue's may
    have none (SQS's rule: a FIFO queue's messages keep their order there and a FIFO queue
    refuses messages without a group; a FAIR queue puts a message without one in the group "",
    which a queue without ordering does not)."""
    ordering, dead = config.ordering, dead_letter_config.ordering
    if ordering is dead or (ordering is Ordering.FAIR and dead is Ordering.NONE):
        return
    if ordering is Ordering.FIFO:
        reason = "the dead letter queue of a FIFO queue must be a FIFO queue"
    elif dead is Ordering.FIFO:
        reason = "a FIFO queue can be the dead letter queue only of a FIFO queue"
    else:
        reason = "a FAIR queue can be the dead letter queue only of a FAIR queue"
    raise InvalidArgument("config.dead_letter_queue", reason)


# --- messages -------------------------------------------------------------------------------


def message_size(body: bytes, attributes: dict[str, str]) -> int:
    """What counts against max_message_bytes: the body plus every attribute's key and value (UTF-8)."""
    if not attributes:  # most messages: no generator to set up (twice per delivered message)
        return len(body)
    return len(body) + sum(len(k.encode()) + len(v.encode()) for k, v in attributes.items())


def body_fits(size: int, config: QueueConfig, field: str) -> None:
    if size > config.max_message_bytes:
        raise InvalidArgument(
            field,
            f"body plus attributes is {size} bytes, over the queue's max_message_bytes "
            f"{config.max_message_bytes}",
        )


def body_fits_update(body: bytes, attributes: dict[str, str], config: QueueConfig) -> None:
    """UpdateMessage's new body and attributes (the store knows the kept ones) within
    max_message_bytes; InvalidArgument('body') otherwise."""
    size = message_size(body, attributes)
    if size > config.max_message_bytes:
        raise InvalidArgument(
            "body",
            f"body and attributes are {size} bytes, over the queue's max_message_bytes "
            f"({config.max_message_bytes})",
        )


def check_message(
    message: NewMessage, index: int, config: QueueConfig, owned_prefix: str = ""
) -> NewMessage:
    """The one definition of a valid message to send to a queue of this configuration. An
    error names entries[index] and fails only this entry (the others of the batch are sent).
    owned_prefix: the reserved attribute names the calling front end may write (`attributes`).

    A message that is only a body (and perhaps a dedup id) is valid exactly when the body fits
    max_message_bytes and the dedup id passes (`plain_batch_valid`: the column-wise batch's
    check)."""
    where = f"entries[{index}]"
    attrs = message.attributes
    if attrs:
        attributes(attrs, f"{where}.attributes", owned_prefix)
    body_fits(message_size(message.body, attrs), config, f"{where}.body")
    if message.channel:
        max_length(message.channel, f"{where}.channel", limits.MAX_CHANNEL)
    if message.dedup_id:
        dedup_id(message.dedup_id, f"{where}.dedup_id")
    if message.group:
        group(message.group, f"{where}.group")
    elif config.ordering is Ordering.FIFO:
        raise InvalidArgument(f"{where}.group", "a FIFO queue needs a group on every message")
    if message.delay is not None:
        seconds_range(message.delay, f"{where}.delay", 0.0, config.message_retention)
    if message.ttl is not None and message.ttl != limits.NEVER_EXPIRES:
        seconds_range(message.ttl, f"{where}.ttl", limits.MIN_TTL, config.message_retention)
    return message


def never_expires(enqueued_at: float, expires_at: float) -> bool:
    """Whether a message was sent with ttl NEVER_EXPIRES: it lives longer than any retention
    (a dead-lettered message's expires_at is its new queue's retention, so it expires there)."""
    return expires_at - enqueued_at > 2 * limits.CONFIG_DURATIONS["message_retention"][1]


def dedup_id(value: str, field: str) -> str:
    return max_length(value, field, limits.MAX_DEDUP_ID)


def group(value: str, field: str) -> str:
    """A message group: 1..128 of A-Z a-z 0-9 and ASCII punctuation (SQS's MessageGroupId)."""
    if not limits.GROUP_PATTERN.fullmatch(value):
        raise InvalidArgument(
            field, "a group is 1-128 characters of A-Z a-z 0-9 and ASCII punctuation"
        )
    return value


def plain_batch_valid(
    bodies: Sequence[bytes], dedup_ids: Sequence[str] | None, config: QueueConfig
) -> bool:
    """Whether every message of a batch that is only bodies and perhaps dedup ids ("" for
    none) passes check_message, for the whole batch at once: each body fits max_message_bytes
    and each dedup id passes `dedup_id`; never on a FIFO queue (every message needs a group)."""
    if config.ordering is Ordering.FIFO:
        return False
    if bodies and max(map(len, bodies)) > config.max_message_bytes:
        return False
    return (
        dedup_ids is None
        or not dedup_ids
        or (
            max(map(len, dedup_ids)) <= limits.MAX_DEDUP_ID
            and _NOT_TEXT.search("".join(dedup_ids)) is None
        )
    )


def bytes_reached(total: int, max_bytes: int | None) -> bool:
    """Whether a receive or peek that has taken `total` bytes stops (the package's byte limit)."""
    return max_bytes is not None and total >= max_bytes


def channel_matches(channel: str, channel_filter: str) -> bool:
    """Empty filter: all; "abc*": channels starting with "abc"; else an exact match."""
    if not channel_filter:
        return True
    if channel_filter.endswith("*"):
        return channel.startswith(channel_filter[:-1])
    return channel == channel_filter


def new_message_ids(count: int) -> list[str]:
    """`count` fresh message ids, 32 hex digits (128 random bits) each, from one draw of the
    OS's randomness: a draw per id was a system call each, which showed in a profile of
    PostgreSQL sends (docs/performance.md, "Figures behind the code")."""
    digits = os.urandom(16 * count).hex()
    return [digits[start : start + 32] for start in range(0, 32 * count, 32)]
