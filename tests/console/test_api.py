"""The console's JSON API over plain HTTP: sign-in, CSRF, grants, bad input (a clear 4xx, never a
500, nothing changed), bounded pages, and the fencing of an admin's release/delete."""

from __future__ import annotations

import aiohttp
import pytest

from leaseq.client import QueueClient

from .conftest import ADMIN_TOKEN, READER_TOKEN, ConsoleServer, unique

pytestmark = pytest.mark.slow


class Browserless:
    """What the page's script does, over aiohttp: a cookie jar, the CSRF header."""

    def __init__(self, server: ConsoleServer) -> None:
        self.url = server.url
        # unsafe: keep cookies of an IP address host (127.0.0.1)
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.csrf = ""

    async def __aenter__(self) -> Browserless:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.close()

    async def start(self) -> dict:
        status, data = await self.call("GET", "/api/session")
        assert status == 200
        self.csrf = data["csrf"]
        return data

    async def sign_in(self, token: str) -> None:
        status, data = await self.call("POST", "/api/session", {"token": token})
        assert status == 200, data
        self.csrf = data["csrf"]

    async def call(
        self,
        method: str,
        path: str,
        body=None,
        *,
        csrf: str | None = None,
        raw: bytes | None = None,
    ):
        headers = {}
        if method != "GET":
            headers["X-CSRF-Token"] = self.csrf if csrf is None else csrf
        async with self.http.request(
            method, self.url + path, json=body if raw is None else None, data=raw, headers=headers
        ) as response:
            return response.status, await response.json()


@pytest.fixture
async def admin(console_server):
    async with Browserless(console_server) as session:
        await session.sign_in(ADMIN_TOKEN)
        yield session


async def test_signing_in(console_server):
    async with Browserless(console_server) as session:
        assert (await session.call("GET", "/api/queues"))[0] == 401
        info = await session.start()
        assert info["auth"] and not info["signed_in"]
        # The sign-in needs the CSRF token too (no login CSRF).
        status, data = await session.call("POST", "/api/session", {"token": ADMIN_TOKEN}, csrf="")
        assert (status, data["error"]["code"]) == (403, "CSRF")
        status, data = await session.call("POST", "/api/session", {"token": "not-a-token"})
        assert (status, data["error"]["code"]) == (401, "UNAUTHENTICATED")
        for bad in ({"token": 5}, {}, {"token": "x" * 5000}):
            assert (await session.call("POST", "/api/session", bad))[0] == 400
        old_csrf = session.csrf
        await session.sign_in(READER_TOKEN)
        assert session.csrf != old_csrf  # a new session at sign-in
        status, data = await session.call("GET", "/api/session")
        assert data["principal"] == "auditor" and data["may_create"] is False
        assert (await session.call("GET", "/api/queues"))[0] == 200
        status, data = await session.call("DELETE", "/api/session")
        assert status == 200 and not data["signed_in"]
        session.csrf = data["csrf"]
        assert (await session.call("GET", "/api/queues"))[0] == 401


async def test_every_change_needs_the_csrf_token(admin):
    name = unique("csrf")
    for csrf in ("", "wrong", admin.csrf + "x"):
        status, data = await admin.call("POST", "/api/queues", {"name": name}, csrf=csrf)
        assert (status, data["error"]["code"]) == (403, "CSRF")
    assert (await admin.call("GET", f"/api/queues/{name}"))[0] == 404
    status, _ = await admin.call("POST", "/api/queues", {"name": name})
    assert status == 201
    for method, path in (
        ("POST", f"/api/queues/{name}/purge"),
        ("DELETE", f"/api/queues/{name}"),
        ("PATCH", f"/api/queues/{name}"),
        ("POST", f"/api/queues/{name}/messages"),
        ("POST", f"/api/queues/{name}/redrive"),
    ):
        status, data = await admin.call(method, path, {}, csrf="")
        assert (status, data["error"]["code"]) == (403, "CSRF"), (method, path)
    assert (await admin.call("GET", f"/api/queues/{name}"))[0] == 200


