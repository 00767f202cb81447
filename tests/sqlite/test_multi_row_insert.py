"""Sends insert their rows with multi-row INSERT statements (schema.INSERT_ROWS): every message of
a batch is written once, in order (consecutive keys, each row with its own message id, body and
fields), whatever the batch's size and however it is cut into statements."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import NewMessage, QueueConfig
from leaseq.server.store.sqlite import SqliteStore
from leaseq.server.store.sqlite.schema import INSERT_ROWS
from leaseq.server.store.sqlite.sending import _statements

from .conftest import read_only


@given(st.integers(min_value=0, max_value=2_500))
def test_statements_cover_every_row_once_in_order(rows: int) -> None:
    cuts = list(_statements(rows))
    covered = [row for start, count in cuts for row in range(start, start + count)]
    assert covered == list(range(rows))
    assert all(count in INSERT_ROWS for _, count in cuts)
    # Largest shapes first: at most 9 statements of each smaller shape.
    assert all(sum(1 for _, count in cuts if count == size) < 10 for size in INSERT_ROWS[1:])


def _rows(path: Path) -> list[tuple]:
    with read_only(path) as conn:
        return conn.execute(
            "SELECT key, message_id, body, attributes, channel, enqueued_at, expires_at,"
            " visible_at FROM messages ORDER BY key"
        ).fetchall()


async def test_plain_bodies_of_a_batch_across_statement_shapes(
    store: SqliteStore, db_path: Path, clock: FakeClock
) -> None:
    config = QueueConfig(message_retention=600.0, default_delay=5.0)
    await store.create_queue("q", config)
    bodies = [f"m{i}".encode() for i in range(123)]  # 100 + 2 x 10 + 3 x 1
    ids = await store.send_bodies("q", bodies)
    rows = _rows(db_path)
    now = clock.now()
    assert [row[1] for row in rows] == ids
    assert len(set(ids)) == len(ids)
    assert [row[2] for row in rows] == bodies
    keys = [row[0] for row in rows]
    assert keys == list(range(keys[0], keys[0] + len(bodies)))
    assert {row[3:] for row in rows} == {(None, "", now, now + 600.0, now + 5.0)}


async def test_messages_with_fields_across_statement_shapes(
    store: SqliteStore, db_path: Path, clock: FakeClock
) -> None:
    await store.create_queue("q", QueueConfig(message_retention=600.0))
    messages = [
        NewMessage(
            f"m{i}".encode(),
            attributes={"i": str(i)} if i % 3 else {},
            channel="c" if i % 2 else "",
            delay=float(i % 4) if i % 5 else None,
            ttl=float(60 + i) if i % 7 else None,
        )
        for i in range(112)
    ]
    outcomes = await store.send("q", messages)
    rows = _rows(db_path)
    now = clock.now()
    assert [row[1] for row in rows] == [o.message_id for o in outcomes]
    for m, (_, _, body, attributes, channel, enqueued_at, expires_at, visible_at) in zip(
        messages, rows
    ):
        assert body == m.body
        assert attributes == (f'{{"i":"{m.attributes["i"]}"}}' if m.attributes else None)
        assert channel == m.channel
        assert enqueued_at == now
        assert expires_at == now + (600.0 if m.ttl is None else m.ttl)
        assert visible_at == now + (m.delay or 0.0)
