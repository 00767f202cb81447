"""max_bytes of receive and peek (base.py's byte limit): the store stops after the message that
reaches the limit, always takes at least one, and a cut peek page continues on its next page."""

from __future__ import annotations

from leaseq.server.store.base import Store

from .conftest import DLQ, Q, bodies, make_queue, peek_all, receive, send

KIB = 1024


def _bodies(count: int, size: int) -> list[bytes]:
    return [bytes([65 + i]) * size for i in range(count)]


async def test_receive_stops_after_the_message_that_reaches_max_bytes(store: Store) -> None:
    await make_queue(store, Q)
    sent = _bodies(6, 10 * KIB)
    await send(store, Q, *sent)
    # 25 KiB: the third message brings the total to 30 KiB, past the limit: three come.
    first = await receive(store, Q, 6, max_bytes=25 * KIB)
    assert bodies(first) == sent[:3]
    # Exactly at the limit: the message that reaches it is the last one.
    second = await receive(store, Q, 6, max_bytes=20 * KIB)
    assert bodies(second) == sent[3:5]
    # The others stayed visible, in order, for the next receive.
    assert bodies(await receive(store, Q, 6)) == sent[5:]


async def test_receive_takes_one_message_larger_than_max_bytes(store: Store) -> None:
    await make_queue(store, Q)
    sent = _bodies(2, 64 * KIB)
    await send(store, Q, *sent)
    assert bodies(await receive(store, Q, 10, max_bytes=1)) == sent[:1]
    assert bodies(await receive(store, Q, 10, max_bytes=1)) == sent[1:]


async def test_receive_counts_attributes_towards_max_bytes(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b", attributes={"k": "v" * (8 * KIB)})
    assert len(await receive(store, Q, 2, max_bytes=8 * KIB)) == 1


async def test_receive_without_max_bytes_takes_max_messages(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, *_bodies(4, 10 * KIB))
    assert len(await receive(store, Q, 4)) == 4


async def test_receive_max_bytes_skips_dead_lettered_messages(store: Store, clock) -> None:
    """Messages moved to the dead letter queue on the way count towards neither limit."""
    await make_queue(store, DLQ)
    await make_queue(store, Q, dead_letter_queue=DLQ, max_delivery_count=1)
    await send(store, Q, *_bodies(2, 10 * KIB))
    await receive(store, Q, 2, vt=1.0)  # both delivered once: exhausted
    clock.advance(2)
    fresh = _bodies(3, 10 * KIB)
    await send(store, Q, *fresh)
    delivered = await receive(store, Q, 10, max_bytes=15 * KIB)
    assert bodies(delivered) == fresh[:2]
    assert len(await peek_all(store, DLQ)) == 2


async def test_peek_page_ends_after_the_message_that_reaches_max_bytes(store: Store) -> None:
    await make_queue(store, Q)
    sent = _bodies(5, 10 * KIB)
    await send(store, Q, *sent)
    seen: list[bytes] = []
    cursor = None
    pages = 0
    while True:
        page = await store.peek(Q, 100, after=cursor, max_bytes=15 * KIB)
        seen += bodies(page.messages)
        pages += 1
        assert 1 <= len(page.messages) <= 2
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == sent
    assert pages == 3


async def test_peek_takes_one_message_larger_than_max_bytes(store: Store) -> None:
    await make_queue(store, Q)
    sent = _bodies(2, 64 * KIB)
    await send(store, Q, *sent)
    page = await store.peek(Q, 10, max_bytes=1)
    assert bodies(page.messages) == sent[:1]
    assert page.next_cursor is not None
    last = await store.peek(Q, 10, after=page.next_cursor, max_bytes=1)
    assert bodies(last.messages) == sent[1:]
    assert last.next_cursor is None


async def test_peek_under_max_bytes_is_one_whole_page(store: Store) -> None:
    await make_queue(store, Q)
    sent = _bodies(3, KIB)
    await send(store, Q, *sent)
    page = await store.peek(Q, 10, max_bytes=64 * KIB)
    assert bodies(page.messages) == sent
    assert page.next_cursor is None
