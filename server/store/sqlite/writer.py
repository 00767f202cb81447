"""The writer: the one connection that writes the file, and group commit (see the package
docstring).

Where a group runs
------------------
A group of light operations (the usual sends, receives and acks: each of weight at most
INLINE_WEIGHT) runs on the event loop itself, its COMMIT (the fsync) included; anything heavier
(a batch of 10,000 messages, a purge, a redrive, opening and migrating the file) runs alone on
the writer's thread while the loop goes on serving. One group at a time either way: the next
starts only when the last has committed, so the connection is never used by two threads at once.

Why on the loop: handing each operation to a thread and its result back cost more than the
work. sqlite3 lets go of the GIL around every statement and takes it back after, so the
thread and the event loop passed the GIL to and fro several times per operation, each a pair
of context switches, and the kernel took a third of the server's CPU. Measured side by side with
`leaseq bench` (the figures in docs/performance.md, "Figures behind the code"), the loop serves
the cycle at batch 100 half as fast again and sends a fifth faster; statements on the loop with
only the COMMIT on the thread gained half as much on sends and lost a little on the cycle.

What it costs: while a light group runs, the loop does nothing else (10-20 ms at most:
INLINE_WEIGHT bounds a group's work), and a lock that another process holds on the file
must not make the loop wait for it: light groups start with busy_timeout 0 and, when the file
is locked, go to the thread, which waits there as long as BUSY_TIMEOUT_MS allows. Work that a
light operation finds only once it runs is bounded in time: SQLite's progress handler looks at
the clock every PROGRESS_STEPS instructions, and a group on the loop that runs past
MAX_LOOP_SECONDS is interrupted, undone and run again on the thread. That is the expiry sweep of
a big backlog that expired at once (`python -m leaseq.bench.expiry_stall`), a receive
whose channel prefix matches none of a long queue, a long run of messages to dead-letter.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from ...errors import Unavailable

T = TypeVar("T")

# A group stops growing at this many operations (or at INLINE_WEIGHT), so one commit never holds
# back the callers at the front of the line for too long.
MAX_GROUP_OPS = 512

INLINE_WEIGHT = 5_000
"""The heaviest operation (in messages or entries it touches) that runs on the event loop, and
the most weight a group on the loop gathers: a group of this weight holds the loop for about
10-20 ms. Heavier operations run alone on the writer's thread."""

HEAVY = INLINE_WEIGHT + 1
"""The weight of operations that run on the writer's thread whatever their size says: opening
and migrating the file, purges, queue deletes, redrives."""

MAX_LOOP_SECONDS = 0.05
"""The longest a group may hold the event loop: past it, SQLite interrupts the statement that
runs and the group runs again on the writer's thread (see the module docstring)."""

PROGRESS_STEPS = 20_000
"""SQLite virtual-machine instructions between two looks at the clock (a light send of 100
messages runs a few thousand: most groups never call back into Python for it)."""

BUSY_TIMEOUT_MS = 5_000
"""How long an operation on the writer's thread waits for a lock that another process (a
backup, the CLI) holds on the file, before it fails with UNAVAILABLE."""

SWITCH_INTERVAL = 0.0005
"""The interpreter's GIL switch interval (seconds) while a writer runs, at most: sqlite3 lets go
of the GIL around every step of a statement (each row of an executemany, each row a RETURNING
gives back) and must take it back before the next. While the event loop runs Python, each such
take waits for the event loop's switch interval (CPython's default: 5 ms), so work on the
writer's thread (heavy operations here, and the read connection's scans) could hardly overlap
the event loop's (`leaseq bench send --batch 100 --producers 2`, when every operation ran on the
thread: the figures in docs/performance.md)."""


@dataclass(eq=False)
class _Op:
    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    weight: int
    durable: bool = True  # False: a lease or an ack, which a relaxed writer need not fsync


_Outcome = tuple[_Op, Any, BaseException | None]


class _TransactionLost(Exception):
    """SQLite rolled the whole transaction back by itself (I/O error, disk full...)."""


class _Locked(Exception):
    """BEGIN found the file locked by another connection, and this group may not wait."""


class _OffTheLoop(Exception):
    """A group on the event loop ran past MAX_LOOP_SECONDS: undo it, run it on the thread."""


def _unavailable(error: BaseException) -> Unavailable:
    failure = Unavailable(f"SQLite store failed: {error}")
    failure.__cause__ = error
    return failure


