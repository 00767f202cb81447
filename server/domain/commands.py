"""Checked commands the core runs: what a front end's request becomes once its wire format is
read and its values pass `rules` (the gRPC front end reads protobuf into these; the HTTP
dialects call the core with the same values)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import InvalidArgument
from .types import PeekCursor, QueueConfig


@dataclass(frozen=True)
class ReceiveParams:
    queue: str
    max_messages: int
    visibility_timeout: float | None  # None: the queue's
    wait_time: float | None  # None: the queue's receive_wait_time (resolve_receive fills it)
    channel_filter: str
    follow: bool
    max_outstanding: int
    attempt_id: str


def resolve_receive(params: ReceiveParams, config: QueueConfig) -> ReceiveParams:
    """Fill the queue's defaults; refuse a follow stream without leases: without one, every
    receive would deliver the same visible messages again and the stream would spin."""
    wait = config.receive_wait_time if params.wait_time is None else params.wait_time
    vt = (
        config.visibility_timeout
        if params.visibility_timeout is None
        else params.visibility_timeout
    )
    if params.follow and vt <= 0:
        raise InvalidArgument(
            "visibility_timeout",
            "follow needs a lease (> 0): without one every receive redelivers the same messages",
        )
    return replace(params, wait_time=wait)


@dataclass(frozen=True)
class PeekParams:
    queue: str
    max_messages: int
    channel_filter: str
    include_leased: bool
    include_delayed: bool
    after: PeekCursor | None
