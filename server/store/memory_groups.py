"""The memory store's message groups: which messages a receive of a FIFO or FAIR queue takes,
by the rules of `domain.groups`, computed from the group's messages at each receive (the
reference favours obviously right over fast: a receive reads every group's first messages)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol, TypeVar

from ..domain import groups as rules
from ..domain.rules import channel_matches
from ..domain.types import Ordering, QueueConfig


class _Member(Protocol):
    key: int
    visible_at: float
    leased: bool
    delivery_count: int
    channel: str


_M = TypeVar("_M", bound=_Member)


def _member(message: _Member, now: float) -> rules.GroupMember:
    return rules.GroupMember(
        message.key, message.visible_at, message.leased and message.visible_at > now,
        message.delivery_count,
    )  # fmt: skip


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
        members = [_member(messages[k], now) for k in self.keys[group]]
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
        config: QueueConfig,
        messages: Mapping[int, _M],
        now: float,
        room: int,
        channel_filter: str,
    ) -> Iterator[_M]:
        """The messages a receive with this room takes, in order (FIFO: runs of ready groups,
        oldest first; FAIR: rounds over the ready groups, least recently served first). The
        receive may dead-letter some as it goes (they leave `messages`)."""
        present = messages.__contains__
        if config.ordering is Ordering.FIFO:
            yield from self._fifo(messages, now, channel_filter, present)
        else:
            yield from self._fair(messages, now, room, channel_filter, present)

    def _fifo(
        self,
        messages: Mapping[int, _M],
        now: float,
        channel_filter: str,
        present: Callable[[int], bool],
    ) -> Iterator[_M]:
        ready = []
        for group in self.keys:
            at = self.ready_at(Ordering.FIFO, group, messages, now)
            if at is not None and at <= now:
                ready.append((at, group))
        ready.sort()
        for _, group in ready:
            for key in list(self.keys.get(group, ())):
                if not present(key):
                    continue
                message = messages[key]
                if message.visible_at > now or not channel_matches(message.channel, channel_filter):
                    break  # the run ends here
                yield message

    def _fair(
        self,
        messages: Mapping[int, _M],
        now: float,
        room: int,
        channel_filter: str,
        present: Callable[[int], bool],
    ) -> Iterator[_M]:
        def visible(group: str) -> list[int]:
            return sorted(
                (k for k in self.keys.get(group, ()) if present(k)),
                key=lambda k: (messages[k].visible_at, k),
            )

        ready = [
            group
            for group in self.keys
            if any(
                messages[k].visible_at <= now
                and channel_matches(messages[k].channel, channel_filter)
                for k in self.keys[group]
            )
        ]
        ready.sort(key=lambda g: (self.turns.get(g, 0), g))
        chosen = ready[:room]
        yielded: set[int] = set()
        left = room
        while left > 0 and chosen:
            share = rules.fair_share(left, len(chosen))
            more: list[str] = []
            for group in chosen:
                keys = [
                    k
                    for k in visible(group)
                    if k not in yielded
                    and messages[k].visible_at <= now
                    and channel_matches(messages[k].channel, channel_filter)
                ][:share]
                for key in keys:
                    if left <= 0:
                        return
                    self._serve(group)
                    yielded.add(key)
                    left -= 1
                    yield messages[key]
                if len(keys) == share:
                    more.append(group)
            chosen = more

    def _serve(self, group: str) -> None:
        self._turn += 1
        self.turns[group] = self._turn
