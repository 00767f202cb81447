"""A receive that meets a long run of exhausted messages moves them all and still delivers
in order (the scan reads ahead in pages: this crosses several page boundaries)."""

from __future__ import annotations

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import NewMessage, QueueConfig
from leaseq.server.store.sqlite import PICK_READ_AHEAD, SqliteStore


async def test_a_long_run_of_exhausted_messages(store: SqliteStore, clock: FakeClock) -> None:
    await store.create_queue("dead", QueueConfig())
    await store.create_queue("q", QueueConfig(dead_letter_queue="dead", max_delivery_count=1))
    exhausted = 3 * PICK_READ_AHEAD + 5
    await store.send("q", [NewMessage(b"old%d" % i) for i in range(exhausted)])
    assert len((await store.receive("q", exhausted, visibility_timeout=1.0)).messages) == exhausted
    clock.advance(2.0)
    await store.send("q", [NewMessage(b"fresh1"), NewMessage(b"fresh2")])

    [first] = (await store.receive("q", 1, visibility_timeout=30.0)).messages
    assert first.body == b"fresh1"
    assert (await store.stats("q")).dead_lettered_total == exhausted
    moved = (await store.peek("dead", exhausted)).messages
    assert [m.body for m in moved] == [b"old%d" % i for i in range(exhausted)]
    [second] = (await store.receive("q", 5, visibility_timeout=30.0)).messages
    assert second.body == b"fresh2"
