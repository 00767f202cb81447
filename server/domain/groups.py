"""Message groups: what a FIFO or a FAIR queue delivers, written once for every store.

A message's group is a string sent with it (rules.group); a queue's `ordering` says what groups
mean to its receives (QueueConfig.ordering, chosen at creation and never changed):

NONE  groups are carried (receive and peek show them) and change nothing.

FIFO  every message has a group. A group's messages are in key order (send order; a dead
      lettered or redriven message keeps its key, so it keeps its place). A group is *blocked*
      while any of its messages is leased (a live lease) or while its first message, its head,
      is not visible (a delay); otherwise it is *ready*. A receive takes ready groups oldest
      first (by `ready_at`, the instant the group became ready; then by name) and from each its
      *run*: the longest prefix of the group's messages that are visible (and match the
      receive's channel filter), as far as the receive has room (SQS's rule: as many messages
      of one group as possible). So the messages of one group come out together and in order,
      a group is delivered to one receiver at a time, and a
      released or expired message (still the head) comes back before the rest of its group. A
      head due for dead-lettering is moved and the run goes on with the next message (the move
      unblocks the group). Each run's messages are leased together, so the leased messages of
      a group are always within its first MAX_BATCH messages: `fifo_ready_at` needs to read no
      further than the messages delivered before (delivery_count > 0) and one more.

FAIR  no order promise. A message without a group is in the group "". A group is ready while
      any of its messages is visible. A receive of room N takes up to N ready groups, least
      recently served first (a group never served is first), and gives each a share of
      ceil(N / groups) of its visible messages in delivery order; room left by groups that had
      fewer goes to the others in further rounds. Every group served moves to the back. Bound:
      with G ready groups a ready group is served within ceil(G / N) receives of room N, so a
      group of 5 messages behind one of 100,000 gets half of the first receive of room 10.

Stores keep, per grouped queue, one row per group holding messages: its `ready_at` (the
earliest instant a receive may deliver from it, per `fifo_ready_at` / `fair_ready_at`) and its
`turn` (FAIR: when it was last served). Every operation that adds, removes, leases or releases
messages of a group recomputes that group's ready_at; receives find ready groups by index.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from .types import DedupScope, NewMessage, Ordering, QueueConfig

FAIR_DEFAULT_GROUP = ""
"""The group of a message sent without one to a FAIR queue."""


class GroupMember(NamedTuple):
    """What the group rules read of a message: its state, in the group's key order."""

    key: int
    visible_at: float
    leased: bool
    delivery_count: int


def fifo_ready_at(members: Iterable[GroupMember]) -> float | None:
    """When a FIFO group is ready: the latest of its head's visible_at and the lease end of
    every leased message (a lease that ended is in the past: it blocks nothing); None for an
    empty group. `members` in key order; it is read only while messages were
    delivered before (delivery_count > 0) and one more (see the module docstring)."""
    ready: float | None = None
    for member in members:
        if ready is None:
            ready = member.visible_at  # the head (a redriven one may have delivery_count 0)
            continue
        if member.delivery_count == 0:
            break
        if member.leased and member.visible_at > ready:
            ready = member.visible_at
    return ready


def fair_ready_at(visible_ats: Iterable[float]) -> float | None:
    """When a FAIR group is ready: its earliest visible_at; None for an empty group."""
    return min(visible_ats, default=None)


def ready_at(ordering: Ordering, members: Sequence[GroupMember]) -> float | None:
    """The group's ready_at per the queue's ordering (members in key order)."""
    if ordering is Ordering.FIFO:
        return fifo_ready_at(members)
    return fair_ready_at(m.visible_at for m in members)


def fifo_run(members: Iterable[GroupMember], now: float, room: int) -> list[int]:
    """The keys of a ready FIFO group's run: the prefix of visible messages, at most room.
    (A store applies the channel filter and the byte limit itself, stopping the run there.)"""
    run: list[int] = []
    for member in members:
        if len(run) >= room or member.visible_at > now:
            break
        run.append(member.key)
    return run


def fair_share(room: int, groups: int) -> int:
    """How many messages each of `groups` ready groups may give in one round of a FAIR
    receive with this room."""
    return math.ceil(room / groups) if groups > 0 else 0


def stored_group(group: str, config: QueueConfig) -> str | None:
    """The group a store writes for a message sent with `group` ("" for none) to a queue of
    this config: None for no group (a NONE queue's message without one)."""
    if group:
        return group
    return FAIR_DEFAULT_GROUP if config.ordering is Ordering.FAIR else None


def redrive_group(group: str | None, destination: QueueConfig) -> tuple[bool, str | None]:
    """Whether a redrive moves a message of this group (None: none) to the destination, and
    its group there: a FIFO queue takes no message without a group (it stays in the dead
    letter queue); a FAIR queue puts one in the group ""."""
    if group is None and destination.ordering is Ordering.FIFO:
        return False, None
    return True, stored_group(group or "", destination) if group is None else group


def dedup_key(message: NewMessage, config: QueueConfig) -> str:
    """The dedup record a send of this message to a FIFO queue looks up: its dedup_id, or the
    SHA-256 of its body with content_based_dedup; within its group with dedup_scope GROUP
    ("" when the message has no dedup key). Groups are printable ASCII (rules.group), so the
    separator U+001F cannot be part of one."""
    key = message.dedup_id
    if not key and config.content_based_dedup:
        key = hashlib.sha256(message.body).hexdigest()
    if key and config.dedup_scope is DedupScope.GROUP:
        return f"{message.group}\x1f{key}"
    return key
