"""A real `leaseq serve --console-listen --auth-policy` process per module (SQLite), the gRPC
client that makes the traffic the console shows, and a headless Chromium driven by Playwright.

The browser is Debian's `chromium` package at /usr/bin/chromium (Playwright's own browser
download is never used): without it the browser tests skip, except with
LEASEQ_REQUIRE_CHROMIUM=1 (.ci/run sets it), where that is a failure. Screenshots go to a temp
dir, or to LEASEQ_CONSOLE_SCREENSHOTS (e.g. docs/, for the README's two pictures)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from leaseq.client import QueueClient
from leaseq.server.auth import hash_token
from tests.support.http_frontend import wait_listening
from tests.support.process import ServerProcess, free_port

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

ADMIN_TOKEN = "console-admin-token-0123456789abcdef"
READER_TOKEN = "console-reader-token-0123456789abcdef"

POLICY = f"""
[[principals]]
name = "ops-admin"
tokens = ["{hash_token(ADMIN_TOKEN)}"]
[[principals.grants]]
queues = ["*"]
actions = ["*"]

[[principals]]
name = "auditor"
tokens = ["{hash_token(READER_TOKEN)}"]
[[principals.grants]]
queues = ["*"]
actions = ["peek"]
"""


@dataclass
class ConsoleServer:
    process: ServerProcess
    console_port: int
    metrics_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.console_port}"

    def log(self) -> str:
        return self.process.log_path.read_text()


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    directory = tmp_path_factory.mktemp("console")
    policy = directory / "policy.toml"
    policy.write_text(POLICY)
    port, metrics_port = free_port(), free_port()
    process = ServerProcess(
        f"sqlite:///{directory / 'leaseq.db'}",
        free_port(),
        directory / "server.log",
        (
            "--console-listen",
            f"127.0.0.1:{port}",
            "--auth-policy",
            str(policy),
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
            "--log-level",
            "debug",
        ),
    )
    process.start()
    server = ConsoleServer(process, port, metrics_port)
    try:
        wait_listening(port, process)
        yield server
    finally:
        if process.process is not None and process.process.poll() is None:
            assert process.terminate() == 0, server.log()[-2000:]
    log = server.log()
    # Bad input is never a server fault, and no token is ever written down.
    assert "unexpected error in console" not in log, log[-3000:]
    assert ADMIN_TOKEN not in log and READER_TOKEN not in log


@pytest.fixture(scope="module")
def client(console_server: ConsoleServer) -> Iterator[QueueClient]:
    with QueueClient(console_server.process.target, token=ADMIN_TOKEN) as grpc_client:
        yield grpc_client


def unique(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --- the browser --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    # Module scope, not session: Playwright's sync API keeps an event loop running in this
    # thread while it is open, and pytest-asyncio's tests of later modules need the thread free.
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing (apt-get install chromium)"
        if os.environ.get("LEASEQ_REQUIRE_CHROMIUM") == "1":
            pytest.fail(reason + " and LEASEQ_REQUIRE_CHROMIUM=1")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, console_server):
    """A fresh browser context (its own cookies) per test; page errors fail the test."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 860}, base_url=console_server.url
    )
    context.set_default_timeout(15_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield tab
    finally:
        context.close()
    assert not errors, errors


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("LEASEQ_CONSOLE_SCREENSHOTS")
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return Path(chosen)
    return tmp_path_factory.mktemp("screenshots")


def sign_in(page, token: str) -> None:
    page.goto("/")
    page.fill("#token", token)
    page.click("#sign-in button[type=submit]")
    page.wait_for_selector("#sign-out")
