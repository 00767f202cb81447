"""leaseq's ranges (API.md "Queue configuration", "Messages", "GetMessages"), in one table.

Every front end checks against these through `rules`; a dialect with narrower ranges of its own
(SQS's WaitTimeSeconds up to 20 s, its 10-entry batches) writes them in that dialect's module.
"""

from __future__ import annotations

import re

# 1..80 characters of A-Z a-z 0-9 _ -, or such a name ending in ".fifo" (SQS's FIFO queue names:
# the suffix counts in the 80).
NAME_PATTERN = re.compile(r"(?=.{1,80}\Z)[A-Za-z0-9_-]+(?:\.fifo)?\Z", re.DOTALL)
MAX_NAME = 80

MIN_BATCH, MAX_BATCH = 1, 10_000
MAX_OUTSTANDING = 100_000
DEFAULT_MAX_OUTSTANDING = 1_000
MAX_PAGE_SIZE = 1_000
DEFAULT_PAGE_SIZE = 100
MAX_ATTRIBUTES = 16
MAX_CHANNEL = 64
MAX_DEDUP_ID = 128
# A message group: what SQS allows in a MessageGroupId (letters, digits and ASCII punctuation).
GROUP_PATTERN = re.compile(r"[\x21-\x7e]{1,128}")
MAX_GROUP = 128
MAX_ATTEMPT_ID = 128
MAX_REASON = 1024  # a release reason is kept as last_error on every later delivery: keep it small
# Leases of up to 7 days: Azure Queue Storage's bound, so that every dialect has one range;
# SQS's own VisibilityTimeout stays at most 12 h in frontends/sqs.
MAX_VISIBILITY = 7 * 86400.0
MAX_WAIT = 30.0
MIN_TTL = 1.0
NEVER_EXPIRES = 100 * 365.25 * 86400.0
"""A send's ttl meaning "never expires" (Azure's messagettl=-1), the one ttl above the queue's
retention: expires_at is 100 years after the send, within every store's and every wire format's
range (a protobuf Timestamp ends in 9999), and no sweep ever reaches it (`never_expires`)."""
MAX_INT64 = 2**63 - 1

LARGEST_MESSAGE_BYTES = 8 * 1024 * 1024
"""max_message_bytes' maximum (body plus attributes)."""

# QueueConfig duration fields: (minimum, maximum) in seconds. default_delay's maximum is the
# retention, checked once the retention is known (rules.check_config_relations).
CONFIG_DURATIONS: dict[str, tuple[float, float]] = {
    "visibility_timeout": (0.0, MAX_VISIBILITY),
    "receive_wait_time": (0.0, MAX_WAIT),
    "message_retention": (60.0, 14 * 86400.0),
    "default_delay": (0.0, 14 * 86400.0),
    "dedup_window": (0.0, 3600.0),
}
# A retry policy's backoffs (Pub/Sub's range and defaults): maximum_backoff >= minimum_backoff.
RETRY_BACKOFF = (0.0, 600.0)

CONFIG_INTS: dict[str, tuple[int, int]] = {
    "max_message_bytes": (1024, LARGEST_MESSAGE_BYTES),
    "max_delivery_count": (1, 1000),
    "max_in_flight": (1, 10_000_000),
}

# A front end's own pairs (Store.queue_state, Store.settings): names and values per call.
MAX_STATE_NAME = 256
MAX_STATE_VALUE = 64 * 1024
MAX_STATE_CHANGES = 100

TOMBSTONE_SECONDS = 3600.0
"""How long a deleted message's tombstone answers ALREADY_DELETED / RECEIPT_SUPERSEDED."""
