"""The in-flight limit: max_in_flight leased messages per queue."""

from __future__ import annotations

from dataclasses import replace

import pytest

from leaseq.server.errors import OverLimit
from leaseq.server.store.base import Store

from .conftest import Q, at, change, delete_status, make_queue, receive, send


async def test_a_receive_gets_at_most_the_room_left(store: Store) -> None:
    await make_queue(store, Q, max_in_flight=3)
    await send(store, Q, *[f"m{i}" for i in range(6)])
    assert len(await receive(store, Q, 2)) == 2
    assert len(await receive(store, Q, 5)) == 1
    assert (await store.stats(Q)).leased == 3


async def test_a_full_queue_refuses_with_the_earliest_lease_end(store: Store, clock) -> None:
    await make_queue(store, Q, max_in_flight=2)
    await send(store, Q, "a", "b", "c")
    t0 = clock.now()
    await receive(store, Q, 1, vt=50.0)
    clock.advance(5)
    await receive(store, Q, 1, vt=20.0)  # ends at t0 + 25, the earliest
    with pytest.raises(OverLimit) as raised:
        await receive(store, Q, 1, vt=30.0)
    assert (raised.value.name, raised.value.limit) == (Q, 2)
    assert raised.value.retry_at == at(t0 + 25.0)
    # Nothing was delivered by the refused call.
    assert [m.delivery_count for m in (await store.peek(Q, 10)).messages] == [0]


async def test_an_over_limit_queue_refuses_even_when_nothing_is_visible(store: Store) -> None:
    await make_queue(store, Q, max_in_flight=1)
    await send(store, Q, "a")
    await receive(store, Q, 1)
    with pytest.raises(OverLimit):
        await receive(store, Q, 1)


async def test_visibility_zero_is_not_limited(store: Store) -> None:
    await make_queue(store, Q, max_in_flight=1)
    await send(store, Q, "a", "b", "c")
    await receive(store, Q, 1)
    assert len(await receive(store, Q, 10, vt=0.0)) == 2
    assert (await store.stats(Q)).leased == 1


async def test_settled_leases_make_room(store: Store, clock) -> None:
    await make_queue(store, Q, max_in_flight=2)
    await send(store, Q, *[f"m{i}" for i in range(6)])
    a, b = await receive(store, Q, 2, vt=10.0)
    await delete_status(store, Q, a.receipt)
    assert len(await receive(store, Q, 5, vt=10.0)) == 1  # deleting made room for one
    await change(store, Q, b.receipt, 0.0)
    assert len(await receive(store, Q, 5, vt=10.0)) == 1  # and so did releasing
    with pytest.raises(OverLimit):
        await receive(store, Q, 1, vt=10.0)
    clock.advance(10)  # every lease ended
    assert len(await receive(store, Q, 5, vt=10.0)) == 2


async def test_an_update_of_the_limit_applies_at_once(store: Store) -> None:
    await make_queue(store, Q, max_in_flight=1)
    await send(store, Q, "a", "b", "c")
    await receive(store, Q, 1)
    config = (await store.get_queue(Q)).config
    await store.update_queue(Q, replace(config, max_in_flight=3))
    assert len(await receive(store, Q, 5)) == 2
