"""The in-flight limit is exact although the store counts live leases only near the limit."""

from __future__ import annotations

import pytest

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import NewMessage, QueueConfig
from leaseq.server.errors import OverLimit
from leaseq.server.store.sqlite import SqliteStore


async def _receive(store: SqliteStore, n: int, vt: float = 30.0) -> list:
    return (await store.receive("q", n, visibility_timeout=vt)).messages


async def test_limit_holds_through_deliveries_deletes_and_expiry(
    store: SqliteStore, clock: FakeClock
) -> None:
    await store.create_queue("q", QueueConfig(max_in_flight=5))
    await store.send("q", [NewMessage(b"%d" % i) for i in range(20)])

    first = await _receive(store, 3)
    assert len(first) == 3
    assert len(await _receive(store, 1)) == 1
    assert len(await _receive(store, 3)) == 1  # only one more fits
    with pytest.raises(OverLimit) as raised:
        await _receive(store, 1)
    assert raised.value.retry_at == pytest.approx(clock.now() + 30.0)

    # Deliveries without a lease are not limited.
    assert len(await _receive(store, 2, vt=0.0)) == 2

    # A delete ends a lease: room for exactly one again.
    await store.delete("q", [first[0].receipt])
    assert len(await _receive(store, 3)) == 1
    with pytest.raises(OverLimit):
        await _receive(store, 1)

    clock.advance(31)  # every lease ends
    assert len(await _receive(store, 10)) == 5
    with pytest.raises(OverLimit):
        await _receive(store, 1)


async def test_limit_counts_leases_made_before_a_restart(db_path, clock: FakeClock) -> None:
    store = SqliteStore(db_path, clock=clock)
    await store.open()
    await store.create_queue("q", QueueConfig(max_in_flight=3))
    await store.send("q", [NewMessage(b"%d" % i) for i in range(5)])
    assert len(await _receive(store, 2)) == 2
    await store.close()

    store = SqliteStore(db_path, clock=clock)
    await store.open()
    try:
        assert len(await _receive(store, 5)) == 1
    finally:
        await store.close()
