"""Round trips kept in flight beside a consume_process_ack task's fn: receives ahead, acks behind.

A task that waits for each receive and each ack in turn leaves the server idle while fn runs and
fn idle while the server works (profiled: 24 s waiting on receives and 16 s on acks against 1 s
in fn, the server at 0.67 of a core). Here one thread leases the next batches while fn runs on
the current one (``Leaser``), and another acks finished batches while the task goes on
(``Acker``). gRPC's blocking calls release the GIL, so fn and the round trips overlap.

What does not change: a message is acked only after fn returned success for it (an ack is
submitted after fn, never before); every leased batch is under a ``LeaseKeeper`` from the moment
it arrives (a batch waiting for fn keeps its lease however long fn takes on the one before); a
batch the task does not get to (it stops, or fails) is handed back to the caller to release.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from ._executor import LeaseKeeper

__all__ = ["Acker", "InFlight", "Leased", "Leaser", "kept"]

T = TypeVar("T")


class InFlight(Generic[T]):
    """Calls made in threads, at most ``depth`` at once (a blocking gRPC call releases the GIL),
    each result handed to ``on_result`` in the caller's thread, oldest first; ``submit`` waits
    for the oldest when ``depth`` are in flight. ``depth`` 0: each call is made at once, in the
    caller. Acks (``Acker``) and write_queue's sends (``core.send_partition``) go through it."""

    def __init__(self, depth: int, on_result: Callable[[T], None], thread_name_prefix: str) -> None:
        self.depth = depth
        self.on_result = on_result
        self.pending: deque[Future[T]] = deque()
        self._pool = ThreadPoolExecutor(
            max_workers=max(depth, 1), thread_name_prefix=thread_name_prefix
        )

    def submit(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> None:
        if self.depth == 0:
            self.on_result(call(*args, **kwargs))
            return
        while len(self.pending) >= self.depth:
            self._collect_one()
        self.pending.append(self._pool.submit(call, *args, **kwargs))

    def _collect_one(self) -> None:
        self.on_result(self.pending.popleft().result())

    def drain(self) -> None:
        """Wait for every call in flight; the first failure is raised after all have ended."""
        error: BaseException | None = None
        while self.pending:
            try:
                self._collect_one()
            except BaseException as e:  # noqa: BLE001 - raised below, after the others
                error = error or e
        self._pool.shutdown(wait=True)
        if error is not None:
            raise error

    def cancel(self) -> None:
        """A failing task: calls not started are not made; those running end, unheard."""
        for future in self.pending:
            future.cancel()
        self.pending.clear()
        self._pool.shutdown(wait=True)


class Leased:
    """A received batch and the keeper extending its leases until it is settled."""

    def __init__(self, table: pa.Table, keeper: LeaseKeeper | None) -> None:
        self.table = table
        self.keeper = keeper

    def stop_keeping(self) -> set[str]:
        """Stop extending (before an ack or a release: an extension after a release would undo
        it); the receipts whose lease was found lost meanwhile."""
        if self.keeper is None:
            return set()
        self.keeper.stop()
        return self.keeper.lost


def kept(client: Any, queue: str, table: pa.Table, visibility_timeout: float) -> Leased:
    """``table`` under a LeaseKeeper from now on (an empty batch has nothing to keep)."""
    keeper = None
    if table.num_rows:
        keeper = LeaseKeeper(client, queue, table.column("receipt"), visibility_timeout)
        keeper.__enter__()
    return Leased(table, keeper)


class Leaser:
    """Receives in flight, in order (``depth`` threads). ``ask(n)`` starts one; ``take()`` waits for
    the oldest. Each batch's ``LeaseKeeper`` starts in the receiving thread, as soon as it
    arrives."""

    def __init__(
        self, client: Any, queue: str, *, visibility_timeout: float, wait_time: float, depth: int
    ) -> None:
        self.client = client
        self.queue = queue
        self.visibility_timeout = visibility_timeout
        self.wait_time = wait_time
        self.depth = depth
        self.pending: deque[Future[Leased]] = deque()
        self.asked = 0  # rows asked for by the receives in flight
        self._asks: deque[int] = deque()
        self._pool = ThreadPoolExecutor(
            max_workers=max(depth, 1), thread_name_prefix="leaseq-receive"
        )

    def _receive(self, n: int) -> Leased:
        table = self.client.receive_arrow(
            self.queue, n, visibility_timeout=self.visibility_timeout, wait_time=self.wait_time
        )
        return kept(self.client, self.queue, table, self.visibility_timeout)

    def ask(self, n: int) -> None:
        self.pending.append(self._pool.submit(self._receive, n))
        self._asks.append(n)
        self.asked += n

    def take(self) -> Leased:
        future = self.pending.popleft()
        self.asked -= self._asks.popleft()
        return future.result()

    def close(self) -> list[Leased]:
        """Wait for the receives still in flight; their batches (keepers stopped), for the
        caller to release. A receive that failed leased nothing it could name: skipped."""
        left: list[Leased] = []
        while self.pending:
            try:
                leased = self.take()
            except Exception:  # noqa: BLE001 - nothing was leased that we know of
                continue
            leased.stop_keeping()
            if leased.table.num_rows:
                left.append(leased)
        self._pool.shutdown(wait=True)
        return left


class Acker:
    """Acks in a thread, at most ``depth`` in flight (``InFlight``); ``ack`` waits for the oldest
    when full. Each completed ack adds to ``acked`` (deleted: OK or already deleted) and
    ``lost`` (the lease was gone). An ack that raised releases its receipts (``on_failure``) and
    re-raises at the next ``ack`` or at ``drain``: the task fails, as a failed ack always made it."""

    def __init__(
        self,
        client: Any,
        queue: str,
        done_statuses: pa.Array,
        depth: int,
        on_failure: Callable[[list[str]], None],
    ) -> None:
        self.client = client
        self.queue = queue
        self.done_statuses = done_statuses
        self.on_failure = on_failure
        self.acked = 0
        self.lost = 0
        self._calls: InFlight[tuple[int, int]] = InFlight(depth, self._count, "leaseq-ack")

    def _ack(self, receipts: pa.ChunkedArray | list[str]) -> tuple[int, int]:
        try:
            result = self.client.ack_arrow(self.queue, receipts)
        except BaseException:
            values = receipts if isinstance(receipts, list) else receipts.to_pylist()
            try:
                self.on_failure(values)
            except Exception:  # noqa: BLE001 - the leases end by themselves
                pass
            raise
        done = pc.sum(pc.is_in(result.column("status"), self.done_statuses)).as_py() or 0
        return done, len(receipts) - done

    def _count(self, outcome: tuple[int, int]) -> None:
        done, lost = outcome
        self.acked += done
        self.lost += lost

    def ack(self, receipts: pa.ChunkedArray | list[str]) -> None:
        self._calls.submit(self._ack, receipts)

    def drain(self) -> None:
        """Wait for every ack in flight; the first failure is raised after all have ended."""
        self._calls.drain()
