"""API.md's error table over real gRPC: status codes and google.rpc details, and that bad input
changes nothing."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import duration_pb2, field_mask_pb2

from leaseq.v1 import queue_service_pb2 as pb

from .conftest import create, details_of, receive_once, rpc_error, send, stats

D = duration_pb2.Duration


def assert_out_of_range(error, field: str, value: str, minimum: str, maximum: str) -> None:
    got = details_of(error)
    assert got.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in got.violations] == [field]
    assert got.error_info is not None
    assert got.error_info.reason == "OUT_OF_RANGE"
    assert got.error_info.domain == "leaseq.v1"
    assert dict(got.error_info.metadata) == {
        "field": field,
        "value": value,
        "minimum": minimum,
        "maximum": maximum,
    }


def assert_bad_request(error, field: str) -> str:
    """INVALID_ARGUMENT with a BadRequest naming field (and no OUT_OF_RANGE); the description."""
    got = details_of(error)
    assert got.code == grpc.StatusCode.INVALID_ARGUMENT, got
    assert [f for f, _ in got.violations] == [field], got.violations
    assert got.error_info is None
    return got.violations[0][1]


# --- OUT_OF_RANGE -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 10_001])
async def test_get_messages_max_messages_out_of_range(stub, value) -> None:
    await create(stub)
    error = await rpc_error(stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=value)))
    assert_out_of_range(error, "max_messages", str(value), "1", "10000")


async def test_peek_max_messages_out_of_range(stub) -> None:
    await create(stub)
    error = await rpc_error(stub.PeekMessages(pb.PeekMessagesRequest(queue="q", max_messages=0)))
    assert_out_of_range(error, "max_messages", "0", "1", "10000")


@pytest.mark.parametrize(
    "request_fields, field, value, minimum, maximum",
    [
        (
            {"visibility_timeout": D(seconds=604801)},
            "visibility_timeout",
            "604801s",
            "0s",
            "604800s",
        ),
        ({"wait_time": D(seconds=31)}, "wait_time", "31s", "0s", "30s"),
        ({"wait_time": D(seconds=30, nanos=1)}, "wait_time", "30.000000001s", "0s", "30s"),
        ({"visibility_timeout": D(seconds=-1)}, "visibility_timeout", "-1s", "0s", "604800s"),
        ({"max_outstanding": 100_001, "follow": True}, "max_outstanding", "100001", "1", "100000"),
        ({"max_outstanding": -5, "follow": True}, "max_outstanding", "-5", "1", "100000"),
    ],
)
async def test_get_messages_ranges(stub, request_fields, field, value, minimum, maximum) -> None:
    await create(stub)
    request = pb.GetMessagesRequest(queue="q", max_messages=1, **request_fields)
    error = await rpc_error(stub.GetMessages(request))
    assert_out_of_range(error, field, value, minimum, maximum)


@pytest.mark.parametrize(
    "config, field, value, minimum, maximum",
    [
        (
            {"visibility_timeout": D(seconds=604801)},
            "config.visibility_timeout",
            "604801s",
            "0s",
            "604800s",
        ),
        ({"receive_wait_time": D(seconds=31)}, "config.receive_wait_time", "31s", "0s", "30s"),
        (
            {"message_retention": D(seconds=59)},
            "config.message_retention",
            "59s",
            "60s",
            "1209600s",
        ),
        ({"max_message_bytes": 1023}, "config.max_message_bytes", "1023", "1024", "8388608"),
        ({"max_in_flight": 0}, "config.max_in_flight", "0", "1", "10000000"),
        ({"dedup_window": D(seconds=3601)}, "config.dedup_window", "3601s", "0s", "3600s"),
        (
            {"message_retention": D(seconds=120), "default_delay": D(seconds=121)},
            "config.default_delay",
            "121s",
            "0s",
            "120s",
        ),
        (
            {"dead_letter_queue": "dlq", "max_delivery_count": 1001},
            "config.max_delivery_count",
            "1001",
            "1",
            "1000",
        ),
    ],
)
async def test_queue_config_ranges(stub, config, field, value, minimum, maximum) -> None:
    await create(stub, "dlq")
    error = await rpc_error(
        stub.CreateQueue(pb.CreateQueueRequest(name="q", config=pb.QueueConfig(**config)))
    )
    assert_out_of_range(error, field, value, minimum, maximum)
    # Nothing was created.
    assert details_of(await rpc_error(stub.GetQueue(pb.GetQueueRequest(name="q")))).code == (
        grpc.StatusCode.NOT_FOUND
    )


async def test_batch_sizes(stub) -> None:
    await create(stub)
    error = await rpc_error(stub.SendMessages(pb.SendMessagesRequest(queue="q")))
    assert_out_of_range(error, "entries", "0", "1", "10000")
    error = await rpc_error(
        stub.SendMessages(
            pb.SendMessagesRequest(queue="q", entries=[pb.SendEntry(body=b"x")] * 10_001)
        )
    )
    assert_out_of_range(error, "entries", "10001", "1", "10000")
    error = await rpc_error(stub.ChangeVisibility(pb.ChangeVisibilityRequest(queue="q")))
    assert_out_of_range(error, "entries", "0", "1", "10000")
    error = await rpc_error(stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q")))
    assert_out_of_range(error, "receipts", "0", "1", "10000")
    error = await rpc_error(
        stub.DeleteMessages(
            pb.DeleteMessagesRequest(
                queue="q", receipts=["r"] * 5_000, receive_attempt_ids=["a"] * 5_001
            )
        )
    )
    assert_out_of_range(error, "receipts", "10001", "1", "10000")
    assert (await stats(stub)).total == 0  # the 10,001-entry batch stored nothing


async def test_list_queues_page_size(stub) -> None:
    error = await rpc_error(stub.ListQueues(pb.ListQueuesRequest(page_size=1001)))
    assert_out_of_range(error, "page_size", "1001", "1", "1000")


# --- malformed requests -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["", "has space", "a" * 81, "dot.ted", "ünï", ".fifo", "a.fifo.fifo", "a" * 76 + ".fifo"],
)
async def test_bad_queue_name(stub, name) -> None:
    error = await rpc_error(stub.CreateQueue(pb.CreateQueueRequest(name=name)))
    assert "1-80 characters" in assert_bad_request(error, "name")
    error = await rpc_error(stub.GetQueue(pb.GetQueueRequest(name=name)))
    assert_bad_request(error, "name")
    error = await rpc_error(receive_once(stub, queue=name))
    assert_bad_request(error, "queue")
    assert (await stub.ListQueues(pb.ListQueuesRequest())).queues == []


async def test_name_of_80_characters_is_fine(stub) -> None:
    queue = await create(stub, "A-z_9" * 16)
    assert queue.name == "A-z_9" * 16
    queue = await create(stub, "A-z_9" * 15 + ".fifo")  # an SQS FIFO queue's name
    assert queue.name == "A-z_9" * 15 + ".fifo"


@pytest.mark.parametrize(
    "duration",
    [D(seconds=1, nanos=-1), D(seconds=-1, nanos=1), D(nanos=1_000_000_000), D(seconds=10**12)],
)
async def test_malformed_duration(stub, duration) -> None:
    await create(stub)
    error = await rpc_error(
        stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=1, wait_time=duration))
    )
    assert "malformed Duration" in assert_bad_request(error, "wait_time")


async def test_unparsable_request_bytes_are_invalid_argument(channel) -> None:
    call = channel.unary_unary("/leaseq.v1.QueueService/GetQueue")
    error = await rpc_error(call(b"\xff\xff\xff\xff"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    stream = channel.unary_stream("/leaseq.v1.QueueService/GetMessages")
    error = await rpc_error(stream(b"\x0a\x05ab"))  # a string field longer than the message
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_receive_attempt_id_rules(stub) -> None:
    await create(stub)
    error = await rpc_error(receive_once(stub, queue="q", follow=True, receive_attempt_id="a"))
    assert assert_bad_request(error, "receive_attempt_id") == "only for non-follow receives"
    error = await rpc_error(receive_once(stub, queue="q", receive_attempt_id="a" * 129))
    assert_bad_request(error, "receive_attempt_id")


async def test_follow_needs_a_lease(stub) -> None:
    await create(stub)
    error = await rpc_error(
        receive_once(stub, queue="q", follow=True, visibility_timeout=D(seconds=0))
    )
    assert_bad_request(error, "visibility_timeout")


@pytest.mark.parametrize("flt", ["a*b", "**", "x" * 65])
async def test_bad_channel_filter(stub, flt) -> None:
    await create(stub)
    error = await rpc_error(receive_once(stub, queue="q", channel_filter=flt, wait_time=D()))
    assert_bad_request(error, "channel_filter")


async def test_duplicate_entry_ids_fail_the_batch(stub) -> None:
    await create(stub)
    entries = [
        pb.SendEntry(id="a", body=b"1"),
        pb.SendEntry(id="", body=b"2"),
        pb.SendEntry(id="", body=b"3"),
        pb.SendEntry(id="a", body=b"4"),
    ]
    error = await rpc_error(stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries)))
    assert "entries[0]" in assert_bad_request(error, "entries[3].id")
    assert (await stats(stub)).total == 0


async def test_empty_receive_attempt_id_in_delete(stub) -> None:
    await create(stub)
    await send(stub, "q", b"x")
    await receive_once(stub, queue="q", max_messages=1)
    error = await rpc_error(
        stub.DeleteMessages(pb.DeleteMessagesRequest(queue="q", receive_attempt_ids=[""]))
    )
    assert_bad_request(error, "receive_attempt_ids[0]")
    assert (await stats(stub)).leased == 1


async def test_malformed_page_tokens(stub) -> None:
    await create(stub)
    for token in ["%%%", "bm90IGpzb24", "e30"]:  # not base64, not JSON, JSON of another kind
        error = await rpc_error(stub.ListQueues(pb.ListQueuesRequest(page_token=token)))
        assert_bad_request(error, "page_token")
        error = await rpc_error(
            stub.PeekMessages(pb.PeekMessagesRequest(queue="q", max_messages=1, page_token=token))
        )
        assert_bad_request(error, "page_token")


async def test_page_token_of_another_listing_is_refused(stub) -> None:
    for name in ("a1", "a2", "a3"):
        await create(stub, name)
    page = await stub.ListQueues(pb.ListQueuesRequest(prefix="a", page_size=1))
    assert page.next_page_token
    error = await rpc_error(
        stub.ListQueues(pb.ListQueuesRequest(prefix="b", page_token=page.next_page_token))
    )
    assert_bad_request(error, "page_token")


async def test_update_mask_with_unknown_path(stub) -> None:
    await create(stub)
    error = await rpc_error(
        stub.UpdateQueue(
            pb.UpdateQueueRequest(name="q", update_mask=field_mask_pb2.FieldMask(paths=["nope"]))
        )
    )
    assert_bad_request(error, "update_mask")


async def test_dead_letter_pair_is_set_together(stub) -> None:
    await create(stub, "dlq")
    error = await rpc_error(
        stub.CreateQueue(
            pb.CreateQueueRequest(name="q", config=pb.QueueConfig(dead_letter_queue="dlq"))
        )
    )
    assert "together" in assert_bad_request(error, "config.max_delivery_count")
    error = await rpc_error(
        stub.CreateQueue(
            pb.CreateQueueRequest(
                name="q", config=pb.QueueConfig(dead_letter_queue="q", max_delivery_count=3)
            )
        )
    )
    assert_bad_request(error, "config.dead_letter_queue")


async def test_change_visibility_entry_needs_a_timeout(stub) -> None:
    await create(stub)
    error = await rpc_error(
        stub.ChangeVisibility(
            pb.ChangeVisibilityRequest(queue="q", entries=[pb.ChangeVisibilityEntry(receipt="r")])
        )
    )
    assert_bad_request(error, "entries[0].visibility_timeout")


# --- per-entry errors of SendMessages ---------------------------------------------------------


async def test_body_over_max_message_bytes_fails_only_its_entry(stub) -> None:
    await create(stub, max_message_bytes=1024)
    entries = [
        pb.SendEntry(id="ok", body=b"x" * 1024),
        pb.SendEntry(id="big", body=b"x" * 1025),
        pb.SendEntry(id="attrs", body=b"x" * 1000, attributes={"k" * 12: "v" * 13}),
        pb.SendEntry(id="late", delay=D(seconds=8 * 86400)),
        pb.SendEntry(id="short", ttl=D(nanos=999_999_999)),
        pb.SendEntry(id="many", attributes={str(i): "" for i in range(17)}),
        pb.SendEntry(id="chan", channel="c" * 65),
        pb.SendEntry(id="dedup", dedup_id="d" * 129),
        pb.SendEntry(id="ok2", body=b"y", channel="c" * 64, dedup_id="d" * 128),
    ]
    reply = await stub.SendMessages(pb.SendMessagesRequest(queue="q", entries=entries))
    by_id = {r.id: r for r in reply.results}
    assert [r.id for r in reply.results] == [e.id for e in entries]
    for ok in ("ok", "ok2"):
        assert by_id[ok].message_id and not by_id[ok].HasField("error")
    expected_fields = {
        "big": "entries[1].body",
        "attrs": "entries[2].body",
        "late": "entries[3].delay",
        "short": "entries[4].ttl",
        "many": "entries[5].attributes",
        "chan": "entries[6].channel",
        "dedup": "entries[7].dedup_id",
    }
    for entry_id, field in expected_fields.items():
        result = by_id[entry_id]
        assert result.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] == 3
        assert result.error.message.startswith(field + ":"), result.error.message
        assert result.message_id == ""
    assert (await stats(stub)).total == 2


# --- other statuses ---------------------------------------------------------------------------


async def test_queue_not_found(stub) -> None:
    calls = [
        stub.GetQueue(pb.GetQueueRequest(name="nope")),
        stub.GetQueueStats(pb.GetQueueStatsRequest(name="nope")),
        stub.SendMessages(pb.SendMessagesRequest(queue="nope", entries=[pb.SendEntry()])),
        stub.GetMessages(pb.GetMessagesRequest(queue="nope", max_messages=1)),
        stub.PeekMessages(pb.PeekMessagesRequest(queue="nope", max_messages=1)),
        stub.PurgeQueue(pb.PurgeQueueRequest(name="nope")),
        stub.DeleteQueue(pb.DeleteQueueRequest(name="nope")),
    ]
    for call in calls:
        got = details_of(await rpc_error(call))
        assert got.code == grpc.StatusCode.NOT_FOUND
        assert got.error_info.reason == "QUEUE_NOT_FOUND"
        assert got.error_info.metadata["queue"] == "nope"


async def test_create_again_same_config_is_a_no_op_other_config_already_exists(stub) -> None:
    first = await create(stub, visibility_timeout=D(seconds=10))
    again = await create(stub, visibility_timeout=D(seconds=10))
    assert again == first
    error = await rpc_error(
        stub.CreateQueue(
            pb.CreateQueueRequest(name="q", config=pb.QueueConfig(visibility_timeout=D(seconds=11)))
        )
    )
    assert details_of(error).code == grpc.StatusCode.ALREADY_EXISTS
    queue = (await stub.GetQueue(pb.GetQueueRequest(name="q"))).queue
    assert queue.config.visibility_timeout.seconds == 10


async def test_over_limit_fails_a_non_follow_receive(stub) -> None:
    await create(stub, max_in_flight=1)
    await send(stub, "q", b"a", b"b")
    [first] = await receive_once(stub, queue="q", max_messages=5)
    assert len(first.messages) == 1  # capped by max_in_flight
    error = await rpc_error(stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=1)))
    got = details_of(error)
    assert got.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert got.error_info.reason == "OVER_LIMIT"
    assert got.error_info.metadata["limit"] == "1"
    # A delivery without a lease is not limited.
    [peekish] = await receive_once(stub, queue="q", max_messages=1, visibility_timeout=D())
    assert [m.body for m in peekish.messages] == [b"b"]


async def test_update_message_with_a_bad_receipt(stub) -> None:
    await create(stub)
    error = await rpc_error(
        stub.UpdateMessage(pb.UpdateMessageRequest(queue="q", receipt="forged", body=b"x"))
    )
    got = details_of(error)
    assert got.code == grpc.StatusCode.INVALID_ARGUMENT
    assert got.error_info.reason == "INVALID_RECEIPT"


async def test_invalid_update_leaves_the_queue_unchanged(stub) -> None:
    before = await create(stub, visibility_timeout=D(seconds=10))
    error = await rpc_error(
        stub.UpdateQueue(
            pb.UpdateQueueRequest(
                name="q",
                config=pb.QueueConfig(visibility_timeout=D(seconds=5), max_in_flight=0),
            )
        )
    )
    assert_out_of_range(error, "config.max_in_flight", "0", "1", "10000000")
    assert (await stub.GetQueue(pb.GetQueueRequest(name="q"))).queue == before


async def test_invalid_change_visibility_changes_no_entry(stub) -> None:
    await create(stub)
    await send(stub, "q", b"a")
    [reply] = await receive_once(stub, queue="q", visibility_timeout=D(seconds=60))
    receipt = reply.messages[0].receipt
    error = await rpc_error(
        stub.ChangeVisibility(
            pb.ChangeVisibilityRequest(
                queue="q",
                entries=[
                    pb.ChangeVisibilityEntry(receipt=receipt, visibility_timeout=D()),
                    pb.ChangeVisibilityEntry(receipt=receipt, visibility_timeout=D(seconds=-3)),
                ],
            )
        )
    )
    assert_out_of_range(error, "entries[1].visibility_timeout", "-3s", "0s", "604800s")
    assert (await stats(stub)).leased == 1  # the valid first entry did not release it


async def test_draining_server_refuses_new_rpcs_with_retry_info(server, stub) -> None:
    await create(stub)
    server.drain()
    got = details_of(await rpc_error(stub.GetQueue(pb.GetQueueRequest(name="q"))))
    assert got.code == grpc.StatusCode.UNAVAILABLE
    assert got.retry_info is not None and got.retry_info.retry_delay.seconds == 1
    got = details_of(await rpc_error(receive_once(stub, queue="q")))
    assert got.code == grpc.StatusCode.UNAVAILABLE


async def test_release_reason_is_bounded(stub) -> None:
    await create(stub)
    [message_id] = await send(stub, "q", b"1")
    [response] = await receive_once(stub, queue="q", max_messages=1)
    receipt = response.messages[0].receipt
    error = await rpc_error(
        stub.ChangeVisibility(
            pb.ChangeVisibilityRequest(
                queue="q",
                entries=[
                    pb.ChangeVisibilityEntry(
                        receipt=receipt, visibility_timeout=D(seconds=0), reason="x" * 1025
                    )
                ],
            )
        )
    )
    assert_bad_request(error, "entries[0].reason")
    # The refused release changed nothing: the message is still leased.
    assert (await stats(stub)).leased == 1
