"""SQS queue attributes <-> leaseq's QueueConfig and the dialect's stored attributes, queue URLs
and ARNs.

    VisibilityTimeout               visibility_timeout      0 .. 43200 s
    MessageRetentionPeriod          message_retention       60 .. 1209600 s
    DelaySeconds                    default_delay           0 .. 900 s (SQS's range)
    ReceiveMessageWaitTimeSeconds   receive_wait_time       0 .. 20 s (SQS's range)
    MaximumMessageSize              max_message_bytes       1024 .. 1048576 (SQS's range)
    RedrivePolicy                   dead_letter_queue + max_delivery_count (maxReceiveCount 1..1000)
    read only: ApproximateNumberOfMessages (visible), ...NotVisible (leased), ...Delayed (delayed)
               (exact: leaseq's stats), CreatedTimestamp, LastModifiedTimestamp (the last
               SetQueueAttributes through SQS, else the creation), QueueArn

Stored as they are, in the queue's state namespace "sqs.attributes" (QueueCore.queue_state), and
returned, not enforced (leaseq has no IAM and no encryption at rest of its own): Policy (a JSON
policy of at most 8192 bytes and 20 statements; AddPermission / RemovePermission edit its
statements), KmsMasterKeyId, KmsDataKeyReusePeriodSeconds (60 .. 86400), SqsManagedSseEnabled.
Stored and enforced: RedriveAllowPolicy (policies.py: which queues may name this one as their
dead letter queue).

A queue created through SQS takes SQS's defaults, not leaseq's, for what the caller leaves out:
retention 4 days (leaseq: 7), long-poll wait 0 s (leaseq: 30 s), SqsManagedSseEnabled true. A
queue created over gRPC keeps its own values (its wait of 30 s, above SQS's 20, is reported as
it is; a ReceiveMessage without WaitTimeSeconds waits at most 20 s).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ...domain import limits
from ...domain.types import QueueConfig, QueueInfo, QueueStats
from . import fifo
from .errors import (
    INVALID_ATTRIBUTE_NAME,
    INVALID_ATTRIBUTE_VALUE,
    QUEUE_DOES_NOT_EXIST,
    SqsError,
)

DEFAULT_ACCOUNT = "000000000000"
"""The account id in queue URLs and ARNs when `serve --sqs-account-id` names none (one namespace
of queues per server, as emulators do)."""
ACCOUNT_ID = re.compile(r"\d{12}")
STATE = "sqs.attributes"  # the queue-state namespace of the stored attributes
DEFAULT_REGION = "us-east-1"

SQS_DEFAULTS = QueueConfig(
    visibility_timeout=30.0,
    receive_wait_time=0.0,
    message_retention=345_600.0,
    default_delay=0.0,
    max_message_bytes=1_048_576,
)

# name -> (config field, minimum, maximum); seconds or bytes, integers on the wire.
SETTABLE: dict[str, tuple[str, int, int]] = {
    "VisibilityTimeout": ("visibility_timeout", 0, 43_200),
    "MessageRetentionPeriod": ("message_retention", 60, 1_209_600),
    "DelaySeconds": ("default_delay", 0, 900),
    "ReceiveMessageWaitTimeSeconds": ("receive_wait_time", 0, 20),
    "MaximumMessageSize": ("max_message_bytes", 1024, 1_048_576),
}
REDRIVE_POLICY = "RedrivePolicy"
MAX_RECEIVE_COUNT = (1, 1000)

# Kept in the queue's state (STATE), not in its config: (minimum, maximum) for integers, None
# for text checked by policies.py or taken as it is.
STORED: dict[str, tuple[int, int] | None] = {
    "Policy": None,
    "RedriveAllowPolicy": None,
    "KmsMasterKeyId": None,
    "KmsDataKeyReusePeriodSeconds": (60, 86_400),
    "SqsManagedSseEnabled": None,
}
MAX_KMS_KEY_ID = 2048
LAST_MODIFIED = "LastModifiedTimestamp"

READ_ONLY = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
)
# A FIFO queue's (fifo.py reads and renders them); a standard queue has none.
FIFO = ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
ALL_READABLE = (*SETTABLE, REDRIVE_POLICY, *STORED, *READ_ONLY, *FIFO)

_QUEUE_NAME = limits.NAME_PATTERN  # 1..80 of A-Z a-z 0-9 _ -, perhaps ending in .fifo


# --- names, URLs, ARNs ------------------------------------------------------------------------


def queue_url(base: str, name: str, account: str = DEFAULT_ACCOUNT) -> str:
    """base: scheme://host[:port] as the client addressed the server."""
    return f"{base}/{account}/{name}"


