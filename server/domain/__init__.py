"""The queue's domain: value types, limits, message rules and lease decisions, I/O-free.

    types    the values front ends, the core and the stores pass (QueueConfig, NewMessage, ...)
    limits   leaseq's ranges (API.md), one table
    rules    one definition of a valid message, configuration and range, for every front end
    leases   the lease decisions (fencing, delivery, dead-lettering, expiry, release) every
             store asks what to write

Front ends import this package (never a store); stores import it (never a front end); the
architecture test (tests/architecture) keeps those arrows. The semantics below are what every
store implements; the contract suite (tests/contract) and the model tests check them against the
memory store, the reference. Values arriving at a store are already checked by `rules`; a store
still raises the errors of `leaseq.server.errors` for what only it can know (a missing queue,
the in-flight limit, ...).

Times are float seconds since the epoch, read from the store's injectable Clock. Every operation
reads the clock once ("now") and acts as of that instant.

Message states, derived from the message's fields at `now`:

- expired   now >= expires_at. Never delivered, peeked or counted; an expired message is removed.
            Every operation on a queue first removes the queue's expired messages, counting each
            in the queue's expired_total (so counts are exact whatever the sweep timing).
- visible   visible_at <= now
- leased    visible_at > now and the message is under a lease (delivered with a visibility
            timeout > 0 and neither released nor updated to visibility 0 since)
- delayed   visible_at > now and not leased (a send delay)

Delivery order: among visible messages, ascending (visible_at, key): the message visible the
longest goes first, ties in enqueue order. For messages never delayed or leased that is FIFO.
`key` is the store's internal integer id, increasing with every enqueued message.

Receipts (see `leaseq.server.receipts`) carry (key, receipt_seq). receipt_seq starts at 0 and goes
up by one at every delivery, every UpdateMessage, every move to a dead letter queue and every
redrive; only a receipt with the message's current receipt_seq may touch it.

Lease operations decide a per-receipt LeaseStatus in this order:
1. INVALID_RECEIPT    the receipt does not verify for this queue (forged, truncated, another queue's).
2. not in the queue:  a tombstone of this key in this queue, not older than TOMBSTONE_SECONDS:
                      ALREADY_DELETED if the receipt's seq equals the tombstone's, else
                      RECEIPT_SUPERSEDED. No tombstone: MESSAGE_NOT_FOUND (expired, purged, moved).
3. RECEIPT_SUPERSEDED receipt seq < message's receipt_seq. (A seq ahead of the message's can only
                      come from another copy of the store: INVALID_RECEIPT.)
4. delete:            OK whatever the lease state (Azure's rule: the latest receipt deletes even
                      after its lease expired, as long as there was no newer delivery). Deleting
                      leaves a tombstone (key, receipt_seq, deleted_at) and counts in deleted_total.
   change visibility: LEASE_EXPIRED unless the message is leased (live lease). Else visible_at =
                      now + visibility_timeout; 0 releases it (visible now, not leased, its receive
                      attempt id cleared). A non-empty reason becomes last_error.

Dead letters: when a receive reaches a candidate whose delivery_count >= the queue's
max_delivery_count (and the queue has a dead_letter_queue), it moves that message to the dead
letter queue instead of delivering it and goes on to the next candidate (moved ones do not count
towards max_messages). The moved message keeps key, message_id, body, attributes, channel,
enqueued_at, delivery_count and last_error; it records source_queue; it is visible at once and not
leased; expires_at becomes enqueued_at + the dead letter queue's message_retention (SQS's rule:
the retention clock keeps running from the original enqueue); receipt_seq + 1. The source
queue's dead_lettered_total counts it.

Retry policy (`QueueConfig.retry_policy`, `leases.retry_backoff`): a lease given by a delivery
ends with a backoff: when it ends at T, the message is delayed until T + min(maximum_backoff,
minimum_backoff * 2^(n-1)), n its delivery_count, and is no longer leased (stores turn such ended
leases into delays before any operation reads the queue's states). A release (visibility 0)
makes the message delayed until now + that backoff, unless the release asks for none (a stream's
unsent leases, an administrator's release). A visibility change > 0 names the lease's end itself:
the message is visible then, without a backoff. Without a policy, nothing changes.

Dead-lettering on request (DeadLetterMessages): each receipt is fenced as by delete (OK whatever
the lease state, for the current receipt); an OK message moves to the dead letter queue as by a
receive's move (above), with the given reason as its last_error. A queue without a dead letter
queue fails the call (NoDeadLetterQueue) before any receipt is looked at.

Receive attempts (`attempt_id`, non-follow receives): a message remembers the attempt id of its
latest delivery. A receive with an attempt id:
  a. if messages of the queue are leased (live lease) under that id: returns them, in key order,
     with their current receipts, and changes nothing (no delivery, no count);
  b. else if an attempt record of that id exists whose expiry (delivery time + visibility timeout
     of the receive that made it) is still ahead: returns no messages and changes nothing;
  c. else: an ordinary receive, whose messages record the id; when it delivered anything, a new
     attempt record (an empty receive records nothing, so a long poll retried with the same id
     still finds messages that arrive later).
Rules a and b come before the in-flight limit: a replay is answered even when the queue is full.
A replay returns every message of rule a, whatever max_bytes: it repeats what one receive
delivered, which was bounded when it was made.
DeleteMessages by attempt id deletes every message of the queue whose latest delivery was made
under that id and that was not released since (leased or lease expired, not redelivered), with
tombstones, and reports the count.

Dedup: a send with a non-empty dedup_id that was sent to the same queue at time t with the queue's
dedup_window w such that now < t + w enqueues nothing and returns the original message_id with
duplicate=True (even if that message was deleted since). Within one batch, a later entry repeating
an earlier entry's dedup_id is a duplicate of it (whatever the window). Purge keeps dedup records,
attempt records and tombstones.

Byte limit (`max_bytes` of receive and peek; None: no limit): the store counts the size of each
message it takes, in order, and stops after the message that brings the total to max_bytes or more,
so it reads and returns at most max_bytes plus one message, and always at least one message when
any is there (a message larger than max_bytes comes alone). A message's size is about
`message_size` (body plus attributes; a SQL store may count its attributes' stored encoding). The
core passes it so that one call holds a bounded number of bytes in memory; a receive
cut by bytes is otherwise an ordinary receive of fewer messages, and a peek page cut by bytes has
a next_cursor at its last message.

Message groups (FIFO and FAIR queues): `groups` states the rules.

The in-flight limit: a receive with visibility_timeout > 0 delivers at most
max_in_flight - (leased messages now) messages; if that is <= 0 it raises OverLimit (with retry_at,
the earliest end of a live lease). Deliveries with visibility_timeout 0 make no lease and are not
limited.
"""

from __future__ import annotations

from . import groups, leases, limits, rules
from .types import (
    AllDeleted,
    CountsByState,
    DeadLetterOutcome,
    DedupScope,
    DeleteOutcome,
    DeliveredMessage,
    LeaseResult,
    LeaseStatus,
    MessageState,
    NewMessage,
    Ordering,
    PeekCursor,
    PeekedMessage,
    PeekPage,
    QueueConfig,
    QueueInfo,
    QueueStats,
    ReceiveOutcome,
    RetryPolicy,
    SendOutcome,
    UpdatedMessage,
    VisibilityChange,
)

__all__ = [
    "AllDeleted",
    "CountsByState",
    "DeadLetterOutcome",
    "DedupScope",
    "DeleteOutcome",
    "DeliveredMessage",
    "LeaseResult",
    "LeaseStatus",
    "MessageState",
    "NewMessage",
    "Ordering",
    "PeekCursor",
    "PeekPage",
    "PeekedMessage",
    "QueueConfig",
    "QueueInfo",
    "QueueStats",
    "ReceiveOutcome",
    "RetryPolicy",
    "SendOutcome",
    "UpdatedMessage",
    "VisibilityChange",
    "groups",
    "leases",
    "limits",
    "rules",
]
