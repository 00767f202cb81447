"""Tombstones as runs (schema.py, version 3): one row per run of consecutive keys deleted by one
statement with one receipt_seq, and every answer the same as with one row per key."""

from __future__ import annotations

from leaseq.server.domain.types import LeaseStatus, NewMessage, QueueConfig, VisibilityChange
from leaseq.server.store.postgres import PostgresStore
from tests.support.postgres import connect


def _runs(schema: str) -> set[tuple[int, int, int]]:
    """(first key, last key, receipt_seq) of every tombstone row."""
    with connect() as conn:
        rows = conn.execute(
            f'SELECT key, COALESCE(last_key, key), receipt_seq FROM "{schema}".tombstones'
        ).fetchall()
    return set(rows)


async def test_an_ack_of_a_batch_received_together_writes_one_tombstone(
    store: PostgresStore, schema: str
) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"m") for _ in range(100)])
    got = (await store.receive("q", 100, 60.0)).messages
    keys = [m.key for m in got]
    assert keys == list(range(keys[0], keys[0] + 100))  # one send: consecutive keys
    outcome = await store.delete("q", [m.receipt for m in reversed(got)])
    assert all(r.status is LeaseStatus.OK for r in outcome.results)
    assert _runs(schema) == {(keys[0], keys[-1], 1)}
    again = await store.delete("q", [m.receipt for m in got])
    assert {r.status for r in again.results} == {LeaseStatus.ALREADY_DELETED}
    assert (await store.stats("q")).deleted_total == 100


async def test_runs_split_at_gaps_and_at_another_receipt_seq(
    store: PostgresStore, schema: str
) -> None:
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=str(i).encode()) for i in range(10)])
    first = (await store.receive("q", 10, 60.0)).messages
    k = [m.key for m in first]
    # The fourth is let go and delivered again: its receipt_seq is 2, the others' 1.
    await store.change_visibility("q", [VisibilityChange(first[3].receipt, 0.0)])
    [again] = (await store.receive("q", 1, 60.0)).messages
    assert again.key == k[3]
    # Acked: 0-2 (seq 1), 3 (seq 2), 4, 6-7 (seq 1); 5, 8, 9 stay leased.
    acked = [first[0], first[1], first[2], again, first[4], first[6], first[7]]
    outcome = await store.delete("q", [m.receipt for m in acked])
    assert all(r.status is LeaseStatus.OK for r in outcome.results)
    assert _runs(schema) == {(k[0], k[2], 1), (k[3], k[3], 2), (k[4], k[4], 1), (k[6], k[7], 1)}

    # Every first receipt again: the deleted ones answer ALREADY_DELETED, the superseded one
    # RECEIPT_SUPERSEDED (its run has another seq), the messages in the gaps are deleted now.
    outcome = await store.delete("q", [m.receipt for m in first])
    assert [r.status for r in outcome.results] == [
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.RECEIPT_SUPERSEDED,
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.OK,
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.OK,
        LeaseStatus.OK,
    ]
    assert _runs(schema) >= {(k[5], k[5], 1), (k[8], k[9], 1)}
    assert len(_runs(schema)) == 6
    assert (await store.delete("q", [again.receipt])).results[0].status is (
        LeaseStatus.ALREADY_DELETED
    )
    # Lease changes look at the same runs.
    [changed] = await store.change_visibility("q", [VisibilityChange(first[9].receipt, 5.0)])
    assert changed.status is LeaseStatus.ALREADY_DELETED
    stats = await store.stats("q")
    assert (stats.total, stats.deleted_total) == (0, 10)


async def test_the_transaction_way_writes_runs_too(store: PostgresStore, schema: str) -> None:
    """Acks by receive attempt (DELETE_ATTEMPT_SQL) and by key after a fence check
    (DELETE_KEYS_SQL) run delete_sql, which writes runs as the one-statement ack does."""
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"m") for _ in range(6)])
    batch = (await store.receive("q", 4, 60.0, attempt_id="a1")).messages
    rest = (await store.receive("q", 2, 60.0)).messages
    outcome = await store.delete("q", [], attempt_ids=["a1"])
    assert outcome.attempt_counts == [("a1", 4)]
    # Receipts together with an attempt id go the transaction way (DELETE_KEYS_SQL).
    outcome = await store.delete("q", [m.receipt for m in rest], attempt_ids=["none"])
    assert [r.status for r in outcome.results] == [LeaseStatus.OK, LeaseStatus.OK]
    assert _runs(schema) == {(batch[0].key, batch[-1].key, 1), (rest[0].key, rest[-1].key, 1)}
    again = await store.delete("q", [m.receipt for m in batch + rest])
    assert {r.status for r in again.results} == {LeaseStatus.ALREADY_DELETED}


async def test_a_key_past_the_end_of_the_run_before_it_has_no_tombstone(
    store: PostgresStore, schema: str
) -> None:
    """The run with the greatest first key <= a key holds it only if it reaches it. A purge
    leaves no tombstone: the receipts of purged messages answer MESSAGE_NOT_FOUND."""
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(body=b"m") for _ in range(3)])
    got = (await store.receive("q", 3, 60.0)).messages
    await store.delete("q", [got[0].receipt])
    assert _runs(schema) == {(got[0].key, got[0].key, 1)}
    assert await store.purge_queue("q") == 2
    outcome = await store.delete("q", [m.receipt for m in got])
    assert [r.status for r in outcome.results] == [
        LeaseStatus.ALREADY_DELETED,
        LeaseStatus.MESSAGE_NOT_FOUND,
        LeaseStatus.MESSAGE_NOT_FOUND,
    ]
