"""The SQLite store: the embedded default backend, one durable file.

Semantics are base.py's, to the letter; this module only decides how to get them from SQLite
fast and durably.

Where the work runs, and group commit
------------------------------------
One writer (`_Writer`, writer.py) owns the only writing connection. An async method turns its
work into a function of the connection, queues it and awaits a future. The writer takes every
operation waiting (up to a bound), runs them all in ONE transaction, each but the first inside
its own SAVEPOINT so that a failing operation rolls back only itself (the first needs none:
undoing it is rolling back the transaction so far, which holds nothing else; `_Writer._run_first`
says why that saves a journal), COMMITs once and then resolves the futures. With
``synchronous=FULL`` the COMMIT is the fsync, so sixteen concurrent sends cost about one fsync
instead of sixteen, and every future resolves only after its work is on disk. Groups of light
operations (the usual sends, receives and acks) run on the event loop itself, which measured
far cheaper than handing each to a thread and back; heavy ones (big batches, purges, redrives,
migrations) and any wait for another process's lock run on the writer's thread, so the loop is
never held for long (writer.py says why and what was measured). One group at a time: no locking
questions. Reads go through the writer too (every operation on a queue starts with the expiry
sweep, a write), except the long scans of stats and peek, which have a read connection of their
own (reader.py).

Schema
------
- ``queues``: a small integer id (what the other tables reference: compact index entries; never
  reused thanks to AUTOINCREMENT, so stale rows of a deleted queue can never be mistaken for a
  new queue's), the name, the receipt uid, one column per QueueConfig field and the counters.
- ``messages``: ``key`` is the INTEGER PRIMARY KEY AUTOINCREMENT, i.e. the rowid: "the message of
  this receipt" is a primary key lookup, and keys are never reused, so a receipt of a deleted
  message can never match a newer message. Indexes:
    messages_visible (queue, visible_at, key, leased)
                                                  receive / peek / redrive: an index range scan in
                                                  delivery order that stops at visible_at <= now, so
                                                  leased messages at the head are never scanned;
                                                  live leases (in-flight limit, retry_at): its
                                                  range after now, read from the index alone
    messages_expiry  (queue, lifetime, expires_at)
                                                  the expiry sweep before every operation, and
                                                  stats' oldest visible message of each lifetime
                                                  class (schema version 5; see schema.py)
    messages_attempt (queue, attempt_id) WHERE attempt_id IS NOT NULL
                                                  receive attempts, delete by attempt id
    messages_channel (queue, channel, visible_at) WHERE channel != ''
                                                  exact channel filters; partial, so queues that
                                                  do not use channels pay nothing for it
    messages_enqueued (queue, enqueued_at) WHERE lifetime = 0
                                                  stats: the oldest visible message of class 0
- ``channel_counts`` (queue, channel, total): how many messages each channel of a queue holds,
  kept by every operation that adds or removes messages, so that stats read only the leased and
  delayed messages (the messages_visible range after now) instead of the whole queue, however
  long the backlog (schema version 3).
- ``lifetimes`` (queue, lifetime): the lifetime classes each queue's messages use (at most
  MAX_LIFETIMES above 0 per queue), which the sweep and stats walk (schema version 5).
- ``tombstones`` (key, last_key, queue, receipt_seq, deleted_at): one row per run of consecutive
  keys that one operation deleted with one receipt_seq (schema version 2; see schema.py).
- ``tombstones``, ``dedup`` and ``attempts`` are rows whose
  meaning is bounded by a time condition checked on every read; a periodic housekeeping step
  deletes the stale ones, so its timing is invisible.
- ``meta``: the schema version and the receipt signing key (kept in the file, so receipts stay
  valid across restarts).

One store per file
------------------
Only this store's writer writes the file (other processes may read it, WAL allows that),
which lets the writer keep a little state of its own: an upper bound on each queue's live
leases, so that a receive far below max_in_flight skips counting them (see
`_Tx._delivery_limit`).
"""

from __future__ import annotations

from .schema import SCHEMA_VERSION
from .store import SqliteStore
from .transaction import HOUSEKEEPING_SECONDS, PICK_READ_AHEAD

__all__ = ["HOUSEKEEPING_SECONDS", "PICK_READ_AHEAD", "SCHEMA_VERSION", "SqliteStore"]
