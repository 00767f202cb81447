"""``Consumer`` (threads) and ``AsyncConsumer`` (asyncio): handle a queue's messages with leases
that are extended while the handler works, and a clean shutdown.

Example::

    from leaseq.client import Consumer, QueueClient

    def handle(msg):
        resize(msg.body)            # returns: the message is deleted; raises: it is released

    with QueueClient() as client, Consumer(client, "jobs", handle, concurrency=4) as consumer:
        consumer.wait()             # until close() (e.g. from a signal handler) or a fatal error

A consumer runs one follow stream (``GetMessages`` with ``follow``) and a few small parts, one
per concern, as google-cloud-pubsub's subscriber does:

- the *subscription* reads the stream, holds each delivery in the lease table and hands it to
  the dispatcher; when the stream fails (the server restarts, drains, the network drops) it
  opens a new one with exponential backoff and jitter, for as long as the consumer runs;
- the *dispatcher* runs the handler on at most ``concurrency`` messages (or batches) at once;
- the *leaser* extends the leases of every held message, running or waiting, in one batched
  ``ChangeVisibility`` call at a jittered 0.85-0.9 of the lease (``leaseq.client._leases``), and
  stops extending a message ``max_lease_time`` after its delivery;
- the *settler* deletes the messages whose handler returned and releases those whose handler
  raised (the exception's text as the reason, stored as the message's ``last_error``; after
  ``release_delay``), batching what piles up into one call and retrying until it lands; a
  handler that raises ``Reject("why")`` gives up on its message (or, from a batch handler, on
  the messages it names): it moves to the queue's dead letter queue at once
  (``dead_letter``).

Flow control is the server's: the stream pauses while it holds ``max_outstanding`` unsettled
leases (a settle resumes it), so a consumer never holds more than that, except just after a
reconnect, when the leases of the old stream still count here but not on the server. A release
with a delay keeps the message leased (invisible) until the delay ends and so keeps its place
among the stream's ``max_outstanding`` until then.

``close(timeout)``: stop taking new messages, release at once what is held but not started,
let running handlers finish (their leases still extended) and settle, then return True. When
``timeout`` passes first, ``Consumer`` leaves the handlers still running to their threads
(threads cannot be interrupted): their leases are no longer extended and their results are not
acknowledged, so the messages come back after their leases end. ``AsyncConsumer`` cancels them
instead and releases their messages. Either returns False then.

Delivery is at least once: a handler may see a message again when its lease was lost (the
server was down for longer than the lease had left, or ``max_lease_time`` passed), or when a
batch the server sent was cut off with the stream (a server restart, or ``close()`` just as a
batch was on its way: that batch stays leased until its visibility timeout ends, then is
delivered again; nothing is lost).

Logs go to the ``leaseq.client.consumer`` logger: reconnects and retries at DEBUG, lost leases
and handler exceptions at WARNING.

The code, by concern: ``_consumer_core`` holds what both share, I/O-free (settings, the lease
table, the counters, every decision about a held message); ``_consumer_thread`` is the blocking
driver (``Consumer``: threads over a ``QueueClient``), ``_consumer_async`` the asyncio one
(``AsyncConsumer``: tasks over an ``AsyncQueueClient``). This module names the public types.
"""

from __future__ import annotations

from ._consumer_async import AsyncConsumer
from ._consumer_core import ConsumerStats
from ._consumer_thread import Consumer
from ._leases import Backoff, Reject

__all__ = ["AsyncConsumer", "Backoff", "Consumer", "ConsumerStats", "Reject"]
