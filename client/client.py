"""``QueueClient`` (blocking) and ``AsyncQueueClient`` (asyncio): one method per leaseq RPC.

Both are thin drivers of the plans in ``_wire`` (which build requests and convert responses),
so they behave identically; the async one's methods are coroutines, and its ``stream`` is an
async iterator.

Example::

    from leaseq.client import QueueClient

    with QueueClient("127.0.0.1:50051") as client:
        client.create_queue("jobs", visibility_timeout=60)
        client.send("jobs", "hello")
        for msg in client.receive("jobs", max_messages=10, wait_time=5):
            print(msg.text)
            client.delete("jobs", msg.receipt)

Retries: a call that fails with UNAVAILABLE or DEADLINE_EXCEEDED is retried with exponential
backoff and jitter (``RetryPolicy``) when repeating it is safe: reads
(get/list/stats/peek/receive), queue create and update, deletes of messages, visibility
changes, and sends whose entries all carry a ``dedup_id``. Deleting or purging a queue, plain
sends, ``update_message`` and ``redrive`` are not retried, since a repeat after a lost answer
would act twice or report wrongly. Retries are logged at DEBUG on the ``leaseq.client`` logger;
the library never configures logging.

The code: ``_settings`` (TLS and the settings both clients derive from their arguments),
``_sync_client`` (``QueueClient``), ``_async_client`` (``AsyncQueueClient``); this module names
the public types.
"""

from __future__ import annotations

from ._async_client import AsyncMessageStream, AsyncQueueClient
from ._settings import DEFAULT_TARGET, TLSConfig
from ._settings import TLSLike as TLSLike
from ._settings import read_pem as read_pem
from ._sync_client import MessageStream, QueueClient
from ._wire import MAX_MESSAGE_SIZE
from .batching import DEFAULT_BATCH_BYTES as DEFAULT_BATCH_BYTES

__all__ = [
    "DEFAULT_TARGET",
    "MAX_MESSAGE_SIZE",
    "AsyncMessageStream",
    "AsyncQueueClient",
    "MessageStream",
    "QueueClient",
    "TLSConfig",
]
