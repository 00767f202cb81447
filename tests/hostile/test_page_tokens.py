"""Page tokens are sealed: they show nothing of what the caller may not see, and a forged,
altered, foreign or absurd token is INVALID_ARGUMENT."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from leaseq.server.errors import InvalidArgument
from leaseq.server.page_tokens import MAX_TOKEN_CHARS, PageTokens
from leaseq.server.receipts import new_signing_key
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.hostile.conftest import url_for
from tests.hostile.policy import ALICE, ROOT, security
from tests.support.server import RunningServer, running_server

SECRET_NAMES = ("hr-salaries", "hr-reviews", "payroll-2026")


@pytest.fixture(params=("memory", "sqlite", "postgres"))
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningServer]:
    for url in url_for(request.param, tmp_path):
        with running_server(url, security=security()) as running:
            yield running


@pytest.fixture
def stub(server: RunningServer) -> Iterator[pb_grpc.QueueServiceStub]:
    with grpc.insecure_channel(server.target) as channel:
        yield pb_grpc.QueueServiceStub(channel)


def _code(call, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    try:
        call(*args, **kwargs)
    except grpc.RpcError as error:
        return error.code(), error.details()
    return grpc.StatusCode.OK, ""


def _bytes_of(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def test_list_tokens_show_nothing_a_principal_may_not_see(stub) -> None:
    for name in ("a-1", "a-2", *SECRET_NAMES, "z-last"):
        stub.CreateQueue(pb.CreateQueueRequest(name=name), metadata=ROOT)
    seen, token, tokens = [], "", []
    while True:
        page = stub.ListQueues(pb.ListQueuesRequest(page_size=1, page_token=token), metadata=ALICE)
        seen += [q.name for q in page.queues]
        token = page.next_page_token
        if not token:
            break
        tokens.append(token)
    assert seen == ["a-1", "a-2"]
    assert len(tokens) == 5  # a page after each of the 6 queues but the last
    for token in tokens:
        raw = _bytes_of(token)
        for name in (*SECRET_NAMES, "z-last", "hr", "payroll"):
            # Two bytes turn up by chance in ~75 random bytes in about 0.1% of tokens: a short
            # name (a prefix) is looked for as a JSON string would start it.
            needle = name.encode() if len(name) > 3 else f'"{name}'.encode()
            assert needle not in raw, token
        assert b'"k":' not in raw  # no JSON in the clear at all


def test_peek_tokens_are_sealed_too(stub) -> None:
    stub.CreateQueue(pb.CreateQueueRequest(name="a-q"), metadata=ROOT)
    stub.SendMessages(
        pb.SendMessagesRequest(
            queue="a-q", entries=[pb.SendEntry(body=b"x", channel="chan-9")] * 3
        ),
        metadata=ALICE,
    )
    page = stub.PeekMessages(
        pb.PeekMessagesRequest(queue="a-q", max_messages=1, channel_filter="chan-9"), metadata=ALICE
    )
    raw = _bytes_of(page.next_page_token)
    assert b"chan-9" not in raw and b'"k":' not in raw
    nxt = stub.PeekMessages(
        pb.PeekMessagesRequest(
            queue="a-q", max_messages=5, channel_filter="chan-9", page_token=page.next_page_token
        ),
        metadata=ALICE,
    )
    assert len(nxt.messages) == 2


def _tampered(token: str) -> list[str]:
    raw = bytearray(_bytes_of(token))
    variants = []
    for at in (0, 1, len(raw) // 2, len(raw) - 1):  # version, nonce, ciphertext, mac
        flipped = bytearray(raw)
        flipped[at] ^= 0x01
        variants.append(base64.urlsafe_b64encode(bytes(flipped)).rstrip(b"=").decode())
    variants.append(token[:-1])  # truncated
    variants.append(token + "A")  # longer
    variants.append(token + "=")  # the same bytes, another spelling
    return variants


def test_tampered_and_foreign_tokens_are_invalid_argument(stub, tmp_path: Path) -> None:
    for name in ("a-1", "a-2", "a-3"):
        stub.CreateQueue(pb.CreateQueueRequest(name=name), metadata=ROOT)
    stub.SendMessages(
        pb.SendMessagesRequest(queue="a-1", entries=[pb.SendEntry(body=b"x")] * 3), metadata=ROOT
    )
    listed = stub.ListQueues(pb.ListQueuesRequest(page_size=1), metadata=ROOT).next_page_token
    peeked = stub.PeekMessages(
        pb.PeekMessagesRequest(queue="a-1", max_messages=1), metadata=ROOT
    ).next_page_token
    foreign = PageTokens(new_signing_key())  # another store's secret
    bad_list = [*_tampered(listed), foreign.encode_list("", "a-1"), peeked]
    bad_peek = [*_tampered(peeked), foreign.encode_peek("a-1", (0.0, 1), "", False, False), listed]
    for token in bad_list:
        code, details = _code(
            stub.ListQueues, pb.ListQueuesRequest(page_size=1, page_token=token), metadata=ROOT
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in details, token
    for token in bad_peek:
        code, details = _code(
            stub.PeekMessages,
            pb.PeekMessagesRequest(queue="a-1", max_messages=1, page_token=token),
            metadata=ROOT,
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in details, token
    # A peek token of one queue does not continue another's listing.
    code, _ = _code(
        stub.PeekMessages,
        pb.PeekMessagesRequest(queue="a-2", max_messages=1, page_token=peeked),
        metadata=ROOT,
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    # The genuine ones still work.
    assert stub.ListQueues(pb.ListQueuesRequest(page_size=1, page_token=listed), metadata=ROOT)


def test_absurd_tokens_are_invalid_argument_not_internal(stub) -> None:
    """Item 5: base64 of 100,000 '[' and as many ']' was parsed as JSON (RecursionError: INTERNAL)."""
    stub.CreateQueue(pb.CreateQueueRequest(name="a-q"), metadata=ROOT)
    nested = base64.urlsafe_b64encode(b"[" * 100_000 + b"]" * 100_000).decode().rstrip("=")
    for token in (nested, "%%%", "e30", "A" * (MAX_TOKEN_CHARS + 1), "é", "\x00"):
        code, details = _code(
            stub.ListQueues, pb.ListQueuesRequest(page_token=token), metadata=ROOT
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and len(details) < 200, token[:20]
        code, details = _code(
            stub.PeekMessages,
            pb.PeekMessagesRequest(queue="a-q", max_messages=1, page_token=token),
            metadata=ROOT,
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and len(details) < 200, token[:20]


def test_tokens_survive_a_restart_of_a_durable_store(tmp_path: Path) -> None:
    """The secret is the store's: a token issued before a restart still continues the listing."""
    url = next(url_for("sqlite", tmp_path))
    with running_server(url) as first, grpc.insecure_channel(first.target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        for name in ("q1", "q2", "q3"):
            stub.CreateQueue(pb.CreateQueueRequest(name=name))
        token = stub.ListQueues(pb.ListQueuesRequest(page_size=1)).next_page_token
    with running_server(url) as second, grpc.insecure_channel(second.target) as channel:
        page = pb_grpc.QueueServiceStub(channel).ListQueues(
            pb.ListQueuesRequest(page_size=5, page_token=token)
        )
        assert [q.name for q in page.queues] == ["q2", "q3"]


def test_the_codec_round_trips_and_binds_its_parameters() -> None:
    tokens = PageTokens(new_signing_key())
    cursor = (1_800_000_000.1234567, 42)
    token = tokens.encode_peek("q", cursor, "a*", True, False)
    assert tokens.decode_peek(token, "q", "a*", True, False) == cursor
    assert tokens.encode_peek("q", cursor, "a*", True, False) != token  # a fresh nonce each time
    for other in (("q", "a*", True, True), ("r", "a*", True, False)):
        with pytest.raises(InvalidArgument):
            tokens.decode_peek(token, *other)
    listed = tokens.encode_list("a", "a2")
    assert tokens.decode_list(listed, "a") == "a2"
    with pytest.raises(InvalidArgument):
        tokens.decode_list(listed, "")
