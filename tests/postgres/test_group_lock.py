"""Two replicas (stores with their own pools) over one schema never lease messages of one FIFO
group at once, and every group still comes out whole and in send order."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator

import pytest

from leaseq.server.domain.types import NewMessage, Ordering, QueueConfig
from leaseq.server.store.postgres import PostgresStore

GROUPS = 12
PER_GROUP = 25


@pytest.fixture
async def replicas(url: str) -> AsyncIterator[list[PostgresStore]]:
    stores = [PostgresStore.from_url(url) for _ in range(2)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        yield stores
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_two_replicas_never_lease_two_messages_of_one_fifo_group_at_once(
    replicas: list[PostgresStore],
) -> None:
    a, b = replicas
    await a.create_queue("q", QueueConfig(ordering=Ordering.FIFO))
    for i in range(PER_GROUP):
        batch = [NewMessage(f"{g}:{i}".encode(), group=f"g{g}") for g in range(GROUPS)]
        await (a if i % 2 else b).send("q", batch)

    holders: dict[str, str] = {}  # group -> the worker holding its messages now
    seen: dict[str, list[int]] = defaultdict(list)
    overlaps: list[tuple[str, str, str]] = []
    done = asyncio.Event()

    async def worker(store: PostgresStore, me: str) -> None:
        while not done.is_set():
            messages = (await store.receive("q", 3, visibility_timeout=30.0)).messages
            if not messages:
                if sum(map(len, seen.values())) >= GROUPS * PER_GROUP:
                    done.set()
                await asyncio.sleep(0)
                continue
            for group in {m.group for m in messages}:
                if group in holders:
                    overlaps.append((group, holders[group], me))
                holders[group] = me
            await asyncio.sleep(0.001)  # hold the leases while the others receive
            for m in messages:
                seen[m.group].append(int(m.body.decode().split(":")[1]))
            for group in {m.group for m in messages}:
                holders.pop(group, None)
            await store.delete("q", [m.receipt for m in messages])

    await asyncio.wait_for(
        asyncio.gather(*(worker(s, f"{n}{k}") for n, s in zip("ab", (a, b)) for k in range(3))),
        timeout=60.0,
    )
    assert overlaps == []
    assert {g: order for g, order in seen.items()} == {
        f"g{g}": list(range(PER_GROUP)) for g in range(GROUPS)
    }