def _is_busy(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF == 5  # type: ignore[no-any-return]  # SQLITE_BUSY and its extended codes
    return "locked" in str(error)


class _Writer:
    """Owns the SQLite connection and commits queued operations in groups.

    Operations run in submission order. Their futures resolve only after the COMMIT of their
    group, i.e. once the work is durable. Used from one event loop: the one that started it.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection], relaxed: bool = False) -> None:
        self._connect = connect
        # Relaxed durability: a group of leases and acks only commits without its own fsync
        # (synchronous=NORMAL). It is on disk at the next fsync'd commit: the WAL is one file
        # written in order, so that sync covers every frame before it. An OS crash or power
        # loss before then undoes those leases and acks (a redelivery, never a lost send); a
        # crash of this process alone undoes nothing (the OS holds what was written).
        self._relaxed = relaxed
        self._synchronous_full = True  # what the connection is set to (the connect's FULL)
        self.unsynced_commits = 0  # commits made without their own fsync (for tests)
        self._queue: deque[_Op] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leaseq-sqlite-writer")
        self._accepting = False
        self._running = False  # a group is running or scheduled: the next waits for it
        self._thread_busy = False  # that group runs on the writer's thread
        self._loop_deadline = 0.0  # when the group on the loop must give up the loop
        self._interrupted = False  # ... and SQLite was told to interrupt it
        self.moved_off_the_loop = 0  # groups that ran past MAX_LOOP_SECONDS (for tests)
        self._idle: asyncio.Future[None] | None = None  # what stop() waits for
        self.commits = 0
        self.operations = 0

    # -- the caller's side ---------------------------------------------------------------------

    async def start(self, setup: Callable[[sqlite3.Connection], T]) -> T:
        """Open the connection on the writer's thread and run `setup` (the schema, migrations)
        there. A failure to open the file reaches this caller as it is."""
        if sys.getswitchinterval() > SWITCH_INTERVAL:  # never raises a shorter one
            sys.setswitchinterval(SWITCH_INTERVAL)
        loop = self._loop = asyncio.get_running_loop()
        self._conn = await loop.run_in_executor(self._thread, self._connect)
        self._accepting = True
        return await self.submit(setup, HEAVY)

    def submit(
        self, fn: Callable[[sqlite3.Connection], T], weight: int = 1, durable: bool = True
    ) -> asyncio.Future[T]:
        """Queue fn(connection) as one operation; the future resolves after its group's COMMIT.
        `weight` is the messages or entries it touches (see INLINE_WEIGHT); `durable=False`
        marks a lease or an ack, which a relaxed writer commits without an fsync of its own."""
        loop = self._loop
        if not self._accepting or loop is None:
            raise Unavailable("the SQLite store is closed")
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append(_Op(fn, future, max(1, weight), durable))
        if not self._running:
            self._running = True
            # Not now: operations submitted in this turn of the loop join the same group.
            loop.call_soon(self._run_next)
        return future

    def waiting(self) -> int:
        """Operations queued behind the group that runs now."""
        return len(self._queue)

    def on_thread(self) -> bool:
        """Whether the group that runs now runs on the writer's thread."""
        return self._thread_busy

    async def stop(self) -> None:
        """Finish every operation queued so far, then close the connection and the thread."""
        loop = asyncio.get_running_loop()
        self._accepting = False
        if self._running:
            if self._idle is None:
                self._idle = loop.create_future()
            await asyncio.shield(self._idle)
        conn, self._conn = self._conn, None
        if conn is not None:
            await loop.run_in_executor(self._thread, conn.close)
        self._thread.shutdown(wait=False)

    # -- running groups (on the event loop) ----------------------------------------------------

    def _run_next(self) -> None:
        group = self._take_group()
        if not group:
            self._running = False
            if self._idle is not None and not self._idle.done():
                self._idle.set_result(None)
            return
        if group[0].weight > INLINE_WEIGHT:
            self._run_on_thread(group)
            return
        try:
            outcomes = self._run_group(group, on_loop=True)
        except _Locked:  # another process holds the file: wait on the thread, not here
            self._run_on_thread(group)
            return
        except _OffTheLoop:  # more work than the loop may do: all of it again, on the thread
            self.moved_off_the_loop += 1
            self._run_on_thread(group)
            return
        self._finish(outcomes)

    def _take_group(self) -> list[_Op]:
        """The next group: one heavy operation alone, or light ones in order up to the bounds.
        A caller cancelled before its turn does not want the side effects (e.g. leases that
        nobody would receive): its operation is dropped."""
        queue = self._queue
        group: list[_Op] = []
        weight = 0
        while queue and len(group) < MAX_GROUP_OPS:
            op = queue[0]
            if op.future.cancelled():
                queue.popleft()
                continue
            if op.weight > INLINE_WEIGHT:  # heavy: a group of its own
                if not group:
                    group.append(queue.popleft())
                break
            if weight + op.weight > INLINE_WEIGHT:
                break
            group.append(queue.popleft())
            weight += op.weight
        return group

    def _run_on_thread(self, group: list[_Op]) -> None:
        assert self._loop is not None
        self._thread_busy = True
        done = self._loop.run_in_executor(self._thread, self._run_group, group, False)
        done.add_done_callback(lambda _: self._finish_from_thread(done, group))

    def _finish_from_thread(self, done: asyncio.Future[list[_Outcome]], group: list[_Op]) -> None:
        self._thread_busy = False
        try:
            outcomes = done.result()
        except BaseException as exc:  # a bug here: fail the callers rather than hang them
            outcomes = [(op, None, _unavailable(exc)) for op in group]
        self._finish(outcomes)

    def _finish(self, outcomes: list[_Outcome]) -> None:
        """Hand each caller its result, then start the next group in a later turn, after the
        tasks woken here have run (what they submit joins that group)."""
        for op, result, error in outcomes:
            if op.future.done():  # a caller that gave up meanwhile
                continue
            if error is not None:
                op.future.set_exception(error)
            else:
                op.future.set_result(result)
        assert self._loop is not None
        self._loop.call_soon(self._run_next)

    # -- one group, one transaction (on the loop or on the writer's thread) --------------------

    def _run_group(self, group: list[_Op], on_loop: bool) -> list[_Outcome]:
        conn = self._conn
        assert conn is not None
        full = not self._relaxed or any(op.durable for op in group)
        if full != self._synchronous_full:  # outside a transaction, where SQLite takes it
            conn.execute(f"PRAGMA synchronous = {'FULL' if full else 'NORMAL'}")
            self._synchronous_full = full
        try:
            self._begin(conn, wait_for_locks=not on_loop)
            self._interrupted = False
            if on_loop:
                self._loop_deadline = time.perf_counter() + MAX_LOOP_SECONDS
                conn.set_progress_handler(self._past_deadline, PROGRESS_STEPS)
            try:
                outcomes = [self._run_first(conn, group[0])]
                outcomes += [self._run_one(conn, op) for op in group[1:]]
            finally:
                if on_loop:
                    conn.set_progress_handler(None, 0)  # never interrupt the COMMIT
            conn.execute("COMMIT")
        except _Locked:
            raise
        except _OffTheLoop:
            self._abandon(conn)  # the thread runs every operation of the group again
            raise
        except Exception as exc:  # sqlite3.Error, _TransactionLost, or a bug in this class
            # Nothing of this group reached the disk, including the operations that had
            # succeeded: every caller hears so (one exception object each: they get raised in
            # different tasks, and raising mutates the traceback).
            self._abandon(conn)
            cause = exc.__cause__ if isinstance(exc, _TransactionLost) and exc.__cause__ else exc
            return [(op, None, _unavailable(cause)) for op in group]
        self.commits += 1
        self.unsynced_commits += 0 if full else 1
        self.operations += sum(1 for _, _, error in outcomes if error is None)
        return outcomes

    def _past_deadline(self) -> int:
        """SQLite's progress handler while a group runs on the loop: non-zero interrupts the
        statement (sqlite3.OperationalError "interrupted"), which the group turns into
        _OffTheLoop."""
        if time.perf_counter() < self._loop_deadline:
            return 0
        self._interrupted = True
        return 1

    @staticmethod
    def _begin(conn: sqlite3.Connection, wait_for_locks: bool) -> None:
        if not wait_for_locks:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if _is_busy(exc):
                    raise _Locked() from exc
                raise
            return
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        finally:
            conn.execute("PRAGMA busy_timeout = 0")

    def _run_first(self, conn: sqlite3.Connection, op: _Op) -> _Outcome:
        """The group's first operation, without a savepoint: undoing it is undoing the whole
        transaction so far, which holds nothing else, and then a new one starts for the rest.
        A savepoint is not free in WAL mode: SQLite first copies every page that the operation
        changes to the savepoint's journal (a temporary file past 64 KiB): two of them per
        send + receive + ack cycle at batch 1,000, hundreds of page writes. Groups of
        one operation, the usual case under light load, so need none."""
        try:
            result = op.fn(conn)
        except Exception as exc:
            if self._interrupted:
                raise _OffTheLoop() from exc
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.execute("BEGIN IMMEDIATE")  # the write lock was ours a moment ago
            error = _unavailable(exc) if isinstance(exc, sqlite3.OperationalError) else exc
            return (op, None, error)
        return (op, result, None)

    def _run_one(self, conn: sqlite3.Connection, op: _Op) -> _Outcome:
        conn.execute("SAVEPOINT op")
        try:
            result = op.fn(conn)
        except Exception as exc:
            if self._interrupted:
                raise _OffTheLoop() from exc
            _Writer._roll_back_one(conn, exc)
            # OperationalError is the file's trouble (full, I/O, locked), not the caller's:
            # UNAVAILABLE tells a client that a retry later may work.
            error = _unavailable(exc) if isinstance(exc, sqlite3.OperationalError) else exc
            return (op, None, error)
        conn.execute("RELEASE op")
        return (op, result, None)

    @staticmethod
    def _roll_back_one(conn: sqlite3.Connection, cause: Exception) -> None:
        """Undo one failed operation and nothing else: its neighbours in the group keep their
        work. Some SQLite errors (I/O, disk full) roll back the whole transaction by themselves;
        then there is no savepoint left to return to and the group is lost."""
        try:
            conn.execute("ROLLBACK TO op")
            conn.execute("RELEASE op")
        except sqlite3.Error:
            raise _TransactionLost() from cause  # the error that cost the transaction
        if not conn.in_transaction:
            raise _TransactionLost() from cause

    @staticmethod
    def _abandon(conn: sqlite3.Connection) -> None:
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the next BEGIN reports whatever is wrong with the file
