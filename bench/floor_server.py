"""The floor server: gRPC on grpc.aio plus the least database work a durable queue needs, and
nothing of leaseq.

    python -m leaseq.bench.floor_server [--listen 127.0.0.1:50300] [--store sqlite|postgres]
                                   [--sqlite-work loop|thread|overlapped] [--dir DIR]
                                   [--dsn URL] [--postgres-row pgmq|leaseq] [--workers N]

It serves, in one Python process as `leaseq serve` does, the calls that `leaseq bench send|cycle
--target` and the peers harness's leaseq clients make, each doing only what a durable queue
cannot skip:

- SendMessages: parse the request, insert its bodies, commit; one result per entry.
- GetMessages: lease up to max_messages messages for 30 s, commit; the messages (id, receipt,
  body) on the stream. When none is visible, wait up to the request's wait_time for a send.
- DeleteMessages: parse the receipts, delete those messages, commit; OK for each.
- GetQueueStats: total and deleted_total, counted in memory. Anything else: an empty answer.

The database work is someone else's minimum:
- sqlite: the raw loop's statements (`leaseq.bench.baseline`, the floor of `--baseline`'s ratios:
  WAL, synchronous=FULL), on the event loop or, with --sqlite-work, partly or wholly on a thread
  (_SqliteFloor says how);
- postgres: pgmq's own statements (its `send_batch`, `read` and `delete`, on a table shaped as
  pgmq's with bytea bodies) through psycopg's async pool, as leaseq's PostgreSQL store talks to
  the database, in a fresh schema of --dsn dropped at exit. --postgres-row leaseq runs them on
  leaseq's messages table instead, made by the store's migrations, with only the indexes its
  receive and retention need and nothing else of the store: the floor of a server that keeps
  leaseq's messages, where pgmq's row is the floor of any server.

One queue, whatever name a request gives; no validation, no receipts' MAC, no tombstones, no
counters, no attributes, no interceptors. So what `leaseq bench` measures against it is the most
a server of this shape (a grpc.aio process in front of the database, the same wire bytes in and
about the same out) can do on this machine: leaseq's rate as a share of it is what leaseq's own
layer costs, and the floor's rate beside a peer's, measured in one run, says whether such a
server can overtake that peer at all (docs/performance.md: the rows against pgmq).

    python -m leaseq.bench.floor_server --listen 127.0.0.1:50300 &
    leaseq bench cycle --target 127.0.0.1:50300 --server-pid $! --producers 1 --consumers 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc

from leaseq.bench import baseline
from leaseq.bench.settings import DEFAULT_DSN
from leaseq.server.app import SERVER_OPTIONS
from leaseq.server.domain.rules import new_message_ids
from leaseq.v1 import queue_service_pb2 as pb

T = TypeVar("T")

_MESSAGE_ID = "0" * 22  # leaseq's message ids are 22 characters: the answers' size, not content
_RECEIPT = "0" * 39  # and its receipts 39

Leased = list[tuple[int, bytes, str]]  # (key, body, the rest of the receipt)


class _SqliteFloor:
    """The raw loop's file and statements, run where --sqlite-work says:

    - loop: everything on the event loop, the COMMIT's fsync included (as leaseq's writer runs
      light groups);
    - thread: statements and COMMIT on one thread of their own, so that the loop serves gRPC
      while SQLite works and waits for the disk (the GIL passes to and fro at every statement);
    - overlapped: statements on the loop with synchronous=NORMAL (a COMMIT writes the WAL but
      does not wait for the disk), then an fdatasync of the WAL on a thread before the answer.
      Every answer still follows its fsync, but the loop serves other calls meanwhile: the most
      optimistic of the three (readers may see a commit before it is on disk, which the store's
      synchronous=FULL does not allow; the floor may)."""

    def __init__(self, directory: str, work: str) -> None:
        path = os.path.join(directory, "floor.db")
        self.db = baseline.connect(path, check_same_thread=False)
        self._thread = ThreadPoolExecutor(1) if work != "loop" else None
        self._overlapped = work == "overlapped"
        if self._overlapped:
            self.db.execute("PRAGMA synchronous = NORMAL")
            # The WAL file: baseline.connect's first write (its CREATE TABLE) made it.
            self._wal = os.open(path + "-wal", os.O_RDONLY)

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        if self._overlapped:
            os.close(self._wal)
        self.db.close()

    async def insert(self, bodies: list[bytes]) -> None:
        await self._run(baseline.insert, bodies)

    async def lease(self, wanted: int) -> Leased:
        return await self._run(baseline.lease, wanted)

    async def delete(self, receipts: list[tuple[int, str]]) -> None:
        await self._run(baseline.delete, receipts)

    async def _run(self, work: Callable[[Any, Any], T], argument: object) -> T:
        if self._thread is None:
            return work(self.db, argument)
        loop = asyncio.get_running_loop()
        if self._overlapped:
            done = work(self.db, argument)
            await loop.run_in_executor(self._thread, os.fdatasync, self._wal)
            return done
        return await loop.run_in_executor(self._thread, work, self.db, argument)


# pgmq 1.5's queue table (its create) and its send_batch INSERT, in the schema on the search path.
PGMQ_TABLE = [
    "CREATE TABLE q (msg_id bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY, read_ct integer"
    " DEFAULT 0 NOT NULL, enqueued_at timestamptz DEFAULT now() NOT NULL, vt timestamptz NOT NULL,"
    " message bytea)",
    "CREATE INDEX ON q (vt ASC)",
]
PGMQ_SEND_SQL = "INSERT INTO q (vt, message) SELECT clock_timestamp(), unnest(%b::bytea[])"


class _PostgresFloor:
    """pgmq's table and statements (pgmq 1.5's create, send_batch, read and delete), in a fresh
    schema (dropped at close), or in the schema of the parent process (--workers). With
    row="leaseq", the same statements on leaseq's messages table (_leaseq_row)."""

    def __init__(self, dsn: str, schema: str | None = None, row: str = "pgmq") -> None:
        self.dsn = dsn
        self.owned = schema is None
        self.schema = schema or f"leaseq_floor_{secrets.token_hex(4)}"
        self.row = row
        self.pool: Any = None

    def create(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {self.schema}")
            if self.row == "leaseq":
                _leaseq_row(conn, self.dsn, self.schema)
                return
            conn.execute(f"SET search_path TO {self.schema}")
            for statement in PGMQ_TABLE:
                conn.execute(statement)

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {self.schema} CASCADE")

    async def open(self) -> None:
        from psycopg_pool import AsyncConnectionPool

        if self.owned:
            # On a thread: the leaseq row's migrations run their own event loop.
            await asyncio.to_thread(_opening, self.create)
        self.pool = AsyncConnectionPool(
            self.dsn,
            min_size=2,
            max_size=10,
            # Planned on every execution, as pgmq's functions plan their EXECUTE. Prepared
            # (psycopg's default after 5 runs), the read fell to a tenth of this rate as the
            # queue filled (leaseq bench cycle, batch 100, 1,010 against 10,350 msgs/s).
            kwargs={
                "autocommit": True,
                "prepare_threshold": None,
                "options": f"-c search_path={self.schema}",
            },
            open=False,
        )
        await self.pool.open(wait=True, timeout=15)

    async def close(self) -> None:
        await self.pool.close()
        if self.owned:
            self.drop()

    async def insert(self, bodies: list[bytes]) -> None:
        async with self.pool.connection() as conn:
            if self.row == "leaseq":
                # Each message's id drawn here, as leaseq's store draws them.
                ids = new_message_ids(len(bodies))
                await conn.execute(_LEASEQ_INSERT, (ids, bodies), prepare=True)
                return
            await conn.execute(PGMQ_SEND_SQL, (bodies,))

    async def lease(self, wanted: int) -> Leased:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                _LEASEQ_LEASE
                if self.row == "leaseq"
                else "WITH cte AS (SELECT msg_id FROM q WHERE vt <= clock_timestamp()"
                " ORDER BY msg_id ASC LIMIT %b FOR UPDATE SKIP LOCKED)"
                " UPDATE q m SET vt = clock_timestamp() + interval '30 seconds',"
                " read_ct = read_ct + 1 FROM cte WHERE m.msg_id = cte.msg_id"
                " RETURNING m.msg_id, m.message, m.read_ct::text",
                (wanted,),
            )
            return await cursor.fetchall()

    async def delete(self, receipts: list[tuple[int, str]]) -> None:
        table, column = ("messages", "key") if self.row == "leaseq" else ("q", "msg_id")
        async with self.pool.connection() as conn:
            await conn.execute(
                f"DELETE FROM {table} WHERE {column} = ANY(%b::bigint[])",
                ([key for key, _ in receipts],),
            )


