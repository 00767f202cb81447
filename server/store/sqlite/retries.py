"""SqliteStore's retry policy and dead-lettering on request, run by the writer inside an
operation's transaction (`_Tx`): turning ended leases into delays until their redelivery, and
moving messages to the dead letter queue by receipt (DeadLetterMessages)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...domain import leases as decide
from ...domain.types import DeadLetterOutcome
from ...errors import NoDeadLetterQueue
from .groups import Groups
from .reads import Decoded
from .schema import BACKOFF_ENDED_SQL, _Candidate, _chunks

if TYPE_CHECKING:
    from .transaction import _Queue, _Tx


class Retries:
    """The retry-policy and dead-letter work of one operation's transaction."""

    def __init__(self, tx: _Tx) -> None:
        self.tx = tx

    def end_backoff_leases(self, found: _Queue) -> None:
        """Leases that ended by now and end with the queue's backoff (base.py: before every
        operation reads the queue): each message becomes a delay until its redelivery."""
        rows = self.tx.conn.execute(BACKOFF_ENDED_SQL, (found.id, self.tx.now)).fetchall()
        if not rows:
            return
        self.tx.conn.executemany(
            "UPDATE messages SET visible_at = ?, leased = 0, backoff = 0 WHERE key = ?",
            [
                (decide.redelivery_at(lease_end, count, found.config), key)
                for key, lease_end, count in rows
            ],
        )
        if found.config.grouped:  # the groups' ready_at follow their messages' visible_at
            groups = Groups(self.tx, found)
            groups.refresh(groups.of_keys(key for key, _, _ in rows))

    def move_to_dead_letter_queue(self, found: _Queue, dlq: _Queue, rows: list[_Candidate]) -> None:
        """Move these messages of found to its dead letter queue dlq (base.py's dead letters)."""
        tx = self.tx
        retention = dlq.config.message_retention
        # expires_at = enqueued_at + retention: class `retention` (or 0, see _lifetime_classes).
        lifetime = tx._lifetime_classes(dlq.id, [retention])[retention]
        tx._move_counts([(row.key, found.id, dlq.id) for row in rows])
        tx.conn.executemany(
            "UPDATE messages SET queue = ?, visible_at = ?, leased = 0, backoff = 0, expires_at = ?,"
            " lifetime = ?, receipt_seq = receipt_seq + 1, source_queue = ?, attempt_id = NULL"
            " WHERE key = ?",
            [
                (
                    dlq.id,
                    tx.now,
                    decide.dead_letter_expiry(row.enqueued_at, dlq.config),
                    lifetime,
                    found.name,
                    row.key,
                )
                for row in rows
            ],
        )
        tx.conn.execute(
            "UPDATE queues SET dead_lettered_total = dead_lettered_total + ? WHERE id = ?",
            (len(rows), found.id),
        )

    def dead_letter(
        self, name: str, receipts: list[str], reason: str, predecoded: Decoded | None
    ) -> DeadLetterOutcome:
        tx = self.tx
        found = tx.queue(name)
        dlq = tx._dead_letter_target(found)
        if dlq is None:
            raise NoDeadLetterQueue(name)
        decoded = tx._decode(found, receipts, predecoded)
        leases, tombstones = tx._lookup(found, decoded)
        results, moved = decide.apply_dead_letters(receipts, decoded, leases, tombstones, tx.now)
        if moved:
            rows: list[_Candidate] = []
            for chunk in _chunks(moved):
                rows += [
                    _Candidate(key, 0.0, 0, enqueued_at, 0)
                    for key, enqueued_at in tx.conn.execute(
                        "SELECT key, enqueued_at FROM messages"
                        f" WHERE key IN ({', '.join('?' * len(chunk))})",
                        list(chunk),
                    )
                ]
            groups = Groups(tx, found)
            touched = groups.of_keys(moved)
            self.move_to_dead_letter_queue(found, dlq, rows)
            Groups(tx, dlq).refresh(touched)
            groups.refresh(touched)
            if reason:
                tx.conn.executemany(
                    "UPDATE messages SET last_error = ? WHERE key = ?",
                    [(reason, key) for key in moved],
                )
        return DeadLetterOutcome(results, moved, dlq.name)
