"""Bytes of messages in memory on their way to clients: one call's share and the server's total.

Why: a GetMessages of 60 messages of 8 MiB used to read all 480 MiB before sending any, and a
follow stream whose client never reads kept leasing and buffering. Now every store read of a
receive or peek is bounded twice:

- per call, by bytes: the store stops after the message that reaches `CALL_BYTES` (base.py's
  max_bytes), so one read holds at most CALL_BYTES plus one message (8 MiB at most). A receive
  sends that chunk before it reads (and leases) the next one.
- per server, by a `ByteBudget`: before a read, the call reserves what the read may return at
  most (`read_estimate`), waiting for room when the server already has `SERVER_BYTES` in flight;
  after the read the reservation shrinks to what was read, and it is given back once the chunk
  was handed to gRPC (a follow stream whose client does not read holds its chunk, and its
  reservation, until it reads, ends or is cancelled; gRPC's HTTP/2 flow control keeps the
  stream's `yield` waiting, so it reads nothing more meanwhile).

A call holds at most one reservation at a time and never waits for a second one while holding the
first, so reservations cannot deadlock. Waiters are served in order, so a large reservation is not
starved by a stream of small ones. A single reservation larger than the whole budget waits until
the budget is idle, then goes alone.
"""

from __future__ import annotations

import asyncio
from collections import deque

MIB = 1024 * 1024

CALL_BYTES = 8 * MIB
"""max_bytes of one store read of a receive or peek: a chunk holds at most this plus one message
(under 16 MiB), and fits one gRPC response whatever its message count. Measured over a real
server (tests/service/test_memory_bounds.py): one receive of 60 messages of 8 MiB raises the peak
RSS by about 180 MiB with 8 MiB chunks, 200-230 MiB with 16 MiB chunks (the SQLite page cache's
64 MiB and the allocator's fragmentation included), against about 1.2 GiB before."""

SERVER_BYTES = 256 * MIB
"""Bytes of read-but-not-yet-sent messages across all calls of one server (the ByteBudget)."""

MESSAGE_OVERHEAD = 512
"""Bytes added to each message's body and attributes in a reservation before the read: ids,
receipt, timestamps, channel (the estimate only needs to be of the right size)."""


def read_estimate(max_messages: int, max_message_bytes: int, call_bytes: int) -> int:
    """The most a store read of max_messages with max_bytes=call_bytes may return, for messages of
    at most max_message_bytes: what a call reserves before reading."""
    largest = max_message_bytes + MESSAGE_OVERHEAD
    return min(max_messages * largest, call_bytes + largest)


class Reservation:
    """Bytes held in a ByteBudget; release() gives them back (again: nothing)."""

    __slots__ = ("_budget", "bytes")

    def __init__(self, budget: ByteBudget, size: int) -> None:
        self._budget = budget
        self.bytes = size

    def resize(self, size: int) -> None:
        """Hold `size` bytes from now on: the read returned that much. Growing past the budget is
        allowed (the bytes are already in memory); later reservations wait for it."""
        self._budget._give_back(self.bytes - size)
        self.bytes = size

    def release(self) -> None:
        self.resize(0)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ByteBudget:
    """A semaphore counted in bytes, on one event loop."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a byte budget needs at least one byte")
        self.capacity = capacity
        self.available = capacity
        self.waits = 0  # reservations that had to wait for room (a gauge for tests and metrics)
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def in_use(self) -> int:
        return self.capacity - self.available

    async def reserve(self, size: int) -> Reservation:
        """Hold size bytes (at most the capacity), waiting in line for room."""
        size = max(0, min(size, self.capacity))
        if not self._waiters and self.available >= size:
            self.available -= size
            return Reservation(self, size)
        self.waits += 1
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give_back(size)  # granted just as the caller was cancelled
            else:
                if entry in self._waiters:  # else _grant dropped it already
                    self._waiters.remove(entry)
                self._grant()  # the ones behind it may fit now
            raise
        return Reservation(self, size)

    def _give_back(self, size: int) -> None:
        self.available += size
        self._grant()

    def _grant(self) -> None:
        while self._waiters:
            size, waiter = self._waiters[0]
            if waiter.done():  # cancelled while it waited: its reserve() is on its way out
                self._waiters.popleft()
                continue
            if size > self.available:
                return
            self._waiters.popleft()
            self.available -= size
            waiter.set_result(None)
