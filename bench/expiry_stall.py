"""How long the event loop stalls when a big backlog has expired at once (SQLite store).

    python -m leaseq.bench.expiry_stall [--messages 200000]

Fills a queue with 100-byte messages of a 60 s retention, moves the store's (fake) clock past
it, then sends one message (whose expiry sweep removes the backlog) while a task on the same
event loop records how long the loop went without turning. Prints that longest stall and the
send's time. A group may hold the loop for writer.MAX_LOOP_SECONDS (50 ms); past that SQLite
interrupts it and it runs again on the writer's thread, so the stall stays near that.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from leaseq.server.clock import FakeClock
from leaseq.server.domain import QueueConfig
from leaseq.server.store.sqlite import SqliteStore, writer


async def _measure(messages: int) -> None:
    clock = FakeClock(1000.0)
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteStore(Path(folder) / "stall.db", clock=clock)
        await store.open()
        try:
            await store.create_queue("q", QueueConfig(message_retention=60.0))
            for start in range(0, messages, writer.INLINE_WEIGHT):
                await store.send_bodies(
                    "q", [b"x" * 100] * min(writer.INLINE_WEIGHT, messages - start)
                )
            clock.advance(61.0)
            gaps: list[float] = []
            done = asyncio.Event()

            async def watch() -> None:
                last = time.perf_counter()
                while not done.is_set():
                    await asyncio.sleep(0)
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now

            watcher = asyncio.ensure_future(watch())
            await asyncio.sleep(0)
            started = time.perf_counter()
            await store.send_bodies("q", [b"after"])
            took = time.perf_counter() - started
            done.set()
            await watcher
            expired = (await store.stats("q")).expired_total
        finally:
            await store.close()
    print(
        f"{expired:,} expired messages swept; the send took {took * 1000:.0f} ms;"
        f" longest event-loop stall {max(gaps) * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    asyncio.run(_measure(parser.parse_args().messages))


if __name__ == "__main__":
    main()