# --postgres-row leaseq: leaseq's messages table as the store's migrations make it (its id, body,
# attributes, channel, the instants it was sent, expires and becomes visible, its lease), with
# the three indexes its key lookups, receive order and retention need; none of the store's queue
# row, counters, triggers, other indexes, tombstones or lock. The statements are pgmq's, written
# for those columns (one queue: 1), the times as leaseq keeps them (seconds, float8).
_LEASEQ_ROW_KEPT = ("messages_pkey", "messages_visible", "messages_expiry")


def _leaseq_row(conn: Any, dsn: str, schema: str) -> None:
    from leaseq.server.store.postgres.schema import _migrate

    async def migrate() -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(dsn) as migrating:
            await _migrate(migrating, schema)

    asyncio.run(migrate())
    others = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'messages'"
        " AND indexname <> ALL(%s)",
        (schema, list(_LEASEQ_ROW_KEPT)),
    ).fetchall()
    for (index,) in others:
        conn.execute(f"DROP INDEX {schema}.{index}")
    conn.execute(f"ALTER TABLE {schema}.messages DISABLE TRIGGER USER")


_NOW = "(SELECT extract(epoch FROM clock_timestamp())::float8 AS now) c"
_LEASEQ_INSERT = (
    "INSERT INTO messages (queue, message_id, body, channel, enqueued_at, expires_at, visible_at)"
    " SELECT 1, m.id, m.body, '', c.now, c.now + 345600, c.now"
    f" FROM {_NOW}, unnest(%b::text[], %b::bytea[]) AS m(id, body)"
)
_LEASEQ_LEASE = (
    f"WITH cte AS (SELECT key FROM messages, {_NOW} WHERE queue = 1 AND visible_at <= c.now"
    " ORDER BY visible_at, key LIMIT %b FOR UPDATE SKIP LOCKED)"
    " UPDATE messages m SET visible_at = c.now + 30, leased = true,"
    " delivery_count = m.delivery_count + 1, receipt_seq = m.receipt_seq + 1"
    f" FROM cte, {_NOW} WHERE m.key = cte.key"
    " RETURNING m.key, m.body, m.receipt_seq::text"
)