async def test_bad_input_is_a_clear_4xx_and_changes_nothing(admin, client: QueueClient):
    name = unique("bad")
    client.create_queue(name, visibility_timeout=45)
    client.send(name, b"x")
    before = client.get_queue(name).config
    cases = [
        ("POST", "/api/queues", {"name": "has space"}, 400),
        ("POST", "/api/queues", {"name": unique(), "config": {"visibility_timeout": -1}}, 400),
        ("POST", "/api/queues", {"name": unique(), "config": {"nope": 1}}, 400),
        ("POST", "/api/queues", {"name": 7}, 400),
        ("POST", "/api/queues", [1, 2], 400),
        ("PATCH", f"/api/queues/{name}", {"config": {"visibility_timeout": "soon"}}, 400),
        ("PATCH", f"/api/queues/{name}", {"config": {"visibility_timeout": 10**9}}, 400),
        ("PATCH", f"/api/queues/{name}", {"config": {"max_in_flight": 1.5}}, 400),
        ("PATCH", f"/api/queues/{name}", {"config": {"max_in_flight": True}}, 400),
        (
            "PATCH",
            f"/api/queues/{name}",
            {"config": {"dead_letter_queue": "missing-queue", "max_delivery_count": 3}},
            400,
        ),
        ("PATCH", f"/api/queues/{name}", {"config": "all"}, 400),
        ("PATCH", "/api/queues/missing-queue", {"config": {}}, 404),
        ("GET", f"/api/queues/{name}/messages?limit=0", None, 400),
        ("GET", f"/api/queues/{name}/messages?limit=201", None, 400),
        ("GET", f"/api/queues/{name}/messages?limit=ten", None, 400),
        ("GET", f"/api/queues/{name}/messages?states=leased", None, 400),
        ("GET", f"/api/queues/{name}/messages?page=garbage", None, 400),
        ("GET", f"/api/queues/{name}/messages/garbage", None, 400),
        ("POST", f"/api/queues/{name}/messages/garbage/release", {}, 400),
        ("POST", f"/api/queues/{name}/messages/garbage/delete", {}, 400),
        ("GET", "/api/queues/missing-queue/messages", None, 404),
        ("GET", "/api/queues/" + "n" * 500, None, 400),
        ("POST", f"/api/queues/{name}/messages", {"body": 5}, 400),
        ("POST", f"/api/queues/{name}/messages", {"body": "x", "attributes": {"a": 1}}, 400),
        ("POST", f"/api/queues/{name}/messages", {"body": "x", "delay": -5}, 400),
        ("POST", f"/api/queues/{name}/messages", {"body": "x", "delay": "NaN"}, 400),
        ("POST", f"/api/queues/{name}/messages", {"body": "x" * (1024 * 1024 + 1)}, 400),
        ("POST", f"/api/queues/{name}/redrive", {"max_messages": -1}, 400),
        ("POST", f"/api/queues/{name}/redrive", {"destination": 3}, 400),
        ("GET", "/api/queues?prefix=" + "p" * 100, None, 400),
        ("PUT", f"/api/queues/{name}", {}, 405),
        ("GET", "/api/nothing-here", None, 404),
    ]
    for method, path, body, expected in cases:
        status, data = await admin.call(method, path, body)
        assert status == expected, (method, path[:80], status, data)
        assert data["error"]["message"], data
    status, data = await admin.call("POST", f"/api/queues/{name}/messages", raw=b"{not json")
    assert (status, data["error"]["code"]) == (400, "INVALID_ARGUMENT")
    assert client.get_queue(name).config == before
    assert client.stats(name).total == 1


async def test_pages_are_bounded(admin, client: QueueClient):
    name = unique("big")
    client.create_queue(name)
    client.send_batch(name, [f"m{n}".encode() for n in range(250)])
    status, data = await admin.call("GET", f"/api/queues/{name}/messages")
    assert status == 200 and len(data["messages"]) == 50 and data["next_page"]
    status, data = await admin.call("GET", f"/api/queues/{name}/messages?limit=200")
    assert len(data["messages"]) == 200
    status, rest = await admin.call(
        "GET", f"/api/queues/{name}/messages?limit=200&page={data['next_page']}"
    )
    assert len(rest["messages"]) == 50 and rest["next_page"] is None
    # A list shows a preview of each body, and a page stops after the message that reaches
    # 1 MiB of bodies.
    large = unique("large")
    client.create_queue(large, max_message_bytes=1024 * 1024)
    client.send_batch(large, [b"x" * 600_000 for _ in range(4)])
    status, data = await admin.call("GET", f"/api/queues/{large}/messages?limit=200")
    assert len(data["messages"]) == 2 and data["next_page"]
    assert all(len(m["preview"]) <= 120 for m in data["messages"])
    # The overview lists at most 50 queues a page.
    status, data = await admin.call("GET", "/api/queues")
    assert status == 200 and len(data["queues"]) <= 50


