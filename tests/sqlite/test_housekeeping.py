"""Stale tombstone, dedup and attempt rows are deleted in the background of later operations;
what they answer is decided by their time conditions alone, so the timing never shows."""

from __future__ import annotations

from pathlib import Path

from leaseq.server.clock import FakeClock
from leaseq.server.domain.limits import TOMBSTONE_SECONDS
from leaseq.server.domain.types import LeaseStatus, NewMessage, QueueConfig
from leaseq.server.store.sqlite import HOUSEKEEPING_SECONDS, SqliteStore

from .conftest import read_only


def _rows(path: Path) -> dict[str, int]:
    with read_only(path) as conn:
        return {
            table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for table in ("tombstones", "dedup", "attempts")
        }


async def test_old_rows_go_and_answers_do_not_change(
    store: SqliteStore, db_path: Path, clock: FakeClock
) -> None:
    await store.create_queue("q", QueueConfig(dedup_window=3000.0))
    [sent] = await store.send("q", [NewMessage(b"m", dedup_id="d")])
    [message] = (await store.receive("q", 1, visibility_timeout=30.0, attempt_id="a")).messages
    await store.delete("q", [message.receipt])
    assert _rows(db_path) == {"tombstones": 1, "dedup": 1, "attempts": 1}

    # Within the hour the tombstone answers; the dedup window (50 min) has passed already.
    clock.advance(TOMBSTONE_SECONDS)
    outcome = await store.delete("q", [message.receipt])
    assert outcome.results[0].status is LeaseStatus.ALREADY_DELETED
    [again] = await store.send("q", [NewMessage(b"m2", dedup_id="d")])
    assert not again.duplicate and again.message_id != sent.message_id

    # After it, the answer is MESSAGE_NOT_FOUND whether or not the row is still there...
    clock.advance(1.0)
    outcome = await store.delete("q", [message.receipt])
    assert outcome.results[0].status is LeaseStatus.MESSAGE_NOT_FOUND
    # ...and an operation after the next housekeeping round has removed the stale rows (the
    # dedup record of the second send is still inside its window).
    clock.advance(HOUSEKEEPING_SECONDS)
    await store.stats("q")
    assert _rows(db_path) == {"tombstones": 0, "dedup": 1, "attempts": 0}
