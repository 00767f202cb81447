"""The writer thread: one connection, group commit (see the package docstring)."""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from ...errors import Unavailable

T = TypeVar("T")

# A group stops growing at this many operations or this much weight (messages or entries), so
# one commit never holds back the callers at the front of the line for too long.
MAX_GROUP_OPS = 512
MAX_GROUP_WEIGHT = 20_000

SWITCH_INTERVAL = 0.0005
"""The interpreter's GIL switch interval (seconds) while a writer runs, at most: sqlite3 lets go
of the GIL around every step of a statement (each row of an executemany, each row a RETURNING
gives back) and must take it back before the next. While the event loop runs Python, each such
take waits for the event loop's switch interval (CPython's default: 5 ms), so the writer's
SQLite time can hardly overlap the event loop's work. Measured (issue 20, quiet machine, two
runs each): `leaseq bench send --batch 100 --producers 2` 32,300/37,700 -> 47,300/52,300
msgs/s with server CPU per message 19.1/17.7 -> 17.9/16.5 µs; the cycle at batch 1000 with 2
consumers 51,600/37,900 -> 52,000/41,400."""

# --- the writer thread: one connection, group commit ----------------------------------------


@dataclass(eq=False)
class _Op:
    fn: Callable[[sqlite3.Connection], Any] | None  # None: the stop marker
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    weight: int = 1


_Outcome = tuple[_Op, Any, BaseException | None]


class _TransactionLost(Exception):
    """SQLite rolled the whole transaction back by itself (I/O error, disk full...)."""


def _unavailable(error: BaseException) -> Unavailable:
    failure = Unavailable(f"SQLite store failed: {error}")
    failure.__cause__ = error
    return failure


