"""Azure pop receipts over leaseq receipts.

Azure names a message by its id in the URL and a pop receipt in the query; leaseq's receipt alone
names one delivery of one message (receipts.py), by the store's internal key, not by the message
id. So an Azure pop receipt binds the two: "<leaseq receipt>.<tag>", where the tag is a MAC of
the message id and the receipt under a key derived from the store's secret (every replica of one
store and a restarted server accept it; the receipt's base64url alphabet has no "."). A request
whose URL names another message than the one the pop receipt was issued for is refused
(PopReceiptMismatch, 400) before anything is done: the receipt of message A cannot delete or
update A through the URL of message B, and no one can make the tag for another id.

Put Message answers the message's send receipt (`QueueCore.send_receipt`, receipt_seq 0): Update
and Delete Message accept it until the message is delivered or updated, as Azure does. "-.<tag>"
(the Put Message pop receipt of earlier versions, and `for_sent`, for a send that gave no key)
names no delivery: Delete/Update Message with it answer MessageNotFound."""

from __future__ import annotations

import base64
import hashlib
import hmac

from ...domain.types import LeaseStatus
from .errors import (
    MESSAGE_NOT_FOUND,
    POP_RECEIPT_MISMATCH,
    AzureError,
    invalid_query,
    missing_query,
)

_UNLEASED = "-"
_TAG_BYTES = 12  # 96 bits: a guess is hopeless, and the pop receipt stays short
MAX_CHARS = 512  # far above any receipt leaseq issues; longer text is not one of ours


def _mismatch(why: str) -> AzureError:
    return AzureError(
        POP_RECEIPT_MISMATCH,
        "The specified pop receipt did not match the pop receipt for a dequeued message.",
        {"Reason": why},
    )


class PopReceipts:
    """Makes and checks the pop receipts of one store (its secret: `Store.token_key()`)."""

    def __init__(self, secret: bytes) -> None:
        self._key = hashlib.blake2b(
            b"leaseq azure pop receipt", key=secret[:64], digest_size=32
        ).digest()

    def _tag(self, receipt: str, message_id: str) -> str:
        mac = hashlib.blake2b(
            f"{message_id}\0{receipt}".encode(), key=self._key, digest_size=_TAG_BYTES
        ).digest()
        return base64.urlsafe_b64encode(mac).decode("ascii")

    def encode(self, receipt: str, message_id: str) -> str:
        return f"{receipt}.{self._tag(receipt, message_id)}"

    def for_sent(self, message_id: str) -> str:
        return self.encode(_UNLEASED, message_id)

    def decode(self, pop_receipt: str | None, message_id: str) -> str:
        """The leaseq receipt of a pop receipt issued for message_id (the URL's)."""
        if not pop_receipt:
            raise missing_query("popreceipt")
        receipt, dot, tag = pop_receipt.rpartition(".")
        if len(pop_receipt) > MAX_CHARS or not dot or not receipt or not tag:
            raise invalid_query(
                "popreceipt", pop_receipt[:100], "Not a pop receipt this server issued."
            )
        if not hmac.compare_digest(
            tag.encode("utf-8", "replace"), self._tag(receipt, message_id).encode()
        ):
            raise _mismatch("it was not issued for this message id")
        if receipt == _UNLEASED:
            raise AzureError(
                MESSAGE_NOT_FOUND,
                "The specified message does not exist with this pop receipt: it names no "
                "delivery of the message.",
            )
        return receipt


def rejected(status: LeaseStatus, updating: bool = False) -> AzureError | None:
    """The error for a delete or update whose receipt the store did not accept (None: done;
    a message already deleted by this pop receipt is done for a delete, gone for an update).
    A receipt that no longer works (the message was delivered again, deleted, expired, purged,
    dead-lettered, or for Update Message its lease ended) is MessageNotFound (404), as Azure
    answers a pop receipt that is no longer valid."""
    if status is LeaseStatus.OK or (status is LeaseStatus.ALREADY_DELETED and not updating):
        return None
    if status == LeaseStatus.INVALID_RECEIPT:
        return _mismatch("this queue did not issue it")
    reason = {
        LeaseStatus.RECEIPT_SUPERSEDED: "the message was delivered again since this pop receipt",
        LeaseStatus.LEASE_EXPIRED: "the message's visibility timeout ended",
        LeaseStatus.MESSAGE_NOT_FOUND: "the message is gone (deleted, expired, cleared or dead-lettered)",
        LeaseStatus.ALREADY_DELETED: "the message was deleted with this pop receipt",
    }.get(status, status.name)
    return AzureError(
        MESSAGE_NOT_FOUND, "The specified message does not exist.", {"Reason": reason}
    )
