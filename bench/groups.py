"""`leaseq bench groups`: what message groups cost a store's receives, and how fair a FAIR queue
is, measured against the store alone (in this process, no gRPC: the receive selection is the
store's, which is what groups change).

1. Backlog: a FIFO queue holding `backlog` messages over `groups` groups (sent round robin over
   the groups, as interleaved traffic arrives) and a plain queue holding `backlog` messages;
   one consumer loops receive(batch) + delete for `duration` seconds on each. Figures: msgs/s
   of each, and their ratio (FIFO / plain).
2. Fairness: 100,000 messages of one group, then 5 of another, on a FAIR queue and on a plain
   one; one consumer loops receive(10) + delete until the 5 are all delivered. Figures: how
   many receives and how long the 5 waited on each.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from leaseq.server.domain.types import NewMessage, Ordering, QueueConfig
from leaseq.server.store import open_store
from leaseq.server.store.base import Store

FILL = 5000
BIG_GROUP = 100_000
SMALL_GROUP = 5
FAIR_ROOM = 10


def run_groups(
    url: str, backlog: int, groups: int, batch: int, duration: float, body_bytes: int
) -> dict[str, Any]:
    return asyncio.run(_run(url, backlog, groups, batch, duration, body_bytes))


async def _run(
    url: str, backlog: int, groups: int, batch: int, duration: float, body_bytes: int
) -> dict[str, Any]:
    store = open_store(url)
    await store.open()
    try:
        body = b"x" * body_bytes
        config = QueueConfig(max_in_flight=10_000_000, max_message_bytes=max(1024, body_bytes))
        await store.create_queue("plain", config)
        await store.create_queue("fifo", QueueConfig(**{**vars(config), "ordering": Ordering.FIFO}))
        fill_plain = await _fill(store, "plain", backlog, body, lambda i: "")
        fill_fifo = await _fill(store, "fifo", backlog, body, lambda i: f"g{i % groups}")
        plain = await _drain(store, "plain", batch, duration)
        fifo = await _drain(store, "fifo", batch, duration)
        fair = await _fairness(store, Ordering.FAIR, body)
        unordered = await _fairness(store, Ordering.NONE, body)
    finally:
        await store.close()
    return {
        "store": url.split(":", 1)[0],
        "backlog": backlog,
        "groups": groups,
        "batch": batch,
        "fill_plain_msgs_per_s": round(fill_plain),
        "fill_fifo_msgs_per_s": round(fill_fifo),
        "plain_msgs_per_s": round(plain),
        "fifo_msgs_per_s": round(fifo),
        "fifo_over_plain": round(fifo / plain, 3) if plain else None,
        "fair_small_group_receives": fair[0],
        "fair_small_group_wait_ms": round(fair[1] * 1000, 1),
        "plain_small_group_receives": unordered[0],
        "plain_small_group_wait_ms": round(unordered[1] * 1000, 1),
    }


async def _fill(store: Store, queue: str, count: int, body: bytes, group_of: Any) -> float:
    started = time.perf_counter()
    for start in range(0, count, FILL):
        n = min(FILL, count - start)
        await store.send(queue, [NewMessage(body, group=group_of(start + i)) for i in range(n)])
    return count / (time.perf_counter() - started)


async def _drain(store: Store, queue: str, batch: int, duration: float) -> float:
    """receive(batch) + delete for `duration` seconds: msgs/s."""
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < duration:
        messages = (await store.receive(queue, batch, 30.0)).messages
        if not messages:
            break
        await store.delete(queue, [m.receipt for m in messages])
        done += len(messages)
    return done / (time.perf_counter() - started)


async def _fairness(store: Store, ordering: Ordering, body: bytes) -> tuple[int, float]:
    """Receives (of FAIR_ROOM, each acked) and seconds until the small group's 5 messages,
    sent after the big group's 100,000, were all delivered."""
    name = f"fair-{ordering.name.lower()}"
    await store.create_queue(name, QueueConfig(ordering=ordering, max_in_flight=10_000_000))
    await _fill(store, name, BIG_GROUP, body, lambda i: "big")
    await store.send(name, [NewMessage(body, group="small") for _ in range(SMALL_GROUP)])
    started = time.perf_counter()
    receives = seen = 0
    while seen < SMALL_GROUP:
        messages = (await store.receive(name, FAIR_ROOM, 30.0)).messages
        receives += 1
        seen += sum(m.group == "small" for m in messages)
        await store.delete(name, [m.receipt for m in messages])
    return receives, time.perf_counter() - started
