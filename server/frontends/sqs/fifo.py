"""SQS FIFO queues and MessageGroupId, as the SQS Developer Guide's FIFO pages state them, over
leaseq's message groups (domain/groups.py: QueueConfig.ordering FIFO, content_based_dedup,
dedup_scope; NewMessage.group; DeliveredMessage.group and .sequence) and its receive attempts:

- a FIFO queue's name ends in `.fifo` and it is made with FifoQueue=true (either without the
  other: InvalidParameterValue); its type is fixed at creation;
- ContentBasedDeduplication (true/false) and DeduplicationScope (queue | messageGroup) are the
  queue's content_based_dedup and dedup_scope; FifoThroughputLimit (perQueue |
  perMessageGroupId, the latter only with the messageGroup scope) is stored with the queue and
  not enforced (leaseq has no per-queue rate limits); the deduplication interval is SQS's 5
  minutes (dedup_window);
- a send needs a MessageGroupId (1..128 of letters, digits and ASCII punctuation) and a
  MessageDeduplicationId of the same alphabet unless ContentBasedDeduplication (the SHA-256 of
  the body); a per-message DelaySeconds is refused (the queue's DelaySeconds applies); a
  duplicate within the interval is accepted and not enqueued again, answering the first
  message's id;
- a FIFO queue's dead letter queue is a FIFO queue, and only a FIFO queue's;
- ReceiveRequestAttemptId (the same alphabet) makes a receive on a FIFO queue repeatable
  (leaseq's receive attempts); a standard queue ignores it, as SQS does;
- a send to a FIFO queue answers SequenceNumber (the store's key: DeliveredMessage.sequence);
  a received message has the system attributes MessageGroupId, MessageDeduplicationId and
  SequenceNumber;
- MessageGroupId on a standard queue puts the message in that group (a fair queue when the
  queue was made through SQS: receives spread over the groups); MessageDeduplicationId stays
  FIFO only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from ...domain.types import DedupScope, Ordering, QueueConfig
from .errors import (
    INVALID_ATTRIBUTE_NAME,
    INVALID_ATTRIBUTE_VALUE,
    INVALID_PARAMETER_VALUE,
    SqsError,
    invalid_value,
    missing,
)

SUFFIX = ".fifo"
DEDUP_INTERVAL = 300.0  # seconds: SQS's deduplication interval
STANDARD_ORDERING = Ordering.FAIR  # a standard queue made through SQS: MessageGroupId is fair
_ID = re.compile(r"[\x21-\x7e]{1,128}")  # letters, digits and ASCII punctuation (domain.limits)
ATTRIBUTES = ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
THROUGHPUT = "FifoThroughputLimit"  # the one stored (queue_attributes.STATE), not in the config
_SCOPES = {"queue": DedupScope.QUEUE, "messageGroup": DedupScope.GROUP}
_LIMITS = ("perQueue", "perMessageGroupId")
_BAD_NAME = (
    "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, "
    "must end with .fifo suffix and be 1 to 80 in length."
)
_NOT_FOR_TYPE = "The request include parameter that is not valid for this queue type."


def is_fifo_name(name: str) -> bool:
    return name.endswith(SUFFIX)


def _bad(name: str, reason: str = "") -> SqsError:
    return SqsError(
        INVALID_ATTRIBUTE_VALUE,
        f"Invalid value for the parameter {name}." + (f" Reason: {reason}" if reason else ""),
    )


def _boolean(name: str, value: object) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _bad(name)


def _pick(name: str, value: object, choices: tuple[str, ...]) -> str:
    if isinstance(value, str):
        for choice in choices:
            if value.lower() == choice.lower():
                return choice
    raise _bad(name)


@dataclass
class FifoChanges:
    """What the FIFO attributes of a CreateQueue or SetQueueAttributes ask for."""

    config: dict[str, Any]  # QueueConfig fields
    stored: dict[str, str]  # FifoThroughputLimit


def _read(given: dict[str, Any], config: dict[str, Any], stored: dict[str, str]) -> None:
    if "ContentBasedDeduplication" in given:
        config["content_based_dedup"] = _boolean(
            "ContentBasedDeduplication", given["ContentBasedDeduplication"]
        )
    if "DeduplicationScope" in given:
        scope = _pick("DeduplicationScope", given["DeduplicationScope"], tuple(_SCOPES))
        config["dedup_scope"] = _SCOPES[scope]
    if THROUGHPUT in given:
        stored[THROUGHPUT] = _pick(THROUGHPUT, given[THROUGHPUT], _LIMITS)


def _check_throughput(scope: DedupScope, limit: str | None) -> None:
    if limit == "perMessageGroupId" and scope is not DedupScope.GROUP:
        raise _bad(THROUGHPUT, "perMessageGroupId needs DeduplicationScope messageGroup.")


def creation(name: str, given: dict[str, Any]) -> FifoChanges:
    """The config and stored attributes of a queue a CreateQueue makes, from its FIFO
    attributes (`given`); InvalidParameterValue when the name and FifoQueue disagree,
    InvalidAttributeName for a FIFO attribute on a standard queue."""
    fifo = _boolean("FifoQueue", given["FifoQueue"]) if "FifoQueue" in given else False
    if fifo != is_fifo_name(name):
        raise invalid_value("QueueName", name, _BAD_NAME)
    others = [k for k in given if k != "FifoQueue"]
    if not fifo:
        if others:
            raise SqsError(INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {others[0]}.")
        return FifoChanges({"ordering": STANDARD_ORDERING}, {})
    config: dict[str, Any] = {"ordering": Ordering.FIFO, "dedup_window": DEDUP_INTERVAL}
    stored: dict[str, str] = {}  # FifoThroughputLimit perQueue when not given (render)
    _read(given, config, stored)
    _check_throughput(config.get("dedup_scope", DedupScope.QUEUE), stored.get(THROUGHPUT))
    return FifoChanges(config, stored)


def change(current: QueueConfig, stored: dict[str, str], given: dict[str, Any]) -> FifoChanges:
    """What a SetQueueAttributes' FIFO attributes change (FifoQueue is fixed)."""
    if not given:
        return FifoChanges({}, {})
    if current.ordering is not Ordering.FIFO:
        raise SqsError(INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {next(iter(given))}.")
    if "FifoQueue" in given:
        raise _bad("FifoQueue", "a queue's type is fixed when it is created.")
    config: dict[str, Any] = {}
    new_stored: dict[str, str] = {}
    _read(given, config, new_stored)
    _check_throughput(
        config.get("dedup_scope", current.dedup_scope),
        new_stored.get(THROUGHPUT, stored.get(THROUGHPUT)),
    )
    return FifoChanges(config, new_stored)


def render(config: QueueConfig, stored: dict[str, str]) -> dict[str, str]:
    """A FIFO queue's FIFO attributes (a standard queue has none)."""
    if config.ordering is not Ordering.FIFO:
        return {}
    return {
        "FifoQueue": "true",
        "ContentBasedDeduplication": "true" if config.content_based_dedup else "false",
        "DeduplicationScope": "messageGroup" if config.dedup_scope is DedupScope.GROUP else "queue",
        THROUGHPUT: stored.get(THROUGHPUT, "perQueue"),
    }


def identifier(entry: dict[str, Any], name: str) -> str | None:
    value = entry.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise invalid_value(
            name,
            value,
            f"{name} can only include alphanumeric and punctuation characters. 1 to 128 in length.",
        )
    return value


@dataclass(frozen=True)
class SendRules:
    """What a send's entries must hold, by the queue's type."""

    fifo: bool = False
    content_based: bool = False

    @classmethod
    def of(cls, config: QueueConfig) -> SendRules:
        return cls(config.ordering is Ordering.FIFO, config.content_based_dedup)

    def group(self, entry: dict[str, Any]) -> str:
        """The entry's MessageGroupId ("" for none): required on a FIFO queue."""
        group = identifier(entry, "MessageGroupId")
        if group is None and self.fifo:
            raise missing("MessageGroupId")
        return group or ""

    def dedup(self, entry: dict[str, Any], body: str) -> tuple[str, str]:
        """(the dedup id sent to the core, the MessageDeduplicationId a receive shows): ("", "")
        on a standard queue, which refuses one."""
        given = identifier(entry, "MessageDeduplicationId")
        if not self.fifo:
            if given is not None:
                raise invalid_value("MessageDeduplicationId", given, _NOT_FOR_TYPE)
            return "", ""
        if entry.get("DelaySeconds") not in (None, "", 0, "0"):
            raise invalid_value("DelaySeconds", entry.get("DelaySeconds"), _NOT_FOR_TYPE)
        if given is not None:
            return given, given
        if not self.content_based:
            raise SqsError(
                INVALID_PARAMETER_VALUE,
                "The queue should either have ContentBasedDeduplication enabled or "
                "MessageDeduplicationId provided explicitly",
            )
        return "", hashlib.sha256(body.encode("utf-8")).hexdigest()  # the core makes the same


def attempt_of(params: dict[str, Any], config: QueueConfig) -> str:
    """ReceiveRequestAttemptId: a repeatable receive on a FIFO queue; checked and ignored on a
    standard one, as SQS does."""
    attempt = identifier(params, "ReceiveRequestAttemptId")
    return attempt or "" if config.ordering is Ordering.FIFO else ""
