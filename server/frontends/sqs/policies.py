"""The queue's JSON policies: Policy (stored as given, edited by AddPermission / RemovePermission,
not enforced: leaseq's auth policy decides who may do what) and RedriveAllowPolicy (enforced:
which queues may name this one as their dead letter queue), with SQS's limits and errors."""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import INVALID_ATTRIBUTE_VALUE, INVALID_PARAMETER_VALUE, SqsError, invalid_value

MAX_POLICY_BYTES = 8192
MAX_STATEMENTS = 20
MAX_ACTIONS_PER_STATEMENT = 7
MAX_PRINCIPALS = 50
MAX_SOURCE_QUEUES = 10
PERMISSION_ACTIONS = frozenset(
    {
        "*",
        "SendMessage",
        "ReceiveMessage",
        "DeleteMessage",
        "ChangeMessageVisibility",
        "GetQueueAttributes",
        "GetQueueUrl",
        "ListDeadLetterSourceQueues",
        "PurgeQueue",
        "ListQueueTags",
    }
)
_LABEL = re.compile(r"[A-Za-z0-9_-]{1,80}")
_ACCOUNT = re.compile(r"\d{12}")


def _document(text: str, name: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        document = None
    if not isinstance(document, dict):
        raise SqsError(
            INVALID_ATTRIBUTE_VALUE,
            f"Invalid value for the parameter {name}. Reason: {name} is not a valid JSON object.",
        )
    return document


def check_policy(text: str) -> str:
    """A Policy attribute's value as stored: a JSON object within SQS's limits."""
    if len(text.encode()) > MAX_POLICY_BYTES:
        raise SqsError(
            INVALID_ATTRIBUTE_VALUE,
            f"Invalid value for the parameter Policy. Reason: the policy is over "
            f"{MAX_POLICY_BYTES} bytes.",
        )
    statements = _document(text, "Policy").get("Statement", [])
    count = len(statements) if isinstance(statements, list) else 1
    if count > MAX_STATEMENTS:
        raise SqsError(
            INVALID_ATTRIBUTE_VALUE,
            f"Invalid value for the parameter Policy. Reason: {count} statements; at most "
            f"{MAX_STATEMENTS}.",
        )
    return text


def _bad_allow(reason: str) -> SqsError:
    return SqsError(
        INVALID_ATTRIBUTE_VALUE,
        f"Value for parameter RedriveAllowPolicy is invalid. Reason: {reason}",
    )


def check_redrive_allow(text: str) -> str:
    """A RedriveAllowPolicy's value: {"redrivePermission": "allowAll" | "denyAll" | "byQueue",
    "sourceQueueArns": [1..10 ARNs, with byQueue only]}."""
    from .queue_attributes import name_from_arn

    document = _document(text, "RedriveAllowPolicy")
    unknown = set(document) - {"redrivePermission", "sourceQueueArns"}
    if unknown:
        raise _bad_allow(f"unknown key(s) {sorted(unknown)}.")
    permission = document.get("redrivePermission")
    if permission not in ("allowAll", "denyAll", "byQueue"):
        raise _bad_allow("redrivePermission must be allowAll, denyAll or byQueue.")
    sources = document.get("sourceQueueArns")
    if permission != "byQueue":
        if sources is not None:
            raise _bad_allow("sourceQueueArns is only allowed with redrivePermission byQueue.")
        return text
    if not isinstance(sources, list) or not 1 <= len(sources) <= MAX_SOURCE_QUEUES:
        raise _bad_allow(
            f"redrivePermission byQueue needs sourceQueueArns: 1 to {MAX_SOURCE_QUEUES} ARNs."
        )
    for arn in sources:
        name_from_arn(arn, "RedrivePolicy")  # InvalidAttributeValue for a malformed one
    return text


def redrive_allowed(allow_text: str | None, source: str) -> bool:
    """Whether a dead letter queue with this RedriveAllowPolicy (None: allowAll) accepts
    `source` (a queue name) as a source queue; ARNs compare by queue name (one account)."""
    if not allow_text:
        return True
    document = json.loads(allow_text)  # checked when it was set
    permission = document.get("redrivePermission")
    if permission == "denyAll":
        return False
    if permission == "byQueue":
        return any(arn.rpartition(":")[2] == source for arn in document["sourceQueueArns"])
    return True


# --- AddPermission / RemovePermission -------------------------------------------------------------


def _label(label: object) -> str:
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise invalid_value(
            "Label", label, "Can only include alphanumeric characters, hyphens, or underscores."
        )
    return label


def _statements(policy: str | None) -> tuple[dict[str, Any], list[Any]]:
    document: dict[str, Any] = json.loads(policy) if policy else {}
    statements = document.get("Statement", [])
    if not isinstance(statements, list):
        statements = [statements]
    return document, statements


def add_permission(
    policy: str | None,
    queue_arn: str,
    label: object,
    accounts: list[str],
    actions: list[str],
) -> str:
    """The Policy after AddPermission: one statement, Sid the label, allowing the accounts the
    actions on this queue (SQS's shape: Principal {"AWS": [arn:aws:iam::<id>:root]}, Action
    ["SQS:<name>"])."""
    sid = _label(label)
    if not accounts:
        raise SqsError(INVALID_PARAMETER_VALUE, "The request must contain AWSAccountIds.")
    if not actions:
        raise SqsError(INVALID_PARAMETER_VALUE, "The request must contain Actions.")
    for account in accounts:
        if not _ACCOUNT.fullmatch(account):
            raise invalid_value("AWSAccountIds", account, "An AWS account id is 12 digits.")
    for action in actions:
        if action not in PERMISSION_ACTIONS:
            raise invalid_value("ActionName", action, "Not a valid SQS action for a permission.")
    if len(actions) > MAX_ACTIONS_PER_STATEMENT or len(accounts) > MAX_PRINCIPALS:
        raise invalid_value(
            "Actions",
            len(actions),
            f"At most {MAX_ACTIONS_PER_STATEMENT} actions and {MAX_PRINCIPALS} accounts.",
        )
    document, statements = _statements(policy)
    if any(isinstance(s, dict) and s.get("Sid") == sid for s in statements):
        raise invalid_value("Label", sid, "Already exists.")
    if len(statements) >= MAX_STATEMENTS:
        raise invalid_value("Label", sid, f"The policy has {MAX_STATEMENTS} statements already.")
    statements.append(
        {
            "Sid": sid,
            "Effect": "Allow",
            "Principal": {"AWS": [f"arn:aws:iam::{account}:root" for account in accounts]},
            "Action": [f"SQS:{action}" for action in actions],
            "Resource": queue_arn,
        }
    )
    document.setdefault("Version", "2012-10-17")
    document.setdefault("Id", f"{queue_arn}/SQSDefaultPolicy")
    document["Statement"] = statements
    return check_policy(json.dumps(document, separators=(",", ":")))


def remove_permission(policy: str | None, label: object) -> str | None:
    """The Policy after RemovePermission (None: no statement left, no policy)."""
    sid = _label(label)
    document, statements = _statements(policy)
    kept = [s for s in statements if not (isinstance(s, dict) and s.get("Sid") == sid)]
    if len(kept) == len(statements):
        raise invalid_value("Label", sid, "can't find label on existing policy.")
    if not kept:
        return None
    document["Statement"] = kept
    return json.dumps(document, separators=(",", ":"))