def _settle(items: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    """Runs on the event loop: hand each caller its result. A caller that gave up (cancelled)
    has a done future and is skipped."""
    for future, result, error in items:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


class _Writer:
    """The one thread that owns the SQLite connection and commits queued operations in groups.

    Operations run in submission order. Their futures resolve only after the COMMIT of their
    group, i.e. once the work is durable.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._inbox: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        # Guards `_accepting` together with the put, so that nothing can be queued after the
        # thread's final drain (such an operation would wait forever).
        self._lock = threading.Lock()
        self._accepting = False
        self._thread = threading.Thread(target=self._main, name="leaseq-sqlite-writer", daemon=True)
        self.commits = 0
        self.operations = 0

    # -- event loop side ---------------------------------------------------------------------

    async def start(self, setup: Callable[[sqlite3.Connection], T]) -> T:
        """Start the thread with `setup` as its first operation. Queued before the thread runs,
        so that a failure to open the file reaches this caller as it is."""
        if sys.getswitchinterval() > SWITCH_INTERVAL:  # never raises a shorter one
            sys.setswitchinterval(SWITCH_INTERVAL)
        self._accepting = True
        setup_done = self._enqueue(setup, 1)
        self._thread.start()
        return await setup_done

    async def submit(self, fn: Callable[[sqlite3.Connection], T], weight: int = 1) -> T:
        return await self._enqueue(fn, weight)

    def _enqueue(self, fn: Callable[[sqlite3.Connection], T], weight: int) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if not self._accepting:
                raise Unavailable("the SQLite store is closed")
            self._inbox.put(_Op(fn, future, loop, max(1, weight)))
        return future

    async def stop(self) -> None:
        """Finish every operation queued so far, close the connection, end the thread."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if not self._accepting:
                return
            self._accepting = False
            self._inbox.put(_Op(None, done, loop))
        await done
        # The thread resolved `done` as its very last action: this join does not wait.
        self._thread.join()

    # -- writer thread side ------------------------------------------------------------------

    def _main(self) -> None:
        stop: _Op | None = None
        error: BaseException = Unavailable("the SQLite store is closed")
        try:
            conn = self._connect()
        except Exception as exc:  # e.g. unwritable path: every waiting caller learns why
            error = exc
        else:
            try:
                stop = self._serve(conn)
            except BaseException as exc:  # a bug here: fail the callers rather than hang them
                error = _unavailable(exc)
            finally:
                conn.close()
        self._shut_down(error)
        if stop is not None:
            self._resolve([(stop, None, None)])

    def _shut_down(self, error: BaseException) -> None:
        with self._lock:
            self._accepting = False
            leftovers: list[_Outcome] = []
            while True:
                try:
                    op = self._inbox.get_nowait()
                except queue.Empty:
                    break
                leftovers.append((op, None, None if op.fn is None else error))
        self._resolve(leftovers)

    def _serve(self, conn: sqlite3.Connection) -> _Op:
        while True:
            group, stop = self._collect()
            if group:
                self._resolve(self._run_group(conn, group))
            if stop is not None:
                return stop

    def _collect(self) -> tuple[list[_Op], _Op | None]:
        """Block for one operation, then take whatever else is already waiting."""
        first = self._inbox.get()
        if first.fn is None:
            return [], first
        group, weight = [first], first.weight
        while len(group) < MAX_GROUP_OPS and weight < MAX_GROUP_WEIGHT:
            try:
                op = self._inbox.get_nowait()
            except queue.Empty:
                break
            if op.fn is None:
                return group, op
            group.append(op)
            weight += op.weight
        return group, None

    def _run_group(self, conn: sqlite3.Connection, group: list[_Op]) -> list[_Outcome]:
        # A caller cancelled before its turn does not want the side effects (e.g. leases that
        # nobody would receive). Reading the flag from this thread is a plain attribute read.
        ops = [op for op in group if not op.future.cancelled()]
        if not ops:
            return []
        try:
            conn.execute("BEGIN IMMEDIATE")
            outcomes = [self._run_first(conn, ops[0])]
            outcomes += [self._run_one(conn, op) for op in ops[1:]]
            conn.execute("COMMIT")
        except (sqlite3.Error, _TransactionLost) as exc:
            # Nothing of this group reached the disk, including the operations that had
            # succeeded: every caller hears so (one exception object each: they get raised in
            # different tasks, and raising mutates the traceback).
            self._abandon(conn)
            cause = exc.__cause__ if isinstance(exc, _TransactionLost) and exc.__cause__ else exc
            return [(op, None, _unavailable(cause)) for op in ops]
        self.commits += 1
        self.operations += sum(1 for _, _, error in outcomes if error is None)
        return outcomes

    @staticmethod
    def _run_first(conn: sqlite3.Connection, op: _Op) -> _Outcome:
        """The group's first operation, without a savepoint: undoing it is undoing the whole
        transaction so far, which holds nothing else, and then a new one starts for the rest.
        A savepoint is not free in WAL mode: SQLite first copies every page that the operation
        changes to the savepoint's journal (a temporary file past 64 KiB): two of them per
        send + receive + ack cycle at batch 1,000, about 200 page writes (issue 20). Groups of
        one operation, the usual case under light load, so need none."""
        assert op.fn is not None
        try:
            result = op.fn(conn)
        except Exception as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.execute("BEGIN IMMEDIATE")
            error = _unavailable(exc) if isinstance(exc, sqlite3.OperationalError) else exc
            return (op, None, error)
        return (op, result, None)

    @staticmethod
    def _run_one(conn: sqlite3.Connection, op: _Op) -> _Outcome:
        assert op.fn is not None
        conn.execute("SAVEPOINT op")
        try:
            result = op.fn(conn)
        except Exception as exc:
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

    @staticmethod
    def _resolve(outcomes: Iterable[_Outcome]) -> None:
        """One call_soon_threadsafe per event loop and group, not one per operation."""
        by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        for op, result, error in outcomes:
            by_loop.setdefault(op.loop, []).append((op.future, result, error))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, items)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                pass