def _opening(create: Callable[[], None]) -> None:
    """create(), or one line and exit 1 when the database cannot be reached or refuses."""
    import psycopg

    try:
        create()
    except psycopg.Error as error:
        raise SystemExit(f"floor_server.py: {' '.join(str(error).split())}") from None


class _FloorHandlers(grpc.GenericRpcHandler):
    def __init__(self, store: _SqliteFloor | _PostgresFloor) -> None:
        self.store = store
        self.sent_total = 0
        self.deleted_total = 0
        self.sent = asyncio.Event()  # set by every send: a waiting receive looks again
        self._send_answers: dict[int, bytes] = {}
        self._delete_answers: dict[int, bytes] = {}

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method.rsplit("/", 1)[-1]
        if method == "GetMessages":
            return grpc.unary_stream_rpc_method_handler(self.get_messages)
        handler = {
            "SendMessages": self.send_messages,
            "DeleteMessages": self.delete_messages,
            "GetQueueStats": self.get_queue_stats,
        }.get(method, self.empty)
        return grpc.unary_unary_rpc_method_handler(handler)

    async def empty(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b""

    async def send_messages(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        entries = pb.SendMessagesRequest.FromString(request).entries
        await self.store.insert([entry.body for entry in entries])
        self.sent_total += len(entries)
        self.sent.set()
        self.sent.clear()
        return self._answer(self._send_answers, len(entries), _send_answer)

    async def get_messages(
        self, request: bytes, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        asked = pb.GetMessagesRequest.FromString(request)
        wanted = asked.max_messages or 1
        deadline = time.monotonic() + asked.wait_time.seconds + asked.wait_time.nanos / 1e9
        # A send that lands while a lease is being read sets the event before anyone waits:
        # the count of sends seen before each read tells the loop to read again at once.
        seen = self.sent_total
        leased = await self.store.lease(wanted)
        while not leased and time.monotonic() < deadline:
            if self.sent_total == seen:
                try:
                    await asyncio.wait_for(self.sent.wait(), deadline - time.monotonic())
                except TimeoutError:
                    break
            seen = self.sent_total
            leased = await self.store.lease(wanted)
        yield pb.GetMessagesResponse(
            messages=[
                pb.ReceivedMessage(message_id=_MESSAGE_ID, receipt=f"{key}.{rest}", body=body)
                for key, body, rest in leased
            ]
        ).SerializeToString()

    async def delete_messages(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        receipts = pb.DeleteMessagesRequest.FromString(request).receipts
        leases = [(int(key), rest) for key, _, rest in (r.partition(".") for r in receipts)]
        await self.store.delete(leases)
        self.deleted_total += len(leases)
        return self._answer(self._delete_answers, len(receipts), _delete_answer)

    async def get_queue_stats(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        total = self.sent_total - self.deleted_total
        stats = pb.QueueStats(total=total, deleted_total=self.deleted_total)
        return pb.GetQueueStatsResponse(stats=stats).SerializeToString()

    @staticmethod
    def _answer(made: dict[int, bytes], count: int, build: Callable[[int], bytes]) -> bytes:
        # The answers of a send or a delete depend only on how many entries there were: made
        # once per count, as the cheapest server would.
        if count not in made:
            made[count] = build(count)
        return made[count]


def _send_answer(count: int) -> bytes:
    result = pb.SendResult(id=_MESSAGE_ID, message_id=_MESSAGE_ID)
    return pb.SendMessagesResponse(results=[result] * count).SerializeToString()


def _delete_answer(count: int) -> bytes:
    ok = pb.DeleteResult(receipt=_RECEIPT, status=pb.LEASE_STATUS_OK)
    return pb.DeleteMessagesResponse(results=[ok] * count).SerializeToString()


async def _serve(address: str, store: _SqliteFloor | _PostgresFloor, shared_port: bool) -> None:
    await store.open()
    try:
        # A port another process listens on is an error, except for --workers' own processes
        # (gRPC's default, SO_REUSEPORT, would share it with anyone).
        options = [*SERVER_OPTIONS, ("grpc.so_reuseport", int(shared_port))]
        server = grpc.aio.server(options=options)
        server.add_generic_rpc_handlers((_FloorHandlers(store),))
        try:
            server.add_insecure_port(address)
        except RuntimeError:
            raise SystemExit(f"floor_server.py: cannot listen on {address}") from None
        await server.start()
        # SIGTERM and Ctrl-C stop it cleanly: the PostgreSQL schema is dropped on the way out.
        stopping = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(signum, stopping.set)
        where = f", schema {store.schema}" if isinstance(store, _PostgresFloor) else ""
        print(f"floor server on {address}, pid {os.getpid()}{where}", flush=True)
        await stopping.wait()
        await server.stop(None)
    finally:
        await store.close()


def _serve_workers(args: argparse.Namespace) -> None:
    """--workers N: N children serving one schema, made and dropped here; SIGTERM stops them."""
    store = _PostgresFloor(args.dsn, row=args.postgres_row)
    _opening(store.create)
    children: list[subprocess.Popen[str]] = []
    try:
        for _ in range(args.workers):
            children.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "leaseq.bench.floor_server",
                        "--listen",
                        args.listen,
                        "--store",
                        "postgres",
                        "--dsn",
                        args.dsn,
                        "--schema",
                        store.schema,
                        "--postgres-row",
                        args.postgres_row,
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
            line = children[-1].stdout.readline()  # type: ignore[union-attr]
            if not line.startswith("floor server on"):
                raise SystemExit(f"a worker did not start: {line.strip()}")
        stopping = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopping.set())
        print(
            f"floor server on {args.listen}, pid {os.getpid()}, schema {store.schema},"
            f" workers {' '.join(str(child.pid) for child in children)}",
            flush=True,
        )
        stopping.wait()
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait()
        store.drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:50300", help="HOST:PORT to serve on")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--sqlite-work",
        choices=("loop", "thread", "overlapped"),
        default="loop",
        help="sqlite: where the statements and the fsync run (see the module docstring)",
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("LEASEQ_BENCH_DSN", DEFAULT_DSN),
        help="postgres: the database that gets the fresh schema (as leaseq bench's --dsn)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="postgres: this many server processes on the one port (SO_REUSEPORT, which gRPC"
        " sets), as `leaseq serve --workers`; the first line's pid is their parent's. A send"
        " wakes receives waiting in its own process only, and GetQueueStats counts its own",
    )
    parser.add_argument(
        "--postgres-row",
        choices=("pgmq", "leaseq"),
        default="pgmq",
        help="postgres: pgmq's table, or leaseq's messages table (see the module docstring)",
    )
    parser.add_argument("--schema", help=argparse.SUPPRESS)  # a worker's: its parent's schema
    parser.add_argument("--dir", help="sqlite: where the file goes (a fresh temporary directory)")
    args = parser.parse_args()
    if args.workers < 1 or (args.workers > 1 and args.store != "postgres"):
        parser.error("--workers takes 1 or more, and more than 1 only with --store postgres")
    if args.postgres_row != "pgmq" and args.store != "postgres":
        parser.error("--postgres-row goes with --store postgres")
    if args.workers > 1:
        _serve_workers(args)
        return
    if args.store == "postgres":
        store = _PostgresFloor(args.dsn, args.schema, args.postgres_row)
        asyncio.run(_serve(args.listen, store, shared_port=args.schema is not None))
        return
    with tempfile.TemporaryDirectory(prefix="leaseq-floor-", dir=args.dir) as directory:
        asyncio.run(_serve(args.listen, _SqliteFloor(directory, args.sqlite_work), False))


if __name__ == "__main__":
    main()