async def test_an_admin_acts_on_a_leased_message_under_the_fencing_rules(
    admin, client: QueueClient
):
    name = unique("fence")
    client.create_queue(name)
    message_id = client.send(name, b'{"a": 1}')
    [first] = client.receive(name, 1, visibility_timeout=600)
    _, data = await admin.call("GET", f"/api/queues/{name}/messages")
    [shown] = data["messages"]
    assert shown["state"] == "leased" and shown["message_id"] == message_id
    handle = shown["handle"]
    status, detail = await admin.call("GET", f"/api/queues/{name}/messages/{handle}")
    assert status == 200 and detail["delivery_count"] == 1

    # Released by the admin: visible now; the consumer's receipt stays its lease's receipt.
    status, data = await admin.call(
        "POST", f"/api/queues/{name}/messages/{handle}/release", {"reason": "stuck"}
    )
    assert (status, data) == (200, {"status": "OK"})
    assert client.stats(name).visible == 1
    # Delivered again since: the handle of the earlier delivery changes nothing any more.
    [second] = client.receive(name, 1, visibility_timeout=600)
    assert second.last_error == "stuck"
    status, data = await admin.call("POST", f"/api/queues/{name}/messages/{handle}/delete")
    assert (status, data["error"]["code"]) == (409, "RECEIPT_SUPERSEDED")
    status, data = await admin.call("GET", f"/api/queues/{name}/messages/{handle}")
    assert (status, data["error"]["code"]) == (404, "MESSAGE_MOVED_ON")
    assert client.stats(name).leased == 1
    # With the handle of the current delivery, the admin deletes it; the consumer's ack is then
    # ALREADY_DELETED (a retried ack is harmless).
    _, data = await admin.call("GET", f"/api/queues/{name}/messages")
    status, data = await admin.call(
        "POST", f"/api/queues/{name}/messages/{data['messages'][0]['handle']}/delete"
    )
    assert status == 200
    assert client.stats(name).total == 0
    [result] = client.delete(name, [second.receipt]).results
    assert result.status.name.endswith("ALREADY_DELETED")
    # A handle of another queue does not verify here.
    other = unique("other")
    client.create_queue(other)
    status, data = await admin.call("POST", f"/api/queues/{other}/messages/{handle}/delete")
    assert status == 400


async def test_a_peek_only_principal_reads_and_changes_nothing(console_server, client: QueueClient):
    name = unique("ro")
    client.create_queue(name)
    client.send(name, b"keep me")
    async with Browserless(console_server) as reader:
        await reader.sign_in(READER_TOKEN)
        status, data = await reader.call("GET", f"/api/queues/{name}")
        assert status == 200 and data["can"] == {
            "ack": False,
            "admin": False,
            "peek": True,
            "receive": False,
            "redrive": False,
            "send": False,
        }
        assert len((await reader.call("GET", f"/api/queues/{name}/messages"))[1]["messages"]) == 1
        for method, path, body in (
            ("POST", f"/api/queues/{name}/purge", None),
            ("DELETE", f"/api/queues/{name}", None),
            ("PATCH", f"/api/queues/{name}", {"config": {"visibility_timeout": 5}}),
            ("POST", f"/api/queues/{name}/messages", {"body": "x"}),
            ("POST", f"/api/queues/{name}/redrive", {}),
            ("POST", "/api/queues", {"name": unique()}),
        ):
            status, data = await reader.call(method, path, body)
            assert (status, data["error"]["code"]) == (403, "PERMISSION_DENIED"), (method, path)
    assert client.stats(name).total == 1
    assert client.get_queue(name).config.visibility_timeout.total_seconds() == 30


async def test_pages_carry_a_strict_content_security_policy(console_server):
    async with aiohttp.ClientSession() as http:
        for path in ("/", "/static/console.js", "/static/console.css", "/api/session"):
            async with http.get(console_server.url + path) as response:
                assert response.status == 200
                assert "script-src 'self'" in response.headers["Content-Security-Policy"]
                assert response.headers["X-Frame-Options"] == "DENY"
        for path in ("/static/../app.py", "/static/missing.js", "/static/app.py"):
            async with http.get(console_server.url + path) as response:
                assert response.status == 404


