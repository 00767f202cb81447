"""SqliteStore's sends, run by the writer inside an operation's transaction (`_Tx`): the
messages' rows, the dedup records, the lifetime classes and channel counts they add."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from itertools import chain, compress
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ...domain import leases as decide
from ...domain.groups import stored_group
from ...domain.rules import new_message_ids
from ...domain.types import NewMessage, SendOutcome
from .groups import Groups
from .schema import (
    COUNT_CHANNEL_SQL,
    INSERT_ROWS,
    _chunks,
    _encode_attributes,
    insert_bodies_sql,
    insert_rows_sql,
)

if TYPE_CHECKING:
    from .transaction import _Queue, _Tx

_BODY = attrgetter("body")


def _statements(rows: int) -> Iterator[tuple[int, int]]:
    """(first row, row count) of each multi-row INSERT for `rows` rows, in order: as many of
    INSERT_ROWS[0] rows as fit, then of the next size, down to single rows."""
    start = 0
    for size in INSERT_ROWS:
        while rows - start >= size:
            yield start, size
            start += size


@functools.cache
def _insert_dedup_sql(verb: str, count: int) -> str:
    """`verb` INTO dedup of `count` records (as many rows per statement as the messages'
    INSERT: one executemany step per row cost three times as much): parameters ?1, ?2 are the
    queue and `until` they share, then a dedup_id and a message_id per record."""
    rows = ", ".join(f"(?1, ?{3 + 2 * i}, ?{4 + 2 * i}, ?2)" for i in range(count))
    return f"{verb} INTO dedup (queue, dedup_id, message_id, until) VALUES {rows}"


def _plain(message: NewMessage) -> bool:
    """Only a body: no attributes, channel, delay, ttl or dedup id (send's fast path)."""
    return (
        not message.attributes
        and not message.channel
        and message.delay is None
        and message.ttl is None
        and not message.dedup_id
        and not message.group
    )


class Sends:
    """The sends of one operation's transaction."""

    def __init__(self, tx: _Tx) -> None:
        self.tx = tx

    def send(self, name: str, messages: list[NewMessage]) -> list[SendOutcome]:
        found = self.tx.queue(name)
        config, now = found.config, self.tx.now
        if not config.grouped and all(_plain(m) for m in messages):
            return [SendOutcome(i) for i in self._insert_bodies(found, list(map(_BODY, messages)))]
        known = self._live_dedup(found, {m.dedup_id for m in messages if m.dedup_id})
        outcomes: list[SendOutcome] = []
        rows: list[tuple[Any, ...]] = []
        records: list[tuple[Any, ...]] = []
        ids = new_message_ids(len(messages))
        classes = self.tx._lifetime_classes(
            found.id, [config.message_retention if m.ttl is None else m.ttl for m in messages]
        )
        for index, m in enumerate(messages):
            if m.dedup_id and m.dedup_id in known:
                outcomes.append(SendOutcome(known[m.dedup_id], duplicate=True))
                continue
            message_id = ids[index]
            visible_at, expires_at = decide.send_times(now, m.delay, m.ttl, config)
            ttl = config.message_retention if m.ttl is None else m.ttl
            rows.append(
                (
                    found.id,
                    message_id,
                    m.body,
                    _encode_attributes(m.attributes),
                    m.channel,
                    now,
                    expires_at,
                    visible_at,
                    classes[ttl],
                    stored_group(m.group, config),
                )
            )
            outcomes.append(SendOutcome(message_id))
            if m.dedup_id:
                # A repeat later in this batch is a duplicate whatever the window (base.py)...
                known[m.dedup_id] = message_id
                # ...but a zero window leaves no record.
                until = decide.dedup_until(now, config)
                if until is not None:
                    records.append((found.id, m.dedup_id, message_id, until))
        keys = iter(self._insert_rows(rows))
        for outcome in outcomes:
            if not outcome.duplicate:
                outcome.key = next(keys)
        self.tx._count(found.id, [row[4] for row in rows], 1)
        if config.grouped:
            Groups(self.tx, found).sent([(row[9], row[7]) for row in rows])
        if records:
            self.tx.conn.executemany(
                "INSERT OR REPLACE INTO dedup (queue, dedup_id, message_id, until)"
                " VALUES (?, ?, ?, ?)",
                records,
            )
        return outcomes

    def send_bodies(self, name: str, bodies: list[bytes]) -> list[str]:
        """send() of messages that are only a body: their message ids."""
        return self._insert_bodies(self.tx.queue(name), bodies)

    def send_keyed(
        self, name: str, bodies: list[bytes], dedup_ids: list[str]
    ) -> tuple[list[str], list[int]]:
        """send() of messages that are only a body and a dedup id ("" for none): their message
        ids (a duplicate's is its original's) and the indexes of the duplicates. The dedup ids
        are looked up and recorded as a set per batch; a batch with no duplicate (write_queue's
        usual one) makes no Python object per message but its ids."""
        found = self.tx.queue(name)
        now, window = self.tx.now, found.config.dedup_window
        named = dedup_ids if all(dedup_ids) else [d for d in dedup_ids if d]
        unique = set(named)
        if window > 0 and len(unique) == len(named):
            sent = self._send_unseen(found, bodies, dedup_ids, named)
            if sent is not None:
                return sent, []
        stored = self._dedup_records(found, unique)
        live = {d: message_id for d, (message_id, until) in stored.items() if until > now}
        # A record whose window ended may still be there (the sweep removes them in slices):
        # only then must the insert replace.
        verb = "INSERT OR REPLACE" if len(stored) > len(live) else "INSERT"
        if not live and len(unique) == len(named):
            duplicates: list[int] = []
            message_ids = self._insert_bodies(found, bodies)
            recorded = message_ids if named is dedup_ids else list(compress(message_ids, dedup_ids))
        else:
            message_ids, duplicates, named, recorded = self._insert_keyed(
                found, bodies, dedup_ids, live
            )
        # A zero window leaves no record (now < now + 0 never holds), as in send().
        if window > 0 and named:
            self._insert_dedup(verb, found, named, recorded)
        return message_ids, duplicates

    def _send_unseen(
        self, found: _Queue, bodies: list[bytes], dedup_ids: list[str], named: list[str]
    ) -> list[str] | None:
        """send_keyed's usual batch (distinct dedup ids, none of them sent before): the records
        go in first, INSERT OR IGNORE; when every one went in, the queue kept no record of any
        of these ids, live or not, and the messages follow: no lookup (it cost a fifth of the
        keyed send). Else that is undone and the answer is None: look them up."""
        message_ids = new_message_ids(len(bodies))
        recorded = message_ids if named is dedup_ids else list(compress(message_ids, dedup_ids))
        self.tx.conn.execute("SAVEPOINT unseen")
        before = self.tx.conn.total_changes
        self._insert_dedup("INSERT OR IGNORE", found, named, recorded)
        if self.tx.conn.total_changes - before != len(named):
            self.tx.conn.execute("ROLLBACK TO unseen")
            self.tx.conn.execute("RELEASE unseen")
            return None
        self.tx.conn.execute("RELEASE unseen")
        self._insert_bodies(found, bodies, message_ids)
        return message_ids

    def _insert_dedup(
        self, verb: str, found: _Queue, dedup_ids: list[str], message_ids: list[str]
    ) -> None:
        shared = [found.id, self.tx.now + found.config.dedup_window]
        # dedup_id, message_id of each record in turn, flattened in C.
        values = list(chain.from_iterable(zip(dedup_ids, message_ids)))
        for start, count in _statements(len(dedup_ids)):
            self.tx.conn.execute(
                _insert_dedup_sql(verb, count),
                shared + values[2 * start : 2 * (start + count)],  # type: ignore[operator]
            )

    def _insert_keyed(
        self, found: _Queue, bodies: list[bytes], dedup_ids: list[str], known: dict[str, str]
    ) -> tuple[list[str], list[int], list[str], list[str]]:
        """send_keyed's batch with duplicates, message by message: (message ids, indexes of the
        duplicates, dedup ids to record, their message ids). A repeat later in the batch is a
        duplicate of the earlier entry whatever the window (base.py)."""
        message_ids: list[str] = []
        duplicates: list[int] = []
        kept: list[int] = []
        for index, dedup_id in enumerate(dedup_ids):
            if dedup_id in known:
                duplicates.append(index)
            else:
                kept.append(index)
                if dedup_id:
                    known[dedup_id] = ""  # this batch's: its message id is drawn below
            message_ids.append(dedup_id)
        fresh = iter(self._insert_bodies(found, [bodies[index] for index in kept]))
        named: list[str] = []
        recorded: list[str] = []
        for index in kept:
            dedup_id, message_ids[index] = message_ids[index], next(fresh)
            if dedup_id:
                known[dedup_id] = message_ids[index]
                named.append(dedup_id)
                recorded.append(message_ids[index])
        for index in duplicates:
            message_ids[index] = known[message_ids[index]]
        return message_ids, duplicates, named, recorded

    def _dedup_records(self, found: _Queue, dedup_ids: set[str]) -> dict[str, tuple[str, float]]:
        """dedup_id -> (message_id, until) of the records kept, inside their window or not."""
        records: dict[str, tuple[str, float]] = {}
        for chunk in _chunks(list(dedup_ids)):
            marks = ", ".join("?" * len(chunk))
            for dedup_id, message_id, until in self.tx.conn.execute(
                "SELECT dedup_id, message_id, until FROM dedup"
                f" WHERE queue = ? AND dedup_id IN ({marks})",
                (found.id, *chunk),
            ):
                records[dedup_id] = (message_id, until)
        return records

    def _insert_bodies(
        self, found: _Queue, bodies: list[bytes], message_ids: list[str] | None = None
    ) -> list[str]:
        """The rows of messages that are only a body (the common batch), as send() writes
        them, built column by column in C (zip, repeat) instead of a tuple per message in
        Python: their message ids (drawn here unless given)."""
        config, now = found.config, self.tx.now
        if message_ids is None:
            message_ids = new_message_ids(len(bodies))
        retention = config.message_retention
        lifetime = self.tx._lifetime_classes(found.id, [retention])[retention] if bodies else 0.0
        visible_at, expires_at = decide.send_times(now, None, None, config)
        shared = [found.id, now, expires_at, visible_at, lifetime]
        # message_id, body of each message in turn, flattened in C.
        values = list(chain.from_iterable(zip(message_ids, bodies)))
        for start, count in _statements(len(bodies)):
            self.tx.conn.execute(
                insert_bodies_sql(count),
                shared + values[2 * start : 2 * (start + count)],  # type: ignore[operator]
            )
        if bodies:
            self.tx.conn.execute(COUNT_CHANNEL_SQL, (found.id, "", len(bodies)))
        return message_ids

    def _insert_rows(self, rows: list[tuple[Any, ...]]) -> list[int]:
        """INSERT_MESSAGE_SQL's rows, a multi-row statement at a time (schema.INSERT_ROWS):
        their keys, in order (AUTOINCREMENT gives one statement's rows consecutive keys, the
        last one last_insert_rowid)."""
        values = list(chain.from_iterable(rows))
        keys: list[int] = []
        for start, count in _statements(len(rows)):
            last = self.tx.conn.execute(
                insert_rows_sql(count), values[10 * start : 10 * (start + count)]
            ).lastrowid
            assert last is not None
            keys.extend(range(last - count + 1, last + 1))
        return keys

    def _live_dedup(self, found: _Queue, dedup_ids: set[str]) -> dict[str, str]:
        """dedup_id -> original message_id, for the ids still inside their window."""
        known: dict[str, str] = {}
        for chunk in _chunks(sorted(dedup_ids)):
            marks = ", ".join("?" * len(chunk))
            known.update(
                self.tx.conn.execute(
                    "SELECT dedup_id, message_id FROM dedup"
                    f" WHERE queue = ? AND dedup_id IN ({marks}) AND until > ?",
                    (found.id, *chunk, self.tx.now),
                ).fetchall()
            )
        return known
