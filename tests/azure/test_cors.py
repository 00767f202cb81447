"""CORS from the stored rules, with a real Chromium page on another origin: the browser's own
preflight and actual requests (a SAS from the SDK's generator in the page's URLs), the headers a
rule exposes readable by the page, and a page whose origin no rule names refused before
anything is sent. Preflights are also checked over raw HTTP for Azure's answers."""

from __future__ import annotations

import http.server
import os
import threading
from datetime import UTC, datetime, timedelta

import pytest
import requests
from azure.storage.queue import CorsRule, QueueSasPermissions, generate_queue_sas

from tests.console.conftest import CHROMIUM, CHROMIUM_ARGS

from .conftest import DEV_ACCOUNT, DEV_KEY

PAGE = "<!doctype html><title>shop</title><p>another site</p>"


@pytest.fixture(scope="module")
def browser():
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


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def app_origin():
    """A real web server of another site's page: http://localhost:<port> (the endpoint is
    127.0.0.1: another origin and another site; both loopback, as Chromium's local network
    access rules want for a page that calls a local port)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def app_page(browser, app_origin):
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{app_origin}/")
    try:
        yield page, app_origin
    finally:
        context.close()


def sas(name: str) -> str:
    return generate_queue_sas(
        DEV_ACCOUNT,
        name,
        DEV_KEY,
        permission=QueueSasPermissions(read=True, add=True, process=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )


FETCH = """async ([url, method, body]) => {
  try {
    const reply = await fetch(url, {
      method,
      body: body || undefined,
      headers: {"x-ms-version": "2018-03-28", "Content-Type": "application/xml"},
    });
    return {status: reply.status, text: await reply.text(),
            requestId: reply.headers.get("x-ms-request-id"),
            count: reply.headers.get("x-ms-approximate-messages-count")};
  } catch (error) {
    return {failed: String(error)};
  }
}"""


def test_a_page_of_an_allowed_origin_uses_the_queue(azure_server, service, queue, app_page):
    page, origin = app_page
    service.set_service_properties(
        cors=[
            CorsRule(
                [origin],
                ["GET", "POST"],
                allowed_headers=["x-ms-*", "content-type"],
                exposed_headers=["x-ms-request-id"],
                max_age_in_seconds=0,
            )
        ]
    )
    base = f"{azure_server.endpoint}/{DEV_ACCOUNT}/{queue.queue_name}"
    token = sas(queue.queue_name)
    body = "<QueueMessage><MessageText>from the page</MessageText></QueueMessage>"
    sent = page.evaluate(FETCH, [f"{base}/messages?{token}", "POST", body])
    assert sent.get("status") == 201, sent
    assert "<MessageId>" in sent["text"] and sent["requestId"]  # exposed: readable by the page
    peeked = page.evaluate(FETCH, [f"{base}/messages?peekonly=true&{token}", "GET", ""])
    assert peeked["status"] == 200 and "from the page" in peeked["text"]
    metadata = page.evaluate(FETCH, [f"{base}?comp=metadata&{token}", "GET", ""])
    assert metadata["status"] == 200
    assert metadata["count"] is None  # not in ExposedHeaders: the browser hides it
    # Another origin's rule only: the preflight fails, the browser sends nothing.
    service.set_service_properties(
        cors=[CorsRule(["https://elsewhere.example"], ["GET", "POST"], allowed_headers=["*"])]
    )
    refused = page.evaluate(FETCH, [f"{base}/messages?{token}", "POST", body])
    assert "failed" in refused, refused
    assert queue.get_queue_properties().approximate_message_count == 1
    service.set_service_properties(cors=[])


def test_without_rules_a_page_cannot_send(azure_server, service, queue, app_page):
    page, _ = app_page
    service.set_service_properties(cors=[])
    base = f"{azure_server.endpoint}/{DEV_ACCOUNT}/{queue.queue_name}"
    body = "<QueueMessage><MessageText>x</MessageText></QueueMessage>"
    refused = page.evaluate(FETCH, [f"{base}/messages?{sas(queue.queue_name)}", "POST", body])
    assert "failed" in refused, refused
    assert queue.get_queue_properties().approximate_message_count == 0


def test_preflight_answers(azure_server, service, queue):
    service.set_service_properties(
        cors=[
            CorsRule(
                ["https://shop.example"],
                ["PUT", "GET"],
                allowed_headers=["x-ms-meta-*"],
                max_age_in_seconds=600,
            ),
            CorsRule(["*"], ["GET"], max_age_in_seconds=5),
        ]
    )
    url = f"{azure_server.endpoint}/{DEV_ACCOUNT}/{queue.queue_name}"

    def preflight(origin: str, method: str, headers: str = "") -> requests.Response:
        sent = {"Origin": origin, "Access-Control-Request-Method": method}
        if headers:
            sent["Access-Control-Request-Headers"] = headers
        return requests.options(url, headers=sent, timeout=10)

    ok = preflight("https://shop.example", "PUT", "x-ms-meta-team")
    assert ok.status_code == 200
    assert ok.headers["Access-Control-Allow-Origin"] == "https://shop.example"
    assert ok.headers["Access-Control-Allow-Methods"] == "PUT"
    assert ok.headers["Access-Control-Allow-Headers"] == "x-ms-meta-team"
    assert ok.headers["Access-Control-Max-Age"] == "600"
    anyone = preflight("https://other.example", "GET")
    assert (anyone.status_code, anyone.headers["Access-Control-Allow-Origin"]) == (200, "*")
    for reply in (
        preflight("https://other.example", "PUT"),
        preflight("https://shop.example", "PUT", "x-ms-date"),
        preflight("https://shop.example", "DELETE"),
    ):
        assert reply.status_code == 403
        assert reply.headers["x-ms-error-code"] == "CorsPreflightFailure"
        assert "CORS not enabled or no matching rule found for this request." in reply.text
    missing = requests.options(url, headers={"Origin": "https://shop.example"}, timeout=10)
    assert (missing.status_code, missing.headers["x-ms-error-code"]) == (400, "InvalidHeaderValue")
    service.set_service_properties(cors=[])
