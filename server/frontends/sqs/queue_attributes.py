"""SQS queue attributes <-> leaseq's QueueConfig, queue URLs and ARNs.

    VisibilityTimeout               visibility_timeout      0 .. 43200 s
    MessageRetentionPeriod          message_retention       60 .. 1209600 s
    DelaySeconds                    default_delay           0 .. 900 s (SQS's range)
    ReceiveMessageWaitTimeSeconds   receive_wait_time       0 .. 20 s (SQS's range)
    MaximumMessageSize              max_message_bytes       1024 .. 1048576 (SQS's range)
    RedrivePolicy                   dead_letter_queue + max_delivery_count (maxReceiveCount 1..1000)
    read only: ApproximateNumberOfMessages (visible), ...NotVisible (leased), ...Delayed (delayed)
               (exact: leaseq's stats), CreatedTimestamp, LastModifiedTimestamp (the creation
               time: leaseq does not record changes), QueueArn

A queue created through SQS takes SQS's defaults, not leaseq's, for what the caller leaves out:
retention 4 days (leaseq: 7), long-poll wait 0 s (leaseq: 30 s). A queue created over gRPC keeps
its own values (its wait of 30 s, above SQS's 20, is reported as it is).

FIFO queues are not supported: FifoQueue, ContentBasedDeduplication, DeduplicationScope and
FifoThroughputLimit are refused as SQS refuses an attribute it does not know
(InvalidAttributeName), as are Policy, RedriveAllowPolicy and the KMS/SSE ones.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from ...domain.types import QueueConfig, QueueInfo, QueueStats
from .errors import (
    INVALID_ATTRIBUTE_NAME,
    INVALID_ATTRIBUTE_VALUE,
    QUEUE_DOES_NOT_EXIST,
    SqsError,
)

ACCOUNT = "000000000000"
"""The account id in queue URLs and ARNs (one namespace of queues per server, as emulators do)."""
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

READ_ONLY = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
)
# SQS attribute names leaseq knows of but does not support: refused when set, left out of answers.
UNSUPPORTED = (
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
    "Policy",
    "RedriveAllowPolicy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
)
ALL_READABLE = (*SETTABLE, REDRIVE_POLICY, *READ_ONLY)

_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")


# --- names, URLs, ARNs ------------------------------------------------------------------------


def queue_url(base: str, name: str) -> str:
    """base: scheme://host[:port] as the client addressed the server."""
    return f"{base}/{ACCOUNT}/{name}"


def queue_arn(region: str, name: str) -> str:
    return f"arn:aws:sqs:{region}:{ACCOUNT}:{name}"


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


def parse(attributes: object) -> dict[str, Any]:
    """QueueConfig field changes from an Attributes map (CreateQueue, SetQueueAttributes)."""
    if attributes is None:
        return {}
    if not isinstance(attributes, dict):
        raise SqsError(INVALID_ATTRIBUTE_NAME, "Attributes is a map of attribute name to value.")
    changes: dict[str, Any] = {}
    for name, text in attributes.items():
        if name in SETTABLE:
            field, low, high = SETTABLE[name]
            value = _integer(name, text, low, high)
            changes[field] = value if field == "max_message_bytes" else float(value)
        elif name == REDRIVE_POLICY:
            dlq, count = _redrive(text)
            changes["dead_letter_queue"] = dlq
            changes["max_delivery_count"] = count
        elif name in UNSUPPORTED:
            hint = " (leaseq has no FIFO queues)" if "Fifo" in name or "Dedup" in name else ""
            raise SqsError(INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {name}.{hint}")
        else:
            raise SqsError(INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {name}.")
    return changes


def differs(config: QueueConfig, changes: dict[str, Any]) -> bool:
    """Whether an existing queue's config disagrees with the attributes a CreateQueue gave (SQS
    compares only those)."""
    return any(getattr(config, field) != value for field, value in changes.items())


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
        elif name in UNSUPPORTED:
            continue  # a valid SQS name leaseq has no value for: left out, as SQS does for FIFO ones
        else:
            raise SqsError(INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {name}.")
    return chosen


def render(
    names: list[str], info: QueueInfo, stats: QueueStats | None, region: str
) -> dict[str, str]:
    config = info.config
    values: dict[str, str] = {}
    for name in names:
        if name in SETTABLE:
            field = SETTABLE[name][0]
            values[name] = str(int(getattr(config, field)))
        elif name == REDRIVE_POLICY:
            if config.dead_letter_queue:
                values[name] = json.dumps(
                    {
                        "deadLetterTargetArn": queue_arn(region, config.dead_letter_queue),
                        "maxReceiveCount": config.max_delivery_count,
                    },
                    separators=(",", ":"),
                )
        elif name == "QueueArn":
            values[name] = queue_arn(region, info.name)
        elif name in ("CreatedTimestamp", "LastModifiedTimestamp"):
            values[name] = str(int(info.create_time))
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
