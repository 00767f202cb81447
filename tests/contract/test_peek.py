"""Peek: a read without side effects, by state, channel and page."""

from __future__ import annotations

from leaseq.server.domain.types import LeaseStatus, MessageState
from leaseq.server.store.base import Store

from .conftest import Q, at, bodies, delete_status, make_queue, peek_all, receive_one, send


async def _three_states(store: Store) -> None:
    await send(store, Q, "held", "free")
    await send(store, Q, "delayed", delay=50.0)
    await receive_one(store, Q, vt=30.0)  # takes "held", the oldest


async def test_peek_has_no_side_effects(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "m")
    for _ in range(3):
        [peeked] = (await store.peek(Q, 10)).messages
        assert (peeked.body, peeked.delivery_count) == (b"m", 0)
    message = await receive_one(store, Q)
    assert message.delivery_count == 1
    [peeked] = await peek_all(store, Q)
    assert (peeked.state, peeked.delivery_count) == (MessageState.LEASED, 1)
    # Peeking did not supersede the receipt.
    assert await delete_status(store, Q, message.receipt) is LeaseStatus.OK


async def test_peek_shows_visible_only_unless_asked(store: Store, clock) -> None:
    await make_queue(store, Q)
    await _three_states(store)

    async def states(**flags: bool) -> list[tuple[bytes, MessageState]]:
        page = await store.peek(Q, 10, **flags)
        return [(m.body, m.state) for m in page.messages]

    # Order is (visible_at, key): "free" (t0), "held" (t0+30, its lease), "delayed" (t0+50).
    assert await states() == [(b"free", MessageState.VISIBLE)]
    assert await states(include_leased=True) == [
        (b"free", MessageState.VISIBLE),
        (b"held", MessageState.LEASED),
    ]
    assert await states(include_delayed=True) == [
        (b"free", MessageState.VISIBLE),
        (b"delayed", MessageState.DELAYED),
    ]
    clock.advance(50)
    assert await states() == [
        (b"free", MessageState.VISIBLE),
        (b"held", MessageState.VISIBLE),
        (b"delayed", MessageState.VISIBLE),
    ]


async def test_peeked_fields(store: Store, clock) -> None:
    await make_queue(store, Q, message_retention=500.0)
    t0 = clock.now()
    await send(store, Q, "m", attributes={"a": "1"}, channel="c", delay=5.0)
    [peeked] = await peek_all(store, Q)
    assert peeked.body == b"m"
    assert peeked.attributes == {"a": "1"}
    assert peeked.channel == "c"
    assert (peeked.enqueued_at, peeked.visible_at, peeked.expires_at) == (
        at(t0),
        at(t0 + 5.0),
        at(t0 + 500.0),
    )
    assert (peeked.delivery_count, peeked.last_error, peeked.state) == (0, "", MessageState.DELAYED)


async def test_peek_by_channel(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", channel="x.1")
    await send(store, Q, "b", channel="y")
    await send(store, Q, "c", channel="x.2")
    assert bodies((await store.peek(Q, 10, channel_filter="x.*")).messages) == [b"a", b"c"]
    assert bodies((await store.peek(Q, 10, channel_filter="y")).messages) == [b"b"]


async def test_peek_pages_with_a_cursor(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, *[f"m{i}" for i in range(5)])
    seen: list[bytes] = []
    cursor = None
    pages = 0
    while True:
        page = await store.peek(Q, 2, after=cursor)
        seen += bodies(page.messages)
        pages += 1
        if page.next_cursor is None:
            break
        last = page.messages[-1]
        assert tuple(page.next_cursor) == (at(last.visible_at), last.key)
        cursor = page.next_cursor
    assert (seen, pages) == ([f"m{i}".encode() for i in range(5)], 3)


async def test_a_full_last_page_has_no_cursor(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a", "b", "c", "d")
    first = await store.peek(Q, 2)
    assert first.next_cursor is not None
    second = await store.peek(Q, 2, after=first.next_cursor)
    assert (bodies(second.messages), second.next_cursor) == ([b"c", b"d"], None)
