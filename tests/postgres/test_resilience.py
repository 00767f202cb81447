"""Lost connections and database outages: UNAVAILABLE at worst, and recovery without a restart.

- a connection killed inside a transaction (before COMMIT) is retried on a fresh one: the caller
  notices nothing;
- the database gone (a TCP proxy cuts everything and refuses new connections): operations answer
  Unavailable; back again: the pool and the LISTEN connection reconnect by themselves;
- a real `leaseq serve` under load whose connections are killed with pg_terminate_backend: the
  clients see OK or UNAVAILABLE only, lose no acknowledged message, and the same process goes on.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import grpc
import pytest
from google.protobuf import duration_pb2

from leaseq.server.domain.types import LeaseStatus, NewMessage, QueueConfig
from leaseq.server.errors import Unavailable
from leaseq.server.store.postgres import PostgresStore
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.postgres import connect, store_url
from tests.support.process import ServerProcess, free_port

from .faults import TcpProxy, backends, terminate_backends

D = duration_pb2.Duration
RECOVERY_TIMEOUT = 60.0  # safety net: the pool reconnects with backoff (about a second or two)


async def _until(condition: Callable[[], object], timeout: float = 30.0) -> object:
    """Poll a condition on the database's side (another process's state: no event to await)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(condition)
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)


async def test_a_connection_killed_inside_a_transaction_is_retried(schema: str) -> None:
    app = f"leaseq-{schema}"
    store = PostgresStore.from_url(store_url(schema, pool_min=1, pool_max=2, application_name=app))
    await store.open()
    try:
        await store.create_queue("q", QueueConfig())
        await store.send("q", [NewMessage(body=b"m")])
        [message] = (await store.receive("q", 1, 60.0)).messages
        with connect() as locker, locker.transaction():
            # Hold the message's row: the store's delete waits for it inside its transaction.
            locker.execute(
                f'SELECT 1 FROM "{schema}".messages WHERE key = %s FOR UPDATE', (message.key,)
            )
            deleting = asyncio.create_task(store.delete("q", [message.receipt]))
            [(pid, _, _)] = await _until(lambda: backends(app, wait_event_type="Lock"))
            with connect() as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            # The store runs the delete again on another connection, which waits in turn.
            await _until(
                lambda: [p for p, _, _ in backends(app, wait_event_type="Lock") if p != pid]
            )
        outcome = await asyncio.wait_for(deleting, 30)
        assert outcome.results[0].status is LeaseStatus.OK
        assert (await store.stats("q")).total == 0
    finally:
        await store.close()


async def test_a_database_outage_is_unavailable_and_heals_by_itself(schema: str) -> None:
    proxy = await TcpProxy().start()
    store = PostgresStore.from_url(proxy.url(schema, pool_min=1, pool_max=3, pool_timeout=1))
    direct = PostgresStore.from_url(store_url(schema, pool_min=1, pool_max=2))
    await store.open()
    await direct.open()
    try:
        await store.create_queue("q", QueueConfig())
        await store.send("q", [NewMessage(body=b"before")])
        await asyncio.wait_for(store.listening.wait(), 10)

        proxy.cut()
        for attempt in (
            lambda: store.send("q", [NewMessage(body=b"during")]),
            lambda: store.receive("q", 1, 30.0),
            lambda: store.stats("q"),
        ):
            with pytest.raises(Unavailable):
                await asyncio.wait_for(attempt(), 30)

        proxy.restore()
        deadline = time.monotonic() + RECOVERY_TIMEOUT
        while True:  # the pool reconnects in the background, with backoff
            try:
                stats = await store.stats("q")
                break
            except Unavailable:
                assert time.monotonic() < deadline, "the store did not recover"
                await asyncio.sleep(0.1)
        assert stats.visible == 1  # "during" was never acknowledged, and not stored
        await store.send("q", [NewMessage(body=b"after")])
        assert [m.body for m in (await store.receive("q", 10, 30.0)).messages] == [
            b"before",
            b"after",
        ]
        # The LISTEN connection is back too: changes through another replica are heard again.
        await asyncio.wait_for(store.listening.wait(), RECOVERY_TIMEOUT)
        heard: asyncio.Queue[str | None] = asyncio.Queue()
        store.subscribe(heard.put_nowait)
        await direct.send("q", [NewMessage(body=b"elsewhere")])
        while await asyncio.wait_for(heard.get(), 15) != "q":
            pass
    finally:
        await direct.close()
        await store.close()
        await proxy.stop()