def queue_arn(region: str, name: str, account: str = DEFAULT_ACCOUNT) -> str:
    return f"arn:aws:sqs:{region}:{account}:{name}"


def no_queue() -> SqsError:
    return SqsError(QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.")


def name_from_url(url: object) -> str:
    """The queue name of a QueueUrl (any host: clients may reach the server by other names);
    its last path segment. QueueDoesNotExist when it names no possible queue."""
    if not isinstance(url, str) or not url:
        raise no_queue()
    path = urlsplit(url).path if "://" in url else url
    name = path.rstrip("/").rpartition("/")[2]
    if not _QUEUE_NAME.fullmatch(name):
        raise no_queue()
    return name


def name_from_arn(arn: object, parameter: str) -> str:
    """The queue name of arn:aws:sqs:<region>:<account>:<name>."""
    parts = arn.split(":") if isinstance(arn, str) else []
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"] or not _QUEUE_NAME.fullmatch(parts[5]):
        raise SqsError(
            INVALID_ATTRIBUTE_VALUE if parameter == REDRIVE_POLICY else QUEUE_DOES_NOT_EXIST,
            f"Value {arn} for parameter {parameter} is invalid. Reason: not an SQS queue ARN.",
        )
    return parts[5]


# --- attributes -> config ---------------------------------------------------------------------


def _bad_value(name: str) -> SqsError:
    return SqsError(INVALID_ATTRIBUTE_VALUE, f"Invalid value for the parameter {name}.")


def _integer(name: str, text: object, low: int, high: int) -> int:
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise _bad_value(name)
    value_text = str(text).strip()
    if not re.fullmatch(r"[+-]?\d{1,19}", value_text):
        raise _bad_value(name)
    value = int(value_text)
    if not low <= value <= high:
        raise _bad_value(name)
    return value


def _redrive(text: object) -> tuple[str | None, int | None]:
    if text == "" or text is None:
        return None, None  # removes the policy
    try:
        policy = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        policy = None
    if (
        not isinstance(policy, dict)
        or "deadLetterTargetArn" not in policy
        or "maxReceiveCount" not in policy
    ):
        raise SqsError(
            INVALID_ATTRIBUTE_VALUE,
            "Value for parameter RedrivePolicy is invalid. Reason: Redrive policy is not a "
            "valid JSON map with deadLetterTargetArn and maxReceiveCount.",
        )
    unknown = set(policy) - {"deadLetterTargetArn", "maxReceiveCount"}
    if unknown:
        raise SqsError(
            INVALID_ATTRIBUTE_VALUE,
            f"Value for parameter RedrivePolicy is invalid. Reason: unknown key(s) {sorted(unknown)}.",
        )
    target = name_from_arn(policy["deadLetterTargetArn"], REDRIVE_POLICY)
    count = _integer("RedrivePolicy.maxReceiveCount", policy["maxReceiveCount"], *MAX_RECEIVE_COUNT)
    return target, count


@dataclass
class Parsed:
    """An Attributes map read: QueueConfig field changes and stored attributes (None: remove)."""

    config: dict[str, Any] = field(default_factory=dict)
    stored: dict[str, str | None] = field(default_factory=dict)
    fifo: dict[str, Any] = field(default_factory=dict)  # the FIFO ones, as given (fifo.py)


def _stored_value(name: str, text: object) -> str | None:
    bounds = STORED[name]
    if bounds is not None:
        if text == "":
            return None
        return str(_integer(name, text, *bounds))
    if not isinstance(text, str):
        raise _bad_value(name)
    if name == "SqsManagedSseEnabled":
        if text.lower() not in ("true", "false"):
            raise _bad_value(name)
        return text.lower()
    if name == "KmsMasterKeyId" and len(text) > MAX_KMS_KEY_ID:
        raise _bad_value(name)
    if name in ("Policy", "RedriveAllowPolicy") and text:
        from .policies import check_policy, check_redrive_allow

        return check_policy(text) if name == "Policy" else check_redrive_allow(text)
    return text or None


def parse(attributes: object) -> Parsed:
    """The changes an Attributes map asks for (CreateQueue, SetQueueAttributes)."""
    parsed = Parsed()
    if attributes is None:
        return parsed
    if not isinstance(attributes, dict):
        raise SqsError(INVALID_ATTRIBUTE_NAME, "Attributes is a map of attribute name to value.")
    for name, text in attributes.items():
        if name in SETTABLE:
            field_name, low, high = SETTABLE[name]
            value = _integer(name, text, low, high)
            parsed.config[field_name] = value if field_name == "max_message_bytes" else float(value)
        elif name == REDRIVE_POLICY:
            dlq, count = _redrive(text)
            parsed.config["dead_letter_queue"] = dlq
            parsed.config["max_delivery_count"] = count
        elif name in STORED:
            parsed.stored[name] = _stored_value(name, text)
        elif name in FIFO:
            parsed.fifo[name] = text
        else:
            raise SqsError(INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {name}.")
    return parsed


def differs(config: QueueConfig, stored: dict[str, str], parsed: Parsed) -> bool:
    """Whether an existing queue disagrees with the attributes a CreateQueue gave (SQS compares
    only those)."""
    return any(getattr(config, name) != value for name, value in parsed.config.items()) or any(
        stored.get(name) != value for name, value in parsed.stored.items()
    )


# --- config -> attributes ---------------------------------------------------------------------


def requested(names: object) -> list[str]:
    """GetQueueAttributes' AttributeNames: "All" or names; InvalidAttributeName for others."""
    if names is None:
        return []
    if not isinstance(names, list):
        raise SqsError(INVALID_ATTRIBUTE_NAME, "AttributeNames is a list of names.")
    chosen: list[str] = []
    for name in names:
        if name == "All":
            return list(ALL_READABLE)
        if name in ALL_READABLE:
            chosen.append(name)
        else:
            raise SqsError(INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {name}.")
    return chosen


def render(
    names: list[str],
    info: QueueInfo,
    stats: QueueStats | None,
    region: str,
    account: str = DEFAULT_ACCOUNT,
    stored: dict[str, str] | None = None,
) -> dict[str, str]:
    config = info.config
    stored = stored or {}
    values: dict[str, str] = {}
    for name in names:
        if name in SETTABLE:
            field_name = SETTABLE[name][0]
            values[name] = str(int(getattr(config, field_name)))
        elif name == REDRIVE_POLICY:
            if config.dead_letter_queue:
                values[name] = json.dumps(
                    {
                        "deadLetterTargetArn": queue_arn(region, config.dead_letter_queue, account),
                        "maxReceiveCount": config.max_delivery_count,
                    },
                    separators=(",", ":"),
                )
        elif name in STORED:
            if name in stored:
                values[name] = stored[name]
        elif name in FIFO:
            fifo_values = fifo.render(config, stored)  # none on a standard queue
            if name in fifo_values:
                values[name] = fifo_values[name]
        elif name == "QueueArn":
            values[name] = queue_arn(region, info.name, account)
        elif name == "CreatedTimestamp":
            values[name] = str(int(info.create_time))
        elif name == LAST_MODIFIED:
            values[name] = stored.get(LAST_MODIFIED, str(int(info.create_time)))
        elif stats is not None:
            values[name] = str(
                {
                    "ApproximateNumberOfMessages": stats.visible,
                    "ApproximateNumberOfMessagesNotVisible": stats.leased,
                    "ApproximateNumberOfMessagesDelayed": stats.delayed,
                }[name]
            )
    return values


def needs_stats(names: list[str]) -> bool:
    return any(n.startswith("ApproximateNumberOfMessages") for n in names)
