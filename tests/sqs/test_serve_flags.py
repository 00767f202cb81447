"""`leaseq serve --sqs-listen` / LEASEQ_SQS_LISTEN: start-up rules and shutdown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from botocore.exceptions import ClientError

from tests.support import http_frontend
from tests.support.process import free_port

from .conftest import boto3_client, unique

pytestmark = pytest.mark.slow


def test_a_busy_sqs_port_fails_start_up_with_one_line():
    http_frontend.assert_a_busy_port_fails_with_one_line("--sqs-listen")


def test_a_non_loopback_sqs_address_needs_auth_or_allow_unauthenticated():
    http_frontend.assert_non_loopback_needs_auth_or_allow_unauthenticated("--sqs-listen")


def test_env_variable_and_drain_answers_a_waiting_long_poll(tmp_path):
    port = free_port()
    grpc_port = free_port()
    log = open(tmp_path / "server.log", "wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leaseq.cli",
            "serve",
            "--store",
            "memory://",
            "--listen",
            f"127.0.0.1:{grpc_port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, LEASEQ_SQS_LISTEN=f"127.0.0.1:{port}"),
    )
    log.close()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, (tmp_path / "server.log").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.05)
        client = boto3_client(f"http://127.0.0.1:{port}")
        url = client.create_queue(QueueName=unique())["QueueUrl"]
        reply: dict = {}

        def wait() -> None:
            started = time.monotonic()
            try:
                reply["answer"] = client.receive_message(QueueUrl=url, WaitTimeSeconds=20)
            except ClientError as error:  # arrived after the drain began: refused at once
                reply["answer"] = error.response["Error"]["Code"]
            reply["seconds"] = time.monotonic() - started

        waiter = threading.Thread(target=wait)
        waiter.start()
        # Most likely the receive is waiting in the server by now; if the signal comes first,
        # the drain refuses it with ServiceUnavailable instead. Either way it must not wait 20 s.
        waiter.join(timeout=1.0)
        process.send_signal(signal.SIGTERM)
        waiter.join(timeout=60)
        assert process.wait(timeout=60) == 0
        answer = reply["answer"]
        assert answer == "ServiceUnavailable" or (
            isinstance(answer, dict) and "Messages" not in answer
        )
        assert reply["seconds"] < 15  # answered by the drain, not at the end of its 20 s wait
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
