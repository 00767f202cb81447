"""The console in a real browser (headless Chromium from Debian, driven by Playwright): what a
user sees changes with the queue, and what a principal may not do it can neither see nor do.
Every wait is on page content (Playwright's expect), never a sleep."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from .conftest import ADMIN_TOKEN, READER_TOKEN, sign_in, unique

pytestmark = pytest.mark.slow


def cell(page, queue: str, key: str):
    return page.locator(f'td[data-q="{queue}"][data-k="{key}"]')


def confirm(page) -> None:
    page.locator("#confirm-ok").click()


def test_overview_counts_change_as_messages_are_sent_and_leased(page, client, screenshots):
    queue, emails, dlq = unique("orders"), unique("emails"), unique("orders-dlq")
    client.create_queue(dlq)
    client.create_queue(queue, dead_letter_queue=dlq, max_delivery_count=5)
    client.create_queue(emails)
    client.send_batch(emails, [f"welcome {n}".encode() for n in range(12)])
    client.send(emails, b"reminder", delay=3600)
    sign_in(page, ADMIN_TOKEN)
    expect(page.locator("#who")).to_contain_text("ops-admin")
    expect(cell(page, queue, "visible")).to_have_text("0")
    expect(cell(page, emails, "delayed")).to_have_text("1")

    # Sent in steps, each seen on the page before the next (the chart draws a staircase).
    for step in range(1, 5):
        client.send_batch(
            queue, [json.dumps({"order": step * 10 + n}).encode() for n in range(5 * step)]
        )
        expect(cell(page, queue, "visible")).to_have_text(str(5 * step * (step + 1) // 2))
    expect(cell(page, queue, "total")).to_have_text("50")
    expect(cell(page, queue, "sent_rate")).not_to_have_text("0.0")

    leased = client.receive(queue, 8, visibility_timeout=300)
    assert len(leased) == 8
    expect(cell(page, queue, "leased")).to_have_text("8")
    expect(cell(page, queue, "visible")).to_have_text("42")

    client.delete(queue, [m.receipt for m in leased[:5]])
    expect(cell(page, queue, "leased")).to_have_text("3")
    expect(cell(page, queue, "total")).to_have_text("45")
    # The acks are counted in the rates too (mean of the last 5 s: not 0.0 once a second ended).
    expect(cell(page, queue, "acked_rate")).not_to_have_text("0.0")
    page.screenshot(path=str(screenshots / "console-overview.png"))


def test_a_leased_message_appears_with_its_lease_end(page, client, screenshots, tmp_path):
    queue = unique("jobs")
    client.create_queue(queue)
    client.send(
        queue, json.dumps({"job": "resize", "image": 7}).encode(), attributes={"kind": "image"}
    )
    client.send(queue, b"waiting for its turn", delay=600)
    for n in range(3):
        client.send(queue, f"task {n}".encode(), channel="batch")
    [held] = client.receive(queue, 1, visibility_timeout=600)

    sign_in(page, ADMIN_TOKEN)
    page.goto(f"/#/q/{queue}")
    row = page.locator(f'#messages tr[data-id="{held.message_id}"]')
    expect(row).to_have_attribute("data-state", "leased")
    expect(row).to_contain_text("lease ends in 9")  # 600 s: "in 9.9m" .. "in 9.8m"
    expect(page.locator('#messages tr[data-state="delayed"]')).to_contain_text("visible in")
    expect(page.locator("#count-leased")).to_have_text("1")
    expect(page.locator("#channels")).to_contain_text("batch")
    page.screenshot(path=str(screenshots / "console-queue.png"), full_page=True)

    # Its detail: body as JSON, attributes, delivery count, lease end.
    row.locator("a").click()
    expect(page.locator("#message-fields")).to_contain_text("lease ends in")
    expect(page.locator("#body")).to_contain_text('"job": "resize"')
    page.locator("#view-hex").click()
    expect(page.locator("#body")).to_contain_text("00000000  7b 22 6a 6f 62")
    page.screenshot(path=str(tmp_path / "console-message.png"), full_page=True)  # not in the README

    # An admin releases it: the consumer's lease ends now, the message is visible again.
    page.locator("button.release").click()
    confirm(page)
    page.goto(f"/#/q/{queue}")
    expect(page.locator(f'#messages tr[data-id="{held.message_id}"]')).to_have_attribute(
        "data-state", "visible"
    )
    # (It is visible since the release: the oldest-visible order hands it out last.)
    again = {m.message_id: m for m in client.receive(queue, 10, visibility_timeout=60)}
    assert again[held.message_id].last_error == "released from the console"


def test_redrive_from_a_dead_letter_queue_moves_the_messages(page, client, screenshots):
    dlq, source = unique("dlq"), unique("payments")
    client.create_queue(dlq)
    client.create_queue(source, dead_letter_queue=dlq, max_delivery_count=1)
    for n in range(4):
        client.send(source, f"payment {n}".encode(), channel="cards" if n < 3 else "wire")
    # Delivered once without a lease (visible again at once), then the next receive moves each
    # message over max_delivery_count to the dead letter queue instead of delivering it.
    assert len(client.receive(source, 10, visibility_timeout=0, wait_time=0)) == 4
    assert client.receive(source, 10, wait_time=0) == []
    assert client.stats(dlq).visible == 4

    sign_in(page, ADMIN_TOKEN)
    page.goto(f"/#/q/{dlq}")
    expect(page.locator("main")).to_contain_text(f"Dead letter queue of {source}")
    expect(page.locator("#count-visible")).to_have_text("4")
    page.locator("#messages tbody tr a").first.click()
    expect(page.locator("#message-fields")).to_contain_text(f"Dead-lettered from{source}")
    page.goto(f"/#/q/{dlq}")

    # By channel and count first: one message of channel "cards".
    page.fill("#redrive-channel", "cards")
    page.fill("#redrive-count", "1")
    page.locator("#redrive-some").click()
    confirm(page)
    expect(page.locator("#count-visible")).to_have_text("3")
    assert client.stats(source).visible == 1

    page.locator("#redrive-all").click()
    confirm(page)
    expect(page.locator("#count-visible")).to_have_text("0")
    assert client.stats(source).visible == 4
    assert client.stats(dlq).total == 0


def test_an_admin_dead_letters_a_message_from_its_page(page, client):
    dlq, queue = unique("dead"), unique("orders")
    client.create_queue(dlq)
    client.create_queue(queue, dead_letter_queue=dlq, max_delivery_count=5)
    client.send(queue, b"cannot be parsed")
    [held] = client.receive(queue, 1, visibility_timeout=600)

    sign_in(page, ADMIN_TOKEN)
    page.goto(f"/#/q/{queue}")
    page.locator(f'#messages tr[data-id="{held.message_id}"] a').click()
    expect(page.locator("#message-fields")).to_contain_text("lease ends in")
    page.locator("button.dead-letter").click()
    confirm(page)
    # Done once the page has gone back to its queue (the action's own navigation, which would
    # otherwise land after the goto below).
    expect(page.get_by_role("status")).to_contain_text("Dead-lettered")
    expect(page).to_have_url(re.compile(rf"#/q/{queue}$"))
    page.goto(f"/#/q/{dlq}")
    expect(page.locator(f'#messages tr[data-id="{held.message_id}"]')).to_be_visible()
    [dead] = client.peek(dlq)
    assert (dead.last_error, dead.delivery_count) == ("dead-lettered from the console", 1)
    assert client.stats(queue).total == 0
    # A queue without a dead letter queue shows no such button.
    page.goto(f"/#/q/{dlq}")
    expect(page.locator("button.dead-letter")).to_have_count(0)


def test_cancelled_confirmation_changes_nothing(page, client):
    queue = unique("keep")
    client.create_queue(queue)
    client.send(queue, b"precious")
    sign_in(page, ADMIN_TOKEN)
    page.goto(f"/#/q/{queue}")
    expect(page.locator("#count-visible")).to_have_text("1")
    page.locator("#purge").click()
    expect(page.locator("#confirm-text")).to_contain_text(f"Purge {queue}?")
    page.locator("#confirm-cancel").click()
    expect(page.locator("#confirm")).not_to_be_visible()
    assert client.stats(queue).total == 1
    page.locator("#purge").click()
    confirm(page)
    expect(page.locator("#count-total")).to_have_text("0")


def test_a_read_only_principal_cannot_purge(page, client, console_server):
    queue = unique("audited")
    client.create_queue(queue)
    client.send(queue, b"evidence")
    [held] = client.receive(queue, 1, visibility_timeout=600)
    client.send(queue, b"more evidence")

    sign_in(page, READER_TOKEN)
    page.goto(f"/#/q/{queue}")
    expect(page.locator("#who")).to_contain_text("auditor")
    expect(page.locator("#messages tbody tr")).to_have_count(2)
    # It sees the messages, and no button that changes data.
    for absent in (
        "#purge",
        "#delete-queue",
        "#send",
        "#redrive",
        "#save-config",
        "button.release",
        "button.delete",
    ):
        expect(page.locator(absent)).to_have_count(0)
    expect(page.locator("#config input").first).to_be_disabled()
    page.goto("/#/")
    expect(cell(page, queue, "total")).to_have_text("2")
    expect(page.locator("#new-queue")).to_have_count(0)

    # A forged request with the session cookie: without the CSRF token, then with it.
    request = page.context.request
    url = f"{console_server.url}/api/queues/{queue}/purge"
    refused = request.post(url)
    assert refused.status == 403 and refused.json()["error"]["code"] == "CSRF"
    csrf = request.get(f"{console_server.url}/api/session").json()["csrf"]
    refused = request.post(url, headers={"X-CSRF-Token": csrf})
    assert refused.status == 403 and refused.json()["error"]["code"] == "PERMISSION_DENIED"
    listed = request.get(f"{console_server.url}/api/queues/{queue}/messages").json()["messages"]
    handle = next(m["handle"] for m in listed if m["message_id"] == held.message_id)
    refused = request.post(
        f"{url.rsplit('/', 1)[0]}/messages/{handle}/release", headers={"X-CSRF-Token": csrf}
    )
    assert refused.status == 403
    assert client.stats(queue).total == 2 and client.stats(queue).leased == 1
