"""What an unauthenticated client can make the HTTP ports hold with request bodies: each port
reads at most its largest request (a console sign-in: a few KiB), a stalled body is dropped,
and all bodies in flight share one budget (server/frontends/http_limits.py)."""

from __future__ import annotations

import json
import re

from leaseq.server.auth import hash_token
from tests.hostile.http_raw import connect, head, read_answer, read_until_closed, request, serving

SQS_FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def test_a_stalled_sqs_body_is_answered_408_and_dropped(tmp_path):
    with serving(tmp_path, "--sqs-listen", "--http-body-timeout", "1s") as server:
        with connect(server.port) as sock:
            body = b"Action=ListQueues&Padding=" + b"x" * 100_000
            sock.sendall(
                head("POST", "/", server.port, {**SQS_FORM, "Content-Length": str(len(body))})
            )
            sock.sendall(body[:-1])  # all but the last byte, then nothing
            received, _ = read_until_closed(sock)
        assert received.startswith(b"HTTP/1.1 408"), received[:200]
        assert b"RequestTimeout" in received


def test_sqs_refuses_a_body_above_its_largest_request_before_reading_it(tmp_path):
    with serving(tmp_path, "--sqs-listen") as server:
        with connect(server.port) as sock:
            # 5 MiB announced, nothing sent: the answer cannot wait for the body.
            sock.sendall(
                head("POST", "/", server.port, {**SQS_FORM, "Content-Length": str(5 << 20)})
            )
            status, _, body = read_answer(sock)
        assert status == 413 and b"RequestEntityTooLarge" in body


def test_a_console_sign_in_reads_a_few_kib_at_most(tmp_path):
    policy = tmp_path / "policy.toml"
    token = "sign-in-test-token-0123456789abcdef"
    policy.write_text(
        f'[[principals]]\nname = "admin"\ntokens = ["{hash_token(token)}"]\n'
        '[[principals.grants]]\nqueues = ["*"]\nactions = ["*"]\n'
    )
    with serving(tmp_path, "--console-listen", "--auth-policy", str(policy)) as server:
        status, headers, body = request(server.port, "GET", "/api/session")
        assert status == 200
        csrf = json.loads(body)["csrf"]
        cookie = re.match(r"([^;]+)", headers["set-cookie"]).group(1)
        session = {"Cookie": cookie, "X-CSRF-Token": csrf, "Content-Type": "application/json"}
        with connect(server.port) as sock:
            # A 1 MiB sign-in announced and not sent: refused at once.
            sock.sendall(
                head(
                    "POST", "/api/session", server.port, {**session, "Content-Length": str(1 << 20)}
                )
            )
            status, _, body = read_answer(sock)
        assert status == 413, body
        status, headers, body = request(
            server.port, "POST", "/api/session", session, json.dumps({"token": token}).encode()
        )
        assert status == 200 and json.loads(body)["signed_in"]
        # Signed in, a body may be larger (a message of up to 8 MiB).
        cookie = re.match(r"([^;]+)", headers["set-cookie"]).group(1)
        signed_in = {**session, "Cookie": cookie, "X-CSRF-Token": json.loads(body)["csrf"]}
        status, _, body = request(
            server.port,
            "POST",
            "/api/queues",
            signed_in,
            json.dumps({"name": "big", "pad": "x" * 20_000}).encode(),
        )
        assert status != 413, body


def test_bodies_in_flight_share_one_budget(tmp_path):
    # A budget of 1 MiB: a stalled body of 1,000 KiB holds it; the next one waits for room for
    # --http-body-timeout, then is answered 503; once the stalled one is dropped there is room.
    with serving(
        tmp_path, "--sqs-listen", "--http-body-mib", "1", "--http-body-timeout", "2s"
    ) as server:
        body = b"Action=ListQueues&Padding=" + b"x" * (1_000 * 1024 - 26)
        announce = head("POST", "/", server.port, {**SQS_FORM, "Content-Length": str(len(body))})
        with connect(server.port) as stalled:
            stalled.sendall(announce + body[:-1])
            status, _, answer = request(server.port, "POST", "/", SQS_FORM, body)
            assert status == 503 and b"ServiceUnavailable" in answer, answer
            dropped, _ = read_until_closed(stalled)
            assert dropped.startswith(b"HTTP/1.1 408")
        status, _, answer = request(server.port, "POST", "/", SQS_FORM, body)
        assert status == 200, answer
