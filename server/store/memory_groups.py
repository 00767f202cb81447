"""The memory store's message groups: which messages a receive of a FIFO or FAIR queue takes,
by the rules of `domain.groups`, computed from the group's messages at each receive (the
reference favours obviously right over fast: a receive reads every group's first messages)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from ..domain import groups as rules
from ..domain.rules import bytes_reached, channel_matches, message_size
from ..domain.types import Ordering, QueueConfig


class _Member(Protocol):
    key: int
    body: bytes
    attributes: dict[str, str]
    visible_at: float
    leased: bool
    delivery_count: int
    channel: str


_M = TypeVar("_M", bound=_Member)


def _member(message: _Member) -> rules.GroupMember:
    return rules.GroupMember(
        message.key, message.visible_at, message.leased, message.delivery_count
    )


class GroupIndex:
    """Per group, its messages' keys in key order, and (FAIR) when each group was last served."""

    def __init__(self) -> None:
        self.keys: dict[str, list[int]] = {}
        self.turns: dict[str, int] = {}
        self._turn = 0

    def add(self, group: str, key: int) -> None:
        bisect.insort(self.keys.setdefault(group, []), key)

    def discard(self, group: str, key: int) -> None:
        keys = self.keys.get(group)
        if keys is None:
            return
        index = bisect.bisect_left(keys, key)
        if index < len(keys) and keys[index] == key:
            del keys[index]
        if not keys:
            del self.keys[group]
            self.turns.pop(group, None)

    def clear(self) -> None:
        self.keys.clear()
        self.turns.clear()

    def ready_at(
        self, ordering: Ordering, group: str, messages: Mapping[int, _Member], now: float
    ) -> float | None:
        members = [_member(messages[k]) for k in self.keys[group]]
        return rules.ready_at(ordering, members)

    def counts(
        self, config: QueueConfig, messages: Mapping[int, _Member], now: float
    ) -> tuple[int, int]:
        """(groups, blocked groups) for stats; (0, 0) for a queue without ordering."""
        if not config.grouped:
            return 0, 0
        blocked = 0
        for group in self.keys:
            ready = self.ready_at(config.ordering, group, messages, now)
            blocked += ready is None or ready > now
        return len(self.keys), blocked

    def candidates(
        self,
        queue: Any,  # memory._Queue: its config and messages
        now: float,
        room: int,
        channel_filter: str,
        exhausted: Callable[[_M], bool],
        max_bytes: int | None,
    ) -> list[_M]:
        """What a receive with this room takes (domain.groups: FIFO, shares of the runs of the
        oldest ready groups; FAIR, rounds over the least recently served ready groups): the
        messages to dead-letter (`exhausted`) first, then those to deliver, each group's
        together and in order, within room and max_bytes."""
        config: QueueConfig = queue.config
        messages: Mapping[int, Any] = queue.messages
        if room <= 0:
            return []
        if config.ordering is Ordering.FIFO:
            ready = []
            for group in self.keys:
                ready_at = self.ready_at(Ordering.FIFO, group, messages, now)
                if ready_at is not None and ready_at <= now:
                    ready.append((ready_at, group))
            chosen = [group for _, group in sorted(ready)[:room]]

            def runs(group: str) -> list[_M]:  # in key order; a run ends at the first miss
                run = []
                for key in self.keys[group]:
                    m = messages[key]
                    if m.visible_at > now or not channel_matches(m.channel, channel_filter):
                        break
                    run.append(m)
                return run
        else:
            ready_fair = [
                g for g in self.keys if any(messages[k].visible_at <= now for k in self.keys[g])
            ]
            chosen = sorted(ready_fair, key=lambda g: (self.turns.get(g, 0), g))[:room]

            def runs(group: str) -> list[_M]:  # the visible ones in delivery order
                found = [
                    messages[k]
                    for k in self.keys[group]
                    if messages[k].visible_at <= now
                    and channel_matches(messages[k].channel, channel_filter)
                ]
                return sorted(found, key=lambda m: (m.visible_at, m.key))

        if config.ordering is Ordering.FIFO:  # each group's run as far as the room goes
            fifo_dead: list[Any] = []
            taken_fifo: list[Any] = []
            total = 0
            for group in chosen:
                for m in runs(group):
                    if exhausted(m):
                        fifo_dead.append(m)
                        continue
                    taken_fifo.append(m)
                    total += message_size(m.body, m.attributes)
                    if len(taken_fifo) >= room or bytes_reached(total, max_bytes):
                        break
                if len(taken_fifo) >= room or bytes_reached(total, max_bytes):
                    break
            return [*fifo_dead, *taken_fifo]
        lists = {group: runs(group) for group in chosen}
        taken: dict[str, list[_M]] = {group: [] for group in chosen}
        position = dict.fromkeys(chosen, 0)
        served: list[str] = []
        dead: list[_M] = []
        order: list[_M] = []  # FAIR: delivery in the order taken
        count = total = 0
        open_ = list(chosen)
        while open_ and count < room and not bytes_reached(total, max_bytes):
            share = rules.fair_share(room - count, len(open_))
            more: list[str] = []
            for group in open_:
                rows = lists[group][position[group] : position[group] + share]
                position[group] += len(rows)
                if rows and config.ordering is Ordering.FAIR and group in served:
                    served.remove(group)  # to the back, in the order last served
                if rows and group not in served:
                    served.append(group)
                for m in rows:
                    if exhausted(m):
                        dead.append(m)
                        continue
                    taken[group].append(m)
                    order.append(m)
                    count += 1
                    total += message_size(m.body, m.attributes)
                    if count >= room or bytes_reached(total, max_bytes):
                        break
                if count >= room or bytes_reached(total, max_bytes):
                    break
                if len(rows) == share:
                    more.append(group)
            open_ = more
        if config.ordering is Ordering.FAIR:
            for group in served:
                self._serve(group)
            return [*dead, *order]
        return [*dead, *(m for group in chosen for m in taken[group])]

    def _serve(self, group: str) -> None:
        self._turn += 1
        self.turns[group] = self._turn
