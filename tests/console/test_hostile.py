"""The console against hostile clients, over a real `leaseq serve --console-listen`: anonymous
floods cannot sign anyone out, malformed requests are 4xx JSON errors (never a 500, never a
traceback in the log), and text that is not valid Unicode is refused before it is stored."""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Iterator

import aiohttp
import pytest

from leaseq.client import QueueClient
from leaseq.server.frontends.console import sessions
from tests.support import http_frontend, postgres
from tests.support.http_frontend import FrontendServer

from .conftest import ADMIN_TOKEN, READER_TOKEN, ConsoleServer, unique
from .test_api import Browserless

pytestmark = pytest.mark.slow

FAULTS = ("Traceback", "unexpected error in console", "Unhandled exception")


def assert_no_fault_since(log: str, start: int) -> None:
    added = log[start:]
    for fault in FAULTS:
        assert fault not in added, added[-3000:]


# --- sessions: only a sign-in makes one -------------------------------------------------------


async def test_an_anonymous_flood_does_not_sign_the_admin_out(console_server: ConsoleServer):
    async with Browserless(console_server) as admin:
        await admin.sign_in(ADMIN_TOKEN)
        # More anonymous GET /api/session than the session table holds, with no cookies kept,
        # as a script without a cookie jar sends them; each still gets a CSRF token.
        flood = sessions.MAX_SESSIONS + 50
        tokens: set[str] = set()
        connector = aiohttp.TCPConnector(limit=8)
        async with aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar()
        ) as anonymous:

            async def visit(count: int) -> None:
                for _ in range(count):
                    async with anonymous.get(console_server.url + "/api/session") as response:
                        assert response.status == 200
                        tokens.add((await response.json())["csrf"])

            await asyncio.gather(*(visit(flood // 8 + 1) for _ in range(8)))
        assert (
            len(tokens) > sessions.MAX_SESSIONS
        )  # a fresh nonce (and token) for each cookie-less visit
        status, data = await admin.call("GET", "/api/session")
        assert status == 200 and data["signed_in"] and data["principal"] == "ops-admin"
        assert (await admin.call("GET", "/api/queues"))[0] == 200
        status, _ = await admin.call("POST", "/api/queues", {"name": unique("after-flood")})
        assert status == 201  # and its CSRF token still holds


async def test_many_sign_ins_with_one_token_push_out_only_its_own_sessions(
    console_server: ConsoleServer,
):
    async with Browserless(console_server) as admin, Browserless(console_server) as first:
        await admin.sign_in(ADMIN_TOKEN)
        await first.sign_in(READER_TOKEN)
        for _ in range(sessions.MAX_PER_TOKEN):
            async with Browserless(console_server) as other:
                await other.sign_in(READER_TOKEN)
        status, data = await first.call("GET", "/api/session")
        assert status == 200 and not data["signed_in"]  # the reader's oldest went
        status, data = await admin.call("GET", "/api/session")
        assert data["signed_in"] and data["principal"] == "ops-admin"


async def test_an_anonymous_csrf_token_holds_only_with_its_own_nonce(console_server: ConsoleServer):
    async with Browserless(console_server) as visitor, Browserless(console_server) as attacker:
        # The attacker's own token, sent with the visitor's cookie, is refused.
        status, data = await visitor.call(
            "POST", "/api/session", {"token": ADMIN_TOKEN}, csrf=attacker.csrf
        )
        assert (status, data["error"]["code"]) == (403, "CSRF")
        await visitor.sign_in(ADMIN_TOKEN)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as bare:
        async with bare.get(console_server.url + "/api/session") as response:
            csrf = (await response.json())["csrf"]
        # The token without the nonce cookie it was made for: refused.
        async with bare.post(
            console_server.url + "/api/session",
            json={"token": ADMIN_TOKEN},
            headers={"X-CSRF-Token": csrf},
        ) as response:
            assert response.status == 403


# --- malformed requests: a 4xx JSON error, no traceback ---------------------------------------


async def test_malformed_requests_are_4xx_json_errors(
    console_server: ConsoleServer, client: QueueClient
):
    start = len(console_server.log())
    name = unique("bad")
    client.create_queue(name, visibility_timeout=45)
    deep_array = b"[" * 100_000
    deep_object = b'{"config":' * 50_000
    async with Browserless(console_server) as visitor:
        # Sign-in with '[' x 100,000 (before any sign-in: no credentials needed).
        status, data = await visitor.call("POST", "/api/session", raw=deep_array)
        assert 400 <= status < 500 and "error" in data, data
        await visitor.sign_in(ADMIN_TOKEN)
        routes = (
            ("POST", "/api/queues"),
            ("PATCH", f"/api/queues/{name}"),
            ("POST", f"/api/queues/{name}/messages"),
            ("POST", f"/api/queues/{name}/redrive"),
        )
        for method, path in routes:
            for body in (deep_array, deep_object):
                status, data = await visitor.call(method, path, raw=body)
                assert status == 400 and data["error"]["field"] == "body", (method, path, data)
        # The sign-in reads at most 8 KiB, signed in or not: larger is refused unread, and deep
        # nesting within the limit is a 400 like the others.
        status, data = await visitor.call("POST", "/api/session", raw=deep_array)
        assert (status, data["error"]["code"]) == (413, "TOO_LARGE"), data
        status, data = await visitor.call("POST", "/api/session", raw=b"[" * 8_000)
        assert status == 400 and data["error"]["field"] == "body", data
        for encoding, garbage in (("gzip", b"not gzip at all"), ("deflate", b"\xff" * 64)):
            url = f"{console_server.url}/api/queues"
            async with visitor.http.post(
                url,
                data=garbage,
                headers={
                    "Content-Encoding": encoding,
                    "X-CSRF-Token": visitor.csrf,
                    "Content-Type": "application/json",
                },
            ) as response:
                data = await response.json()
                assert response.status == 400 and data["error"]["field"] == "body", data
        # A valid deflate body still works (the decoding is aiohttp's, the refusal only of garbage).
        valid = zlib.compress(json.dumps({"name": unique("deflated")}).encode())
        async with visitor.http.post(
            f"{console_server.url}/api/queues",
            data=valid,
            headers={"Content-Encoding": "deflate", "X-CSRF-Token": visitor.csrf},
        ) as response:
            assert response.status == 201
        for config in ({"visibility_timeout": 1e308}, {"message_retention": -1e308}):
            status, data = await visitor.call("PATCH", f"/api/queues/{name}", {"config": config})
            assert (status, data["error"]["code"]) == (400, "OUT_OF_RANGE"), data
            status, data = await visitor.call(
                "POST", "/api/queues", {"name": unique(), "config": config}
            )
            assert (status, data["error"]["code"]) == (400, "OUT_OF_RANGE"), data
        status, data = await visitor.call(
            "POST", f"/api/queues/{name}/messages", {"body": "x", "delay": 1e308}
        )
        assert status == 400
        for path in (
            "/static/" + "a" * 300 + ".js",
            "/static/" + "a" * 5000 + ".css",
            "/static/..%2Fapp.js",
            "/static/%00.js",
        ):
            async with visitor.http.get(console_server.url + path) as response:
                assert response.status == 404, path
    assert client.get_queue(name).config.visibility_timeout.total_seconds() == 45
    assert_no_fault_since(console_server.log(), start)


# --- text that is not valid Unicode -----------------------------------------------------------


@pytest.fixture(scope="module", params=["memory", "sqlite", "postgres"])
def open_console(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[FrontendServer]:
    """A console without --auth-policy (the loopback development default) on each store."""
    directory = tmp_path_factory.mktemp("console-" + request.param)
    if request.param == "memory":
        urls: Iterator[str] = iter(["memory://"])
    elif request.param == "sqlite":
        urls = iter([f"sqlite:///{directory / 'leaseq.db'}"])
    else:
        postgres.require_postgres()
        schema = postgres.new_schema()
        urls = iter([postgres.store_url(schema)])
    server = http_frontend.start("--console-listen", next(urls), directory, store=request.param)
    try:
        yield server
    finally:
        try:
            http_frontend.stop(server, "unexpected error in console")
        finally:
            if request.param == "postgres":
                postgres.drop_schema(schema)


async def test_lone_surrogates_are_refused_and_the_queue_keeps_working(
    open_console: FrontendServer,
):
    name = unique("surrogate")
    log = open_console.process.log_path
    start = len(log.read_text())
    # unsafe: keep the cookies of an IP address host (127.0.0.1)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(open_console.endpoint + "/api/session") as response:
            csrf = (await response.json())["csrf"]

        async def post(path: str, raw: bytes) -> tuple[int, dict]:
            async with http.post(
                open_console.endpoint + path,
                data=raw,
                headers={"X-CSRF-Token": csrf, "Content-Type": "application/json"},
            ) as response:
                return response.status, await response.json()

        assert (await post("/api/queues", json.dumps({"name": name}).encode()))[0] == 201
        # JSON's \\u escapes make a lone surrogate: not text, whatever the field.
        for raw, field in (
            (b'{"body": "x", "channel": "\\udfff"}', "channel"),
            (b'{"body": "x", "channel": "a\\ud800b"}', "channel"),
            (b'{"body": "x", "attributes": {"k": "\\udfff"}}', "attributes"),
            (b'{"body": "x", "attributes": {"\\udfff": "v"}}', "attributes"),
            (b'{"body": "\\udfff"}', "body"),
        ):
            status, data = await post(f"/api/queues/{name}/messages", raw)
            assert (status, data["error"]["code"], data["error"]["field"]) == (
                400,
                "INVALID_ARGUMENT",
                field,
            ), data
            assert "Unicode" in data["error"]["message"]
        status, data = await post(f"/api/queues/{name}/redrive", b'{"channel": "\\udfff"}')
        assert status == 400, data
        # A surrogate pair is one character (U+1F600): valid text, kept as sent.
        status, _ = await post(
            f"/api/queues/{name}/messages",
            b'{"body": "\\ud83d\\ude00", "channel": "c\\ud83d\\ude00", "attributes": {"k": "\\ud83d\\ude00"}}',
        )
        assert status == 201
    with QueueClient(open_console.grpc_target) as grpc_client:
        stats = grpc_client.stats(name)
        assert stats.total == 1 and [c.channel for c in stats.channels] == ["c\U0001f600"]
        [message] = grpc_client.receive(name, max_messages=10, wait_time=0)
        assert message.body == "\U0001f600".encode() and dict(message.attributes) == {
            "k": "\U0001f600"
        }
    assert_no_fault_since(log.read_text(), start)
