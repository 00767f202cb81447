"""The Arrow bulk path: send_arrow / receive_arrow / ack_arrow against a real server, the way
requests are cut, and what a failure in the middle of a bulk send reports.

The plans are I/O-free generators (``leaseq.client.arrow``), so the cutting and the partial
failure are checked by driving a plan by hand, the way a client drives it."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from leaseq.client import (
    ACK_RESULT_SCHEMA,
    MESSAGE_SCHEMA,
    SEND_RESULT_SCHEMA,
    AsyncQueueClient,
    QueueClient,
    QueueNotFound,
    Unavailable,
    arrow,
)
from leaseq.v1 import queue_service_pb2 as pb
from tests.support.process import server_process

MiB = 1024 * 1024


def test_round_trip_of_100000_messages_of_1_kib(tmp_path: Path) -> None:
    count = 100_000
    bodies = [os.urandom(1024) for _ in range(count)]
    table = pa.table({"body": pa.array(bodies, pa.binary()), "n": pa.array(range(count))})
    # A server process of its own: it gets the second core, and this big queue no one else.
    with server_process("memory://", tmp_path) as server:
        with QueueClient(server.target, timeout=60) as client:
            client.create_queue("bulk")
            sent = client.send_arrow("bulk", table)
            received = client.receive_arrow("bulk", count, wait_time=0)
            acked = client.ack_arrow("bulk", received)
            stats = client.stats("bulk")

    assert sent.schema == SEND_RESULT_SCHEMA and sent.num_rows == count
    assert sent.column("error_code").null_count == count  # no row failed
    assert sent.column("id").to_pylist() == [str(i) for i in range(count)]
    assert received.schema == MESSAGE_SCHEMA and received.num_rows == count
    # Every body intact, under the message id its send reported.
    by_id = dict(
        zip(received.column("message_id").to_pylist(), received.column("body").to_pylist())
    )
    assert len(by_id) == count
    assert [by_id[mid] for mid in sent.column("message_id").to_pylist()] == bodies
    assert acked.schema == ACK_RESULT_SCHEMA and acked.num_rows == count
    assert set(acked.column("status").to_pylist()) == {"OK"}
    assert (stats.total, stats.leased, stats.deleted_total) == (0, 0, count)


def test_optional_columns_and_per_row_errors(client: QueueClient, queue_name: str) -> None:
    client.create_queue(queue_name, max_message_bytes=1024)
    table = pa.table(
        {
            "payload": ["plain", "x" * 2000, "delayed", "dup", "dup again"],
            "attributes": pa.array(
                [[("kind", "a")], [], None, [("k", "v"), ("k2", "v2")], []],
                pa.map_(pa.string(), pa.string()),
            ),
            "channel": ["eu", None, "", "us", "us"],
            "delay": pa.array([None, None, timedelta(hours=1), None, None], pa.duration("s")),
            "ttl": [None, None, None, 120.0, 120.0],
            "dedup_id": [None, None, None, "once", "once"],
            "key": ["k0", "k1", "k2", "k3", "k4"],
        }
    )
    results = client.send_arrow(queue_name, table, body_column="payload", id_column="key")

    rows = results.to_pylist()
    assert [r["id"] for r in rows] == ["k0", "k1", "k2", "k3", "k4"]
    assert rows[1]["message_id"] is None and rows[1]["error_code"] == "INVALID_ARGUMENT"
    assert "max_message_bytes" in rows[1]["error_message"]
    assert [r["duplicate"] for r in rows] == [False, False, False, False, True]
    assert rows[4]["message_id"] == rows[3]["message_id"]

    got = client.receive_arrow(queue_name, 10, wait_time=0).to_pylist()
    by_body = {r["body"]: r for r in got}
    assert set(by_body) == {b"plain", b"dup"}  # the delayed one is not visible yet
    assert by_body[b"plain"]["attributes"] == [("kind", "a")]
    assert by_body[b"plain"]["channel"] == "eu"
    assert dict(by_body[b"dup"]["attributes"]) == {"k": "v", "k2": "v2"}  # a map: no order
    assert by_body[b"dup"]["delivery_count"] == 1
    assert (by_body[b"dup"]["expires_at"] - by_body[b"dup"]["enqueued_at"]).total_seconds() == 120
    assert by_body[b"dup"]["visible_at"] > by_body[b"dup"]["enqueued_at"]  # leased
    [delayed] = client.peek(queue_name, include_delayed=True)
    assert delayed.body == b"delayed" and delayed.state.name == "DELAYED"


def test_columns_given_by_name_must_exist(client: QueueClient, queue: str) -> None:
    table = pa.table({"body": [b"a"]})
    with pytest.raises(KeyError):
        client.send_arrow(queue, table, channel_column="region")
    with pytest.raises(KeyError):
        client.send_arrow(queue, table, body_column="payload")
    with pytest.raises(ValueError):
        client.send_arrow(queue, pa.table({"body": pa.array([None], pa.binary())}))
    with pytest.raises(ValueError):
        client.send_arrow(queue, table, max_batch_bytes=arrow.MAX_BATCH_BYTES + 1)


def test_acks_report_each_receipt_and_repeat_harmlessly(client: QueueClient, queue: str) -> None:
    client.send_arrow(queue, pa.table({"body": [b"a", b"b", b"c"]}))
    got = client.receive_arrow(queue, 3, wait_time=0)
    first = client.ack_arrow(queue, got.column("receipt").slice(0, 2))  # a ChunkedArray
    again = client.ack_arrow(queue, got)  # a table with a receipt column
    also = client.ack_arrow(queue, ["not-a-receipt"])  # any iterable of strings
    assert first.column("status").to_pylist() == ["OK", "OK"]
    assert again.column("status").to_pylist() == ["ALREADY_DELETED", "ALREADY_DELETED", "OK"]
    assert again.column("receipt").to_pylist() == got.column("receipt").to_pylist()
    assert also.column("status").to_pylist() == ["INVALID_RECEIPT"]
    assert client.stats(queue).total == 0


def test_receive_arrow_of_an_empty_queue_is_an_empty_table(client: QueueClient, queue: str) -> None:
    table = client.receive_arrow(queue, 5, wait_time=0)
    assert table.num_rows == 0 and table.schema == MESSAGE_SCHEMA
    with pytest.raises(ValueError):
        client.receive_arrow(queue, 20_000, attempt_id="a")  # one request only
    with pytest.raises(QueueNotFound):
        client.receive_arrow(queue + "-missing", 5, wait_time=0)


async def test_async_twins(aclient: AsyncQueueClient, queue_name: str) -> None:
    await aclient.create_queue(queue_name)
    sent = await aclient.send_arrow(queue_name, pa.table({"body": ["x", "y"]}))
    got = await aclient.receive_arrow(queue_name, 10, wait_time=0)
    acked = await aclient.ack_arrow(queue_name, got)
    assert sent.num_rows == got.num_rows == acked.num_rows == 2
    assert sorted(got.column("body").to_pylist()) == [b"x", b"y"]


# --- cutting requests (the plan, driven by hand) ---------------------------------------------


def _requests(table: pa.Table, max_bytes: int) -> list[tuple[pb.SendMessagesRequest, list[str]]]:
    return [
        (pb.SendMessagesRequest.FromString(r.raw), r.ids.to_pylist())
        for r in arrow._send_requests(
            "q",
            table,
            max_bytes,
            body_column="body",
            attributes_column="attributes",
            channel_column="channel",
            delay_column="delay",
            ttl_column="ttl",
            dedup_id_column="dedup_id",
            id_column="id",
        )
    ]


def test_requests_are_cut_by_rows() -> None:
    requests = _requests(pa.table({"body": [b"x"] * 25_001}), arrow.DEFAULT_BATCH_BYTES)
    assert [len(r.entries) for r, _ in requests] == [10_000, 10_000, 5_001]
    assert [e.id for e in requests[1][0].entries[:2]] == ["0", "1"]  # positions per request
    assert requests[1][1][:2] == ["10000", "10001"]  # result ids: positions in the table


def test_requests_are_cut_by_bytes_below_the_grpc_limit() -> None:
    body = b"b" * (100 * 1024)
    requests = _requests(pa.table({"body": [body] * 100}), 1 * MiB)
    assert sum(len(r.entries) for r, _ in requests) == 100
    assert all(r.ByteSize() <= 1 * MiB for r, _ in requests)
    assert len(requests) == 10
    # A row larger than the cut travels alone; the default cut keeps an 8 MiB row far below
    # the 64 MiB limit of a gRPC message.
    big = _requests(pa.table({"body": [b"s", b"B" * (2 * MiB), b"s"]}), 1 * MiB)
    assert [len(r.entries) for r, _ in big] == [1, 1, 1]
    assert arrow.MAX_BATCH_BYTES + 8 * MiB < arrow.MAX_MESSAGE_SIZE


def test_a_failure_after_the_first_request_is_reported_per_row() -> None:
    table = pa.table({"body": [b"x"] * 25_000})
    plan = arrow.send_arrow(
        "q",
        table,
        body_column="body",
        attributes_column=None,
        channel_column=None,
        delay_column=None,
        ttl_column=None,
        dedup_id_column=None,
        id_column=None,
        max_batch_bytes=arrow.DEFAULT_BATCH_BYTES,
    )
    call = next(plan)
    entries = pb.SendMessagesRequest.FromString(call.request).entries
    answer = pb.SendMessagesResponse(
        results=[pb.SendResult(id=e.id, message_id=f"m{e.id}") for e in entries]
    )
    assert call.retry is False  # no dedup ids: a repeat could enqueue twice
    plan.send(answer.SerializeToString())
    with pytest.raises(StopIteration) as done:
        plan.throw(Unavailable("server gone"))  # the second request fails
    results: pa.Table = done.value.value
    codes = results.column("error_code").to_pylist()
    messages = results.column("error_message").to_pylist()
    assert codes[:10_000] == [None] * 10_000
    assert set(codes[10_000:]) == {"UNAVAILABLE"}
    assert messages[10_000].startswith("outcome unknown") and messages[20_000].startswith(
        "not sent"
    )


def test_a_failure_of_the_first_request_raises() -> None:
    plan = arrow.ack_arrow("q", ["r1"], max_batch_bytes=arrow.DEFAULT_BATCH_BYTES)
    call = next(plan)
    assert call.retry is True  # acks are safe to repeat
    with pytest.raises(QueueNotFound):
        plan.throw(QueueNotFound("gone"))


def test_importing_the_client_does_not_load_pyarrow() -> None:
    code = "import sys, leaseq.client; assert 'pyarrow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
