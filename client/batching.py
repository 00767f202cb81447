"""Cutting bulk requests so each fits one gRPC message: at most ``MAX_BATCH`` entries (the API's
batch limit) and at most a budget of estimated bytes.

Shared by the Arrow bulk path (``arrow.py``) and the ``leaseq`` command line (``send --file``,
``ack``/``release``/``extend``), without importing pyarrow.

gRPC's message limit is ``MAX_MESSAGE_SIZE`` (64 MiB) on both sides. The byte budget may go up to
``MAX_BATCH_BYTES`` (55 MiB), which leaves room for one more message of the largest size (8 MiB,
which may make the last entry overshoot the cut) plus framing, so the 64 MiB limit is never what
fails. A single entry larger than the budget travels alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar

from ._wire import MAX_BATCH, MAX_MESSAGE_SIZE

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "MAX_BATCH_BYTES",
    "check_batch_bytes",
    "chunks",
    "receipt_cost",
    "send_entry_cost",
]

T = TypeVar("T")

DEFAULT_BATCH_BYTES = 32 * 1024 * 1024
"""Default cut of a send or ack request by estimated bytes (32 MiB)."""

MAX_BATCH_BYTES = MAX_MESSAGE_SIZE - 9 * 1024 * 1024
"""Largest allowed byte budget (55 MiB): the 64 MiB gRPC limit less one message of the largest
size (8 MiB) and 1 MiB of framing."""

# Per-entry protobuf framing (tags, lengths, Duration messages) stays well below these; counting
# them keeps the estimate an upper bound for tiny bodies.
_ENTRY_OVERHEAD = 64
_ATTRIBUTE_OVERHEAD = 8
_RECEIPT_OVERHEAD = 4


def check_batch_bytes(max_batch_bytes: int) -> int:
    if isinstance(max_batch_bytes, bool) or not isinstance(max_batch_bytes, int):
        raise TypeError("max_batch_bytes must be an int")
    if not 1 <= max_batch_bytes <= MAX_BATCH_BYTES:
        raise ValueError(f"max_batch_bytes must be between 1 and {MAX_BATCH_BYTES}")
    return max_batch_bytes


def send_entry_cost(
    body: bytes | str, channel: str, dedup_id: str, attributes: Mapping[str, str] | None
) -> int:
    """An upper bound of the bytes one SendMessages entry takes on the wire (lengths of text
    count characters: a few multi-byte characters in a channel or attribute are covered by the
    overheads)."""
    cost = _ENTRY_OVERHEAD + len(body) + len(channel) + len(dedup_id)
    if attributes:
        cost += sum(len(k) + len(v) + _ATTRIBUTE_OVERHEAD for k, v in attributes.items())
    return cost


def receipt_cost(receipt: str) -> int:
    """The bytes one receipt takes in a DeleteMessages or ChangeVisibility request."""
    return len(receipt) + _RECEIPT_OVERHEAD


def chunks(items: Iterable[tuple[T, int]], max_bytes: int) -> Iterator[list[T]]:
    """The items of (item, cost) pairs, in order, cut at ``MAX_BATCH`` items or ``max_bytes`` of
    their costs. Lazy: a long input (lines of a file) is never all in memory."""
    chunk: list[T] = []
    size = 0
    for item, cost in items:
        if chunk and (len(chunk) >= MAX_BATCH or size + cost > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += cost
    if chunk:
        yield chunk
