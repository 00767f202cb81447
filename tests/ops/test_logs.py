"""Request ids (echoed in trailing metadata, in every log record of the call) and the structured
logs of `leaseq serve`: JSON lines when stderr is not a terminal, no bodies or tokens."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys

import grpc
import pytest

from leaseq.server.logs import JsonFormatter, RequestIdFilter, TextFormatter, request_id_var
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import running_server

BODY = b"BODY-MUST-NOT-BE-LOGGED"
TOKEN = "TOKEN-MUST-NOT-BE-LOGGED"


def request_id(call: grpc.Call | grpc.RpcError) -> str | None:
    return dict(call.trailing_metadata() or ()).get("x-request-id")


def test_request_ids_are_echoed_in_the_trailers() -> None:
    with running_server() as server, grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        _, call = stub.CreateQueue.with_call(
            pb.CreateQueueRequest(name="q"), metadata=[("x-request-id", "client-id-1")]
        )
        assert request_id(call) == "client-id-1"
        # Generated when the caller sends none (or one that is not a sane token).
        _, call = stub.GetQueue.with_call(pb.GetQueueRequest(name="q"))
        assert re.fullmatch(r"[0-9a-f]{32}", request_id(call) or "")
        _, call = stub.GetQueue.with_call(
            pb.GetQueueRequest(name="q"), metadata=[("x-request-id", "two words")]
        )
        assert re.fullmatch(r"[0-9a-f]{32}", request_id(call) or "")
        # A failed call keeps its google.rpc details and gets the id too.
        with pytest.raises(grpc.RpcError) as failed:
            stub.GetQueue(pb.GetQueueRequest(name="nope"), metadata=[("x-request-id", "id-2")])
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND
        assert request_id(failed.value) == "id-2"
        assert "grpc-status-details-bin" in dict(failed.value.trailing_metadata())
        # Streams too.
        stream = stub.GetMessages(
            pb.GetMessagesRequest(queue="q", max_messages=1, wait_time={}),
            metadata=[("x-request-id", "id-3")],
        )
        assert [len(r.messages) for r in stream] == [0]
        assert request_id(stream) == "id-3"


def test_json_and_text_formats() -> None:
    record = logging.LogRecord("leaseq.x", logging.ERROR, __file__, 1, "failed %s", ("here",), None)
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    record.queue = "q"
    token = request_id_var.set("rid-1")
    try:
        RequestIdFilter().filter(record)
    finally:
        request_id_var.reset(token)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "error" and entry["logger"] == "leaseq.x"
    assert entry["message"] == "failed here"
    assert entry["request_id"] == "rid-1" and entry["queue"] == "q"
    assert "ValueError: boom" in entry["exception"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])
    record.exc_info = None
    assert TextFormatter().format(record).endswith("failed here [request_id=rid-1]")


def test_the_library_configures_no_logging() -> None:
    code = (
        "import logging, asyncio\n"
        "from leaseq.server.app import build\n"
        "from leaseq.server.store import open_store\n"
        "import leaseq.client, leaseq.cli.main\n"
        "async def main():\n"
        "    store = open_store('memory://'); await store.open()\n"
        "    built = build(store, '127.0.0.1:0'); await built.start(); await built.stop_now()\n"
        "    await store.close()\n"
        "asyncio.run(main())\n"
        "root = logging.getLogger()\n"
        "assert not root.handlers and root.level == logging.WARNING, (root.handlers, root.level)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_serve_writes_json_lines_with_request_ids_and_no_secrets(serve_process, tmp_path) -> None:
    server = serve_process(tmp_path, "memory://", "--log-level", "debug").start()
    metadata = [("x-request-id", "rid-send"), ("authorization", f"Bearer {TOKEN}")]
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        stub.CreateQueue(pb.CreateQueueRequest(name="q"))
        stub.SendMessages(
            pb.SendMessagesRequest(
                queue="q", entries=[pb.SendEntry(body=BODY, attributes={"a": TOKEN})]
            ),
            metadata=metadata,
        )
        [batch] = stub.GetMessages(pb.GetMessagesRequest(queue="q", max_messages=1))
        assert batch.messages[0].body == BODY
        with pytest.raises(grpc.RpcError):
            stub.GetQueue(pb.GetQueueRequest(name="nope"), metadata=[("x-request-id", "rid-404")])
    server.terminate()
    assert server.wait(30) == 0
    text = server.stderr()
    assert BODY.decode() not in text and TOKEN not in text
    entries = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    # Every line Python logging wrote is one JSON object.
    assert len(entries) == len([line for line in text.splitlines() if line.startswith("{")])
    assert any(e["message"].startswith("listening on ") for e in entries)
    access = {e.get("request_id"): e for e in entries if e["logger"] == "leaseq.access"}
    sent = access["rid-send"]
    assert (sent["rpc_method"], sent["rpc_code"], sent["queue"], sent["level"]) == (
        "SendMessages",
        "OK",
        "q",
        "debug",
    )
    assert sent["duration_ms"] >= 0 and sent["peer"].startswith("ipv4:127.0.0.1:")
    missing = access["rid-404"]
    assert (missing["rpc_code"], missing["level"]) == ("NOT_FOUND", "info")


def test_configure_logging_auto_picks_json_off_a_terminal() -> None:
    from leaseq.server import logs

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    root = logging.getLogger()
    saved = (
        root.handlers[:],
        root.level,
        {n: logging.getLogger(n).level for n in ("grpc", "asyncio")},
    )
    try:
        for stream, is_json in ((io.StringIO(), True), (Tty(), False)):
            logs.configure_logging("info", "auto", stream)
            logging.getLogger("leaseq.test").info("hello")
            line = stream.getvalue().strip()
            assert line.startswith("{") is is_json, line
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        for name, level in saved[2].items():
            logging.getLogger(name).setLevel(level)
        logging.captureWarnings(False)


def test_new_request_ids_are_distinct_hex_and_a_forked_child_draws_its_own() -> None:
    """Generated ids are 32 hex digits, never repeated within a process (a counter after a random
    half), and a forked worker's ids do not collide with its parent's (it draws a new half)."""
    import os

    from leaseq.server.logs import new_request_id

    ids = [new_request_id() for _ in range(1000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one id and leave at once
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert re.fullmatch(r"[0-9a-f]{32}", child)
    assert child[:16] != ids[0][:16]


def test_an_observed_handler_is_made_once_per_method_and_again_when_the_handler_changes() -> None:
    """The interceptors wrap a method's handler once (not at every call), and wrap anew a handler
    an inner interceptor made for this call only (auth makes one per call): each call is
    observed by its own observation either way."""
    import asyncio

    from leaseq.server.interceptors import Observation, ObservedHandlers

    started: list[tuple[str, str, object]] = []

    def start_for(service: str, method: str):
        def start(request, context):
            started.append((service, method, request))
            return Observation(context)

        return start

    async def behaviour(request, context):
        return request * 2

    observed = ObservedHandlers(start_for)
    handler = grpc.unary_unary_rpc_method_handler(behaviour)
    first = observed.get("/s.S/M", handler)
    assert observed.get("/s.S/M", handler) is first
    assert observed.get("/s.S/Unknown", None) is None

    class Context:
        def time_remaining(self):
            return None

        def code(self):
            return None

    assert asyncio.run(first.unary_unary(3, Context())) == 6
    assert asyncio.run(first.unary_unary(4, Context())) == 8
    per_call = grpc.unary_unary_rpc_method_handler(behaviour)
    second = observed.get("/s.S/M", per_call)
    assert second is not first
    assert asyncio.run(second.unary_unary(5, Context())) == 10
    assert started == [("s.S", "M", 3), ("s.S", "M", 4), ("s.S", "M", 5)]
