"""The memory store's stats: a count of every message of the queue (the reference counts; the
SQL stores keep counters)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..domain.leases import message_state
from ..domain.types import CountsByState, MessageState, QueueStats

if TYPE_CHECKING:
    from .memory_rows import _Queue


def queue_stats(queue: _Queue, now: float) -> QueueStats:
    """The queue's stats at now (expired messages already swept)."""
    counts: dict[str, dict[MessageState, int]] = {}
    oldest_visible: float | None = None
    for message in queue.messages.values():
        state = message_state(message.visible_at, message.leased, now)
        per_state = counts.setdefault(message.channel, dict.fromkeys(MessageState, 0))
        per_state[state] += 1
        if state is MessageState.VISIBLE and (
            oldest_visible is None or message.enqueued_at < oldest_visible
        ):
            oldest_visible = message.enqueued_at
    channels = {
        channel: CountsByState(
            visible=c[MessageState.VISIBLE],
            leased=c[MessageState.LEASED],
            delayed=c[MessageState.DELAYED],
        )
        for channel, c in counts.items()
    }
    group_count, blocked = queue.groups.counts(queue.config, queue.messages, now)
    return QueueStats.from_channels(
        channels,
        oldest_visible,
        now,
        dead_lettered_total=queue.dead_lettered_total,
        expired_total=queue.expired_total,
        deleted_total=queue.deleted_total,
        groups=group_count,
        blocked_groups=blocked,
    )