@pytest.mark.timeout(300)
def test_killing_the_servers_connections_under_load(schema: str, tmp_path) -> None:
    app = f"leaseq-{schema}"
    url = store_url(schema, pool_max=6, application_name=app)
    server = ServerProcess(url, free_port(), tmp_path / "server.log")
    server.start()
    try:
        _run_load_with_kills(server.target, app)
    finally:
        server.terminate()
    assert "Traceback" not in (tmp_path / "server.log").read_text()


def _run_load_with_kills(target: str, app: str) -> None:
    senders, consumers, batches, batch = 2, 4, 60, 50
    acknowledged: set[str] = set()
    received: set[str] = set()
    codes: list[grpc.StatusCode] = []
    lock = threading.Lock()
    sending_done = threading.Event()
    progress = threading.Condition(lock)

    def call(fn, *args):
        """One RPC; an UNAVAILABLE (or any error) is noted and answered None."""
        try:
            return fn(*args, timeout=30)
        except grpc.RpcError as error:
            with lock:
                codes.append(error.code())
            return None

    def send(index: int) -> None:
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            for n in range(batches):
                entries = [
                    pb.SendEntry(id=str(i), body=f"{index}-{n}-{i}".encode()) for i in range(batch)
                ]
                reply = call(stub.SendMessages, pb.SendMessagesRequest(queue="q", entries=entries))
                if reply is not None:
                    with progress:
                        acknowledged.update(r.message_id for r in reply.results)
                        progress.notify_all()

    def consume() -> None:
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            while True:
                with lock:
                    if sending_done.is_set() and acknowledged <= received:
                        return
                request = pb.GetMessagesRequest(
                    queue="q",
                    max_messages=25,
                    visibility_timeout=D(seconds=3),
                    wait_time=D(seconds=1),
                )
                try:
                    replies = stub.GetMessages(request, timeout=30)
                    messages = [m for reply in replies for m in reply.messages]
                except grpc.RpcError as error:
                    with lock:
                        codes.append(error.code())
                    continue
                if messages:
                    # A delete lost to UNAVAILABLE leaves the message to come back after 3 s.
                    receipts = [m.receipt for m in messages]
                    ack = pb.DeleteMessagesRequest(queue="q", receipts=receipts)
                    call(stub.DeleteMessages, ack)
                    with progress:
                        received.update(m.message_id for m in messages)
                        progress.notify_all()

    with grpc.insecure_channel(target) as channel:
        pb_grpc.QueueServiceStub(channel).CreateQueue(pb.CreateQueueRequest(name="q"))
    threads = [threading.Thread(target=send, args=(i,)) for i in range(senders)]
    threads += [threading.Thread(target=consume) for _ in range(consumers)]
    for thread in threads:
        thread.start()
    killed = 0
    total = senders * batches * batch
    for fraction in (0.2, 0.45, 0.7):  # kill at points of progress, not at times
        with progress:
            progress.wait_for(lambda: len(received) >= fraction * total, timeout=120)  # noqa: B023 - waited on in this iteration
        killed += terminate_backends(app)
    for thread in threads[:senders]:
        thread.join(timeout=180)
    sending_done.set()
    for thread in threads[senders:]:
        thread.join(timeout=180)
    assert not any(t.is_alive() for t in threads), "the load did not finish"
    assert killed >= 3, killed  # pool connections and the LISTEN connection, three times
    assert set(codes) <= {grpc.StatusCode.UNAVAILABLE}, codes
    assert acknowledged <= received, f"lost {len(acknowledged - received)} acknowledged messages"
    # The same server process goes on serving.
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"end")]))
        [reply] = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=10))
        assert [m.body for m in reply.messages] == [b"end"]
    print(
        f"killed {killed} backends; {len(codes)} calls answered UNAVAILABLE,"
        f" {len(acknowledged)} messages sent and received"
    )
