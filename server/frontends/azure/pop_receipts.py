"""Azure pop receipts over leaseq receipts.

Azure names a message by its id in the URL and a pop receipt in the query; leaseq's receipt alone
names one delivery of one message (receipts.py). An Azure pop receipt is "<leaseq receipt>.<message
id>" (the receipt's base64url alphabet has no "."), so a request whose URL names another message
than its pop receipt is refused (PopReceiptMismatch) instead of acting on the receipt's message.

Put Message answers a pop receipt too, but leaseq issues receipts only when it delivers: that one
is "-.<message id>", which names no delivery (Delete/Update Message with it: MessageNotFound)."""

from __future__ import annotations

from ...domain.types import LeaseStatus
from .errors import (
    MESSAGE_NOT_FOUND,
    POP_RECEIPT_MISMATCH,
    AzureError,
    invalid_query,
    missing_query,
)

_UNLEASED = "-"
MAX_CHARS = 512  # far above any receipt leaseq issues; longer text is not one of ours


def encode(receipt: str, message_id: str) -> str:
    return f"{receipt}.{message_id}"


def for_sent(message_id: str) -> str:
    return encode(_UNLEASED, message_id)


def decode(pop_receipt: str | None, message_id: str) -> str:
    """The leaseq receipt of a pop receipt given for message_id."""
    if not pop_receipt:
        raise missing_query("popreceipt")
    receipt, dot, named = pop_receipt.rpartition(".")
    if len(pop_receipt) > MAX_CHARS or not dot or not receipt or not named:
        raise invalid_query("popreceipt", pop_receipt[:100], "Not a pop receipt this server issued.")
    if named != message_id:
        raise AzureError(
            POP_RECEIPT_MISMATCH,
            "The specified pop receipt did not match the pop receipt for a dequeued message "
            "(it was issued for another message id).",
        )
    if receipt == _UNLEASED:
        raise AzureError(
            MESSAGE_NOT_FOUND,
            "The specified message does not exist with this pop receipt: leaseq issues usable pop "
            "receipts when Get Messages delivers a message, not on Put Message.",
        )
    return receipt


def rejected(status: LeaseStatus) -> AzureError | None:
    """The error for a delete or update whose receipt the store did not accept (None: done).
    A receipt that no longer works (the message was delivered again, deleted, expired, purged,
    dead-lettered, or for Update Message its lease ended) is MessageNotFound (404), as Azure
    answers a pop receipt that is no longer valid."""
    if status in (LeaseStatus.OK, LeaseStatus.ALREADY_DELETED):
        return None
    if status == LeaseStatus.INVALID_RECEIPT:
        return AzureError(
            POP_RECEIPT_MISMATCH,
            "The specified pop receipt did not match the pop receipt for a dequeued message "
            "(this queue did not issue it).",
        )
    reason = {
        LeaseStatus.RECEIPT_SUPERSEDED: "the message was delivered again since this pop receipt",
        LeaseStatus.LEASE_EXPIRED: "the message's visibility timeout ended",
        LeaseStatus.MESSAGE_NOT_FOUND: "the message is gone (deleted, expired, cleared or dead-lettered)",
    }.get(status, status.name)
    return AzureError(MESSAGE_NOT_FOUND, f"The specified message does not exist: {reason}.")
