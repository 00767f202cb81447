"""`leaseq serve --workers 2 --console-listen` (PostgreSQL): only worker 0 serves the console, so
a signed-in session (kept in one process's memory) stays signed in whatever connection a request
uses, and its API sees what the other worker's clients do."""

from __future__ import annotations

import aiohttp
import pytest

from leaseq.client import QueueClient
from tests.support.http_frontend import wait_listening
from tests.support.postgres import fresh_schema, store_url
from tests.support.process import ServerProcess, free_port

from .conftest import unique

pytestmark = pytest.mark.slow


async def test_the_console_of_a_multi_worker_server_keeps_its_sessions(tmp_path):
    with fresh_schema() as schema:
        port = free_port()
        process = ServerProcess(
            store_url(schema),
            free_port(),
            tmp_path / "server.log",
            ("--workers", "2", "--console-listen", f"127.0.0.1:{port}"),
        )
        process.start()
        try:
            wait_listening(port, process)
            name = unique("w")
            with QueueClient(process.target) as client:
                client.create_queue(name)
                client.send_batch(name, [b"a", b"b", b"c"])
            url = f"http://127.0.0.1:{port}"
            jar = aiohttp.CookieJar(unsafe=True)
            for _ in range(6):  # a new connection each time: the kernel would spread them
                async with aiohttp.ClientSession(cookie_jar=jar) as http:
                    async with http.get(url + "/api/session") as response:
                        csrf = (await response.json())["csrf"]
                    async with http.post(
                        f"{url}/api/queues/{name}/messages",
                        json={"body": "d"},
                        headers={"X-CSRF-Token": csrf},
                    ) as response:
                        assert response.status == 201, await response.text()
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{url}/api/queues/{name}") as response:
                    assert (await response.json())["stats"]["visible"] == 9
        finally:
            assert process.terminate() == 0, process.log_path.read_text()[-2000:]
