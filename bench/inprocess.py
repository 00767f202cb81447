"""`--in-process`: the same send / cycle loops calling the Store directly, in this process, with
no gRPC and no protobuf, so that `grpc / in-process` shows what the service layer costs.

Each operation makes the store calls the service makes for the request (server/service.py):
SendMessages is `get_queue` (the queue's config, to validate entries) + `send`; a GetMessages is
`get_queue` + `receive` (receipts are made inside the store); DeleteMessages is `delete`
(receipts are verified inside the store). The entries are built once (the service builds them
from the request's protobuf entries; that is part of the overhead being measured). Concurrency
matches the gRPC run: one asyncio task per producer / consumer process, so stores that batch
concurrent writes (SQLite's group commit) see the same number of callers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from leaseq.server.domain.types import NewMessage, QueueConfig
from leaseq.server.store import open_store
from leaseq.server.store.base import Store

from .settings import Settings
from .stats import summarize

QUEUE = "bench-in-process"


def queue_config(body_bytes: int) -> QueueConfig:
    return QueueConfig(max_in_flight=10_000_000, max_message_bytes=max(1024, body_bytes))


def run_in_process(
    settings: Settings, batch: int, store_url: str, progress: Callable[[float, int], None] | None
) -> dict[str, Any]:
    """msgs_per_s, p50_ms, p99_ms of the scenario on a fresh store at store_url."""
    return asyncio.run(_run(settings, batch, store_url, progress))


async def _run(
    settings: Settings, batch: int, url: str, progress: Callable[[float, int], None] | None
) -> dict[str, Any]:
    store = open_store(url)
    await store.open()
    try:
        await store.create_queue(QUEUE, queue_config(settings.body_bytes))
        return await _measure(store, settings, batch, progress)
    finally:
        await store.close()


async def _send(store: Store, messages: list[NewMessage]) -> None:
    await store.get_queue(QUEUE)  # the service reads the config to validate the entries
    await store.send(QUEUE, messages)


async def _receive(store: Store, n: int) -> list[str]:
    await store.get_queue(QUEUE)
    outcome = await store.receive(QUEUE, n, None, "", "")
    return [m.receipt for m in outcome.messages]


async def _measure(
    store: Store, settings: Settings, batch: int, progress: Callable[[float, int], None] | None
) -> dict[str, Any]:
    messages = [NewMessage(body=b"x" * settings.body_bytes) for _ in range(batch)]
    for left in range(settings.backlog, 0, -1000):
        await _send(store, messages[:1] * min(1000, left))
    loop_clock = time.monotonic
    start = loop_clock()
    begin = start + settings.warmup
    end = begin + settings.duration
    counted = [0]
    done = [0]
    samples: list[float] = []
    sent_event = asyncio.Event()
    exhausted_at: list[float] = []

    # Split cycles count what consumers delete; their producers' sends are not the figure.
    sends_count = settings.scenario == "send"

    def record(t0: float, n: int, counts: bool = True) -> None:
        if not counts:
            return
        t1 = loop_clock()
        done[0] += n
        if begin <= t1 <= end:
            counted[0] += n
            samples.append(t1 - t0)

    async def sender() -> None:
        while (t0 := loop_clock()) < end:
            await _send(store, messages)
            sent_event.set()
            record(t0, batch, sends_count)

    async def cycler() -> None:
        while (t0 := loop_clock()) < end:
            await _send(store, messages)
            receipts: list[str] = []
            while len(receipts) < batch:
                got = await _receive(store, batch - len(receipts))
                if not got:
                    await asyncio.sleep(0.001)  # another task took them: it deletes them soon
                receipts += got
            await store.delete(QUEUE, receipts, [])
            record(t0, len(receipts))

    async def consumer(consume_only: bool) -> None:
        while (t0 := loop_clock()) < end:
            sent_event.clear()
            receipts = await _receive(store, batch)
            if not receipts:
                if consume_only:
                    exhausted_at.append(loop_clock())
                    return
                try:  # the long poll's wake-up: the next send
                    await asyncio.wait_for(sent_event.wait(), timeout=1.0)
                except TimeoutError:
                    pass
                continue
            await store.delete(QUEUE, receipts, [])
            record(t0, len(receipts))

    async def ticker() -> None:
        while progress is not None:
            progress(loop_clock() - start, done[0])
            await asyncio.sleep(0.2)

    if settings.scenario == "send":
        tasks = [sender() for _ in range(settings.producers)]
    elif not settings.split:
        tasks = [cycler() for _ in range(settings.consumers)]
    else:
        consume_only = settings.producers == 0
        tasks = [sender() for _ in range(settings.producers)]
        tasks += [consumer(consume_only) for _ in range(settings.consumers)]
    tick = asyncio.create_task(ticker())
    try:
        await asyncio.gather(*tasks)
    finally:
        tick.cancel()
    elapsed = settings.duration
    if exhausted_at and len(exhausted_at) == settings.consumers:
        elapsed = max(1e-9, min(elapsed, max(exhausted_at) - begin))
    latency = summarize(samples)
    return {
        "msgs_per_s": round(counted[0] / elapsed, 1) if elapsed > 0 else 0.0,
        "p50_ms": latency.p50_ms,
        "p99_ms": latency.p99_ms,
    }
