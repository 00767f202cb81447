"""`leaseq ack|release|extend`: a shell user finishes what `receive` started, with receipts as
arguments, as plain text on stdin, or as `receive --json` piped in."""

from __future__ import annotations

import json
from datetime import datetime

from tests.cli.conftest import Leaseq


def _received(leaseq: Leaseq, queue: str, count: int, *extra: str) -> tuple[str, list[str]]:
    """(receive's --json output, the receipts in it)."""
    result = leaseq("receive", queue, "--max", str(count), "--wait", "0", "--json", *extra)
    assert result.exit_code == 0, result.stderr
    receipts = [m["receipt"] for m in json.loads(result.stdout)["messages"]]
    assert len(receipts) == count
    return result.stdout, receipts


def test_receive_prints_receipts_that_ack_takes(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue], input="a\nb\n")
    printed = leaseq.ok(["receive", queue, "--max", "2", "--wait", "0"]).stdout
    assert "receipts" in printed
    peeked = leaseq.json("peek", queue, "--include-leased")["messages"]
    receipt_lines = [line.split() for line in printed.splitlines() if "  message " in line]
    assert [words[2] for words in receipt_lines] == [m["message_id"] for m in peeked]
    receipts = [words[0] for words in receipt_lines]
    result = leaseq.ok(["ack", queue, *receipts])
    assert [line.split() for line in result.stdout.splitlines()] == [["OK", r] for r in receipts]
    assert result.stderr == "acknowledged 2 of 2\n"
    assert leaseq.json("queue", "stats", queue)["total"] == 0


def test_ack_reads_receive_json_from_stdin(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue], input="a\nb\nc\n")
    document, receipts = _received(leaseq, queue, 3)
    acked = leaseq.json("ack", queue, input=document)
    assert acked == {
        "queue": queue,
        "results": [{"receipt": r, "status": "OK", "visible_at": None} for r in receipts],
    }
    # Acking again is harmless: ALREADY_DELETED counts as done.
    again = leaseq("ack", queue, input=document)
    assert again.exit_code == 0
    assert {line.split()[0] for line in again.stdout.splitlines()} == {"ALREADY_DELETED"}


def test_ack_reads_plain_receipts_from_stdin(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue], input="a\nb\n")
    _, receipts = _received(leaseq, queue, 2)
    result = leaseq("ack", queue, "-", input=f"{receipts[0]}\n  {receipts[1]}\n")
    assert result.exit_code == 0, result.stderr
    assert leaseq.json("queue", "stats", queue)["total"] == 0


def test_a_failed_receipt_fails_the_command(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue, "a"])
    _, [receipt] = _received(leaseq, queue, 1)
    result = leaseq("ack", queue, receipt, "not-a-receipt")
    assert result.exit_code == 1
    assert [line.split() for line in result.stdout.splitlines()] == [
        ["OK", receipt],
        ["INVALID_RECEIPT", "not-a-receipt"],
    ]
    assert result.stderr == "acknowledged 1 of 2\n"


def test_release_with_delay_and_reason(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue], input="a\nb\n")
    document, receipts = _received(leaseq, queue, 2, "--visibility", "10m")
    released = leaseq.json(
        "release", queue, "--delay", "0", "--reason", "try later", input=document
    )
    assert [r["status"] for r in released["results"]] == ["OK", "OK"]
    peeked = leaseq.json("peek", queue)["messages"]
    assert [(m["state"], m["last_error"]) for m in peeked] == [("VISIBLE", "try later")] * 2
    # A released lease is over: its receipt can no longer release or extend.
    late = leaseq("release", queue, receipts[0])
    assert late.exit_code == 1 and late.stdout.split()[0] != "OK"


def test_release_with_a_delay_keeps_the_message_invisible(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue, "a"])
    _, [receipt] = _received(leaseq, queue, 1)
    leaseq.ok(["release", queue, receipt, "--delay", "5m"])
    [peeked] = leaseq.json("peek", queue, "--include-leased")["messages"]
    assert peeked["state"] == "LEASED"