async def test_no_token_or_body_in_the_log(console_server, admin, client: QueueClient):
    name = unique("secret")
    client.create_queue(name)
    marker = "body-marker-" + unique()
    status, _ = await admin.call("POST", f"/api/queues/{name}/messages", {"body": marker})
    assert status == 201
    await admin.call("GET", f"/api/queues/{name}/messages")
    log = console_server.log()
    assert "Console.POST /api/queues/{name}/messages 201" in log  # the access log is on (debug)
    assert marker not in log and ADMIN_TOKEN not in log and admin.csrf not in log


async def _scrape(console_server) -> dict[str, float]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{console_server.metrics_port}/metrics") as response:
            text = await response.text()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


async def test_console_requests_count_in_the_metrics(console_server, admin, client: QueueClient):
    name = unique("metered")
    client.create_queue(name)
    route = 'method="POST /api/queues/{name}/messages",service="Console"'
    ok = f'leaseq_rpcs_handled_total{{code="OK",{route}}}'
    refused = f'leaseq_rpcs_handled_total{{code="400",{route}}}'
    before = await _scrape(console_server)
    for _ in range(2):
        assert (await admin.call("POST", f"/api/queues/{name}/messages", {"body": "x"}))[0] == 201
    assert (await admin.call("POST", f"/api/queues/{name}/messages", {"body": 1}))[0] == 400
    after = await _scrape(console_server)
    assert after[ok] - before.get(ok, 0.0) == 2
    assert after[refused] - before.get(refused, 0.0) == 1
    assert after[f'leaseq_messages_sent_total{{queue="{name}"}}'] == 2


async def test_an_admin_dead_letters_a_message_now(admin, client: QueueClient):
    name, dlq = unique("dl"), unique("dl-dead")
    client.create_queue(dlq)
    client.create_queue(name, dead_letter_queue=dlq, max_delivery_count=5)
    message_id = client.send(name, b"poison")
    [first] = client.receive(name, 1, visibility_timeout=600)
    _, data = await admin.call("GET", f"/api/queues/{name}/messages")
    handle = data["messages"][0]["handle"]
    status, data = await admin.call(
        "POST", f"/api/queues/{name}/messages/{handle}/dead-letter", {"reason": "looked at it"}
    )
    assert (status, data) == (200, {"status": "OK"})
    assert client.stats(name).total == 0
    [dead] = client.peek(dlq)
    assert (dead.message_id, dead.last_error, dead.delivery_count) == (
        message_id,
        "looked at it",
        1,
    )
    # The consumer's receipt: the message moved away from its queue.
    assert client.delete(name, [first.receipt]).results[0].status.name == "MESSAGE_NOT_FOUND"
    # Again with the same handle: nothing left to move.
    status, data = await admin.call("POST", f"/api/queues/{name}/messages/{handle}/dead-letter", {})
    assert (status, data["error"]["code"]) == (409, "MESSAGE_NOT_FOUND")
    # A queue without a dead letter queue: 409, nothing changed.
    plain = unique("plain")
    client.create_queue(plain)
    client.send(plain, b"x")
    _, data = await admin.call("GET", f"/api/queues/{plain}/messages")
    handle = data["messages"][0]["handle"]
    status, data = await admin.call(
        "POST", f"/api/queues/{plain}/messages/{handle}/dead-letter", {}
    )
    assert (status, data["error"]["code"]) == (409, "NO_DEAD_LETTER_QUEUE")
    assert client.stats(plain).visible == 1


async def test_the_console_shows_a_messages_group(admin, client: QueueClient):
    name = unique("fifo")
    client.create_queue(name, ordering="fifo")
    client.send(name, b"paid", group="order-17")
    _, data = await admin.call("GET", f"/api/queues/{name}/messages")
    [shown] = data["messages"]
    assert shown["group"] == "order-17" and shown["sequence"] > 0
    status, detail = await admin.call("GET", f"/api/queues/{name}/messages/{shown['handle']}")
    assert status == 200 and detail["group"] == "order-17"
    status, data = await admin.call("GET", f"/api/queues/{name}")
    assert status == 200 and data["stats"]["groups"] == 1
