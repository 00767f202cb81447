"""Tombstones are kept as runs of consecutive keys (schema version 2): one row per run that one
operation deleted with one receipt_seq. Every key still answers exactly as base.py says, and a
file of version 1 (one row per key) is brought up to version 2 when opened."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import LeaseStatus, NewMessage, QueueConfig, VisibilityChange
from leaseq.server.store.sqlite import SCHEMA_VERSION, SqliteStore

from .conftest import read_only, rewrite_as_version_4


def _tombstone_rows(path: Path) -> list[tuple[int, ...]]:
    with read_only(path) as conn:
        return conn.execute(
            "SELECT key, last_key, receipt_seq FROM tombstones ORDER BY key"
        ).fetchall()


async def test_every_key_of_a_run_answers_for_itself(store: SqliteStore, db_path: Path) -> None:
    await store.create_queue("q", QueueConfig())
    await store.create_queue("other", QueueConfig())
    # Keys of q with a message of another queue in between: two runs, not one.
    await store.send("q", [NewMessage(b"a"), NewMessage(b"b"), NewMessage(b"c")])
    await store.send("other", [NewMessage(b"x")])
    await store.send("q", [NewMessage(b"d"), NewMessage(b"e")])
    first = (await store.receive("q", 5, visibility_timeout=30.0)).messages
    # "c" is released and delivered again: its receipt_seq is 2, the others' 1.
    await store.change_visibility("q", [VisibilityChange(first[2].receipt, 0.0)])
    [again] = (await store.receive("q", 1, visibility_timeout=30.0)).messages
    assert again.key == first[2].key
    current = [m.receipt for m in first[:2] + [again] + first[3:]]

    outcome = await store.delete("q", current)
    assert [r.status for r in outcome.results] == [LeaseStatus.OK] * 5
    # a,b (seq 1) | c (seq 2) | d,e (seq 1, after the other queue's key)
    assert [(last - key + 1, seq) for key, last, seq in _tombstone_rows(db_path)] == [
        (2, 1),
        (1, 2),
        (2, 1),
    ]

    again_outcome = await store.delete("q", current + [first[2].receipt])
    assert [r.status for r in again_outcome.results] == [LeaseStatus.ALREADY_DELETED] * 5 + [
        LeaseStatus.RECEIPT_SUPERSEDED
    ]
    # The other queue's message, whose key lies between two runs of q, is untouched.
    [x] = (await store.receive("other", 1, visibility_timeout=30.0)).messages
    assert x.body == b"x"
    assert (await store.delete("other", [x.receipt])).results[0].status is LeaseStatus.OK
    # A receipt of q's deleted message is not q's on the other queue: no tombstone answers there.
    [wrong_queue] = (await store.delete("other", [current[0]])).results
    assert wrong_queue.status is LeaseStatus.INVALID_RECEIPT


def _rewrite_as_version_1(path: Path) -> None:
    """The file as version 1 wrote it: one tombstone row per deleted key, and none of version
    3's message counts."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        runs = conn.execute(
            "SELECT key, last_key, queue, receipt_seq, deleted_at FROM tombstones"
        ).fetchall()
        conn.execute("BEGIN")
        rewrite_as_version_4(conn)
        conn.execute("DROP TABLE channel_counts")
        conn.execute("DROP INDEX messages_enqueued")
        conn.execute("DROP TABLE tombstones")
        conn.execute(
            "CREATE TABLE tombstones (key INTEGER PRIMARY KEY, queue INTEGER NOT NULL,"
            " receipt_seq INTEGER NOT NULL, deleted_at REAL NOT NULL)"
        )
        conn.execute("CREATE INDEX tombstones_age ON tombstones (deleted_at)")
        conn.executemany(
            "INSERT INTO tombstones VALUES (?, ?, ?, ?)",
            [
                (key, queue, seq, deleted_at)
                for first, last, queue, seq, deleted_at in runs
                for key in range(first, last + 1)
            ],
        )
        conn.execute("UPDATE meta SET value = 1 WHERE name = 'schema_version'")
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_a_version_1_file_is_migrated_and_its_tombstones_still_answer(
    db_path: Path, clock: FakeClock
) -> None:
    store = SqliteStore(db_path, clock=clock)
    await store.open()
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(b"%d" % i) for i in range(4)])
    messages = (await store.receive("q", 4, visibility_timeout=30.0)).messages
    receipts = [m.receipt for m in messages]
    await store.delete("q", receipts[:3])
    await store.close()
    _rewrite_as_version_1(db_path)
    with read_only(db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM tombstones").fetchone()[0] == 3

    reopened = SqliteStore(db_path, clock=clock)
    await reopened.open()
    try:
        assert (await reopened.stats("q")).leased == 1  # counted from the file by the migration
        outcome = await reopened.delete("q", receipts)
        assert [r.status for r in outcome.results] == [LeaseStatus.ALREADY_DELETED] * 3 + [
            LeaseStatus.OK
        ]
    finally:
        await reopened.close()
    with read_only(db_path) as conn:
        version = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        assert int(version[0]) == SCHEMA_VERSION == 7
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(tombstones)")}
        assert "tombstones_age" in indexes
    # The migrated rows (one key each) and the new delete's run, side by side.
    assert [(last - key + 1) for key, last, _ in _tombstone_rows(db_path)] == [1, 1, 1, 1]


@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=40), st.integers(min_value=0, max_value=2)),
        unique_by=lambda pair: pair[0],
    )
)
def test_runs_of_a_delete_cover_exactly_its_keys(deleted) -> None:
    """_runs (one tombstone row per run) against the plain definition: every deleted key is in
    exactly one run, with its seq, and runs of one seq never touch (else they would be one)."""
    from leaseq.server.store.sqlite.schema import _runs

    runs = _runs(deleted)
    covered = {key: seq for first, last, seq in runs for key in range(first, last + 1)}
    assert covered == dict(deleted)
    assert sum(last - first + 1 for first, last, _ in runs) == len(deleted)
    for (_, last, seq), (first, _, next_seq) in zip(runs, runs[1:]):
        assert first > last and not (first == last + 1 and seq == next_seq)
