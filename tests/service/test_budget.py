"""ByteBudget (server/budget.py): a semaphore counted in bytes, in line order, that survives
cancelled waiters."""

from __future__ import annotations

import asyncio

import pytest

from leaseq.server.budget import ByteBudget, read_estimate


async def test_reservations_wait_in_line_for_room() -> None:
    budget = ByteBudget(100)
    first = await budget.reserve(70)
    big = asyncio.ensure_future(budget.reserve(50))
    small = asyncio.ensure_future(budget.reserve(10))
    await asyncio.sleep(0)  # both are queued now
    # 30 bytes are free, enough for the small one, but it waits behind the big one: no starving.
    assert not big.done() and not small.done()
    first.resize(40)  # the read returned less than reserved
    assert (await big).bytes == 50 and (await small).bytes == 10
    assert budget.available == 0


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    budget = ByteBudget(100)
    held = await budget.reserve(100)
    cancelled = asyncio.ensure_future(budget.reserve(60))
    behind = asyncio.ensure_future(budget.reserve(40))
    await asyncio.sleep(0)
    cancelled.cancel()
    held.resize(60)  # 40 free: the one behind the cancelled waiter goes
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert (await behind).bytes == 40
    held.release()
    behind.result().release()
    assert budget.available == 100


async def test_a_waiter_cancelled_as_it_is_granted_gives_the_bytes_back() -> None:
    budget = ByteBudget(100)
    held = await budget.reserve(100)
    waiter = asyncio.ensure_future(budget.reserve(50))
    await asyncio.sleep(0)
    held.release()  # grants the waiter...
    waiter.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert budget.available == 100


async def test_a_reservation_larger_than_the_budget_goes_alone() -> None:
    budget = ByteBudget(100)
    with await budget.reserve(1_000) as alone:
        assert alone.bytes == 100 and budget.available == 0
    assert budget.available == 100


def test_the_estimate_of_a_read() -> None:
    # Few small messages: what they can be at most; many: the chunk plus one message.
    assert read_estimate(10, 1024, 8 << 20) == 10 * (1024 + 512)
    assert read_estimate(10_000, 8 << 20, 8 << 20) == (8 << 20) + (8 << 20) + 512