def test_extend_moves_the_lease_end(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue, "a"])
    document, [receipt] = _received(leaseq, queue, 1, "--visibility", "30s")
    before = datetime.fromisoformat(json.loads(document)["messages"][0]["visible_at"])
    extended = leaseq.json("extend", queue, "--by", "2h", input=document)
    [result] = extended["results"]
    assert result["status"] == "OK" and result["receipt"] == receipt
    after = datetime.fromisoformat(result["visible_at"])
    assert (after - before).total_seconds() > 3600
    shown = leaseq.ok(["extend", queue, receipt, "--by", "60s"]).stdout
    assert shown.startswith(f"OK  {receipt}  visible at ")


def test_extend_needs_by(leaseq: Leaseq, queue: str) -> None:
    result = leaseq("extend", queue, "some-receipt")
    assert result.exit_code == 2 and "--by" in result.stderr


def test_no_receipts_is_a_usage_error(leaseq: Leaseq, queue: str) -> None:
    result = leaseq("ack", queue, input="")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: no receipts: give RECEIPT... or pipe them in, e.g. "
        "leaseq receive QUEUE --json | leaseq ack QUEUE\n"
    )


def test_json_without_receipts_is_a_usage_error(leaseq: Leaseq, queue: str) -> None:
    sent = leaseq("send", queue, "a", "--json").stdout  # message ids, no receipts
    result = leaseq("ack", queue, input=sent)
    assert result.exit_code == 2 and "has no receipt" in result.stderr
    assert result.stderr.count("\n") == 1
    broken = leaseq("ack", queue, input='{"messages": [')
    assert broken.exit_code == 2 and broken.stderr.startswith(
        "Error: standard input is not valid JSON"
    )
    assert broken.stderr.count("\n") == 1


def test_dead_letter_moves_the_messages_now_with_the_reason(
    leaseq: Leaseq, queue_name: str
) -> None:
    dlq = f"{queue_name}-dlq"
    leaseq.ok(["queue", "create", dlq])
    leaseq.ok(
        ["queue", "create", queue_name, "--dead-letter-queue", dlq, "--max-delivery-count", "5"]
    )
    leaseq.ok(["send", queue_name], input="a\nb\n")
    document, receipts = _received(leaseq, queue_name, 2)
    result = leaseq.ok(["dead-letter", queue_name, receipts[0], "--reason", "unparsable"])
    assert result.stdout.split() == ["OK", receipts[0]]
    assert result.stderr == "dead-lettered 1 of 1\n"
    # Again (stdin, as receive --json printed it): the moved one is gone, the other moves.
    again = leaseq("dead-letter", queue_name, "--json", input=document)
    assert again.exit_code == 1
    statuses = [r["status"] for r in json.loads(again.stdout)["results"]]
    assert statuses == ["MESSAGE_NOT_FOUND", "OK"]
    dead = leaseq.json("peek", dlq)["messages"]
    assert [(m["body"], m["last_error"], m["delivery_count"]) for m in dead] == [
        ("a", "unparsable", 1),
        ("b", "", 1),
    ]
    assert leaseq.json("queue", "stats", queue_name)["total"] == 0


def test_dead_letter_without_a_dead_letter_queue_is_an_error(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue], input="a\n")
    _, [receipt] = _received(leaseq, queue, 1)
    result = leaseq("dead-letter", queue, receipt)
    assert result.exit_code == 1
    assert "no dead letter queue" in result.stderr
    assert leaseq.json("queue", "stats", queue)["leased"] == 1


def test_a_queue_made_with_a_retry_backoff_shows_it(leaseq: Leaseq, queue_name: str) -> None:
    created = leaseq.json("queue", "create", queue_name, "--retry-backoff", "1s,4s")
    assert created["config"]["retry_policy"] == {"minimum_backoff": 1.0, "maximum_backoff": 4.0}
    assert "1s .. 4s" in leaseq.ok(["queue", "get", queue_name]).stdout
    bad = leaseq("queue", "update", queue_name, "--retry-backoff", "5s,1s")
    assert bad.exit_code != 0 and "maximum_backoff" in bad.stderr
