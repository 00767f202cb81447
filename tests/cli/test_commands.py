"""`leaseq queue|send|receive|peek|redrive` against a real server, through click's CliRunner."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from leaseq.cli.main import cli
from tests.cli.conftest import Leaseq
from tests.support.process import free_port

# --- queue -----------------------------------------------------------------------------------


def test_queue_create_get_list(leaseq: Leaseq, queue_name: str) -> None:
    created = leaseq.json(
        "queue", "create", queue_name, "--visibility-timeout", "2m", "--max-in-flight", "50"
    )
    assert created["name"] == queue_name
    assert created["config"]["visibility_timeout"] == 120.0
    assert created["config"]["max_in_flight"] == 50
    assert created["config"]["dead_letter_queue"] is None
    assert created["create_time"].endswith("+00:00")
    assert leaseq.json("queue", "get", queue_name) == created
    listed = leaseq.json("queue", "list", "--prefix", queue_name)
    assert [q["name"] for q in listed["queues"]] == [queue_name]


def test_queue_update_and_reset(leaseq: Leaseq, queue_name: str) -> None:
    leaseq.ok(["queue", "create", f"{queue_name}-dlq"])
    leaseq.ok(["queue", "create", queue_name, "--visibility-timeout", "45"])
    updated = leaseq.json(
        "queue",
        "update",
        queue_name,
        "--dead-letter-queue",
        f"{queue_name}-dlq",
        "--max-delivery-count",
        "4",
        "--reset",
        "visibility_timeout",
    )
    assert updated["config"]["dead_letter_queue"] == f"{queue_name}-dlq"
    assert updated["config"]["max_delivery_count"] == 4
    assert updated["config"]["visibility_timeout"] == 30.0


def test_queue_update_needs_a_change(leaseq: Leaseq, queue: str) -> None:
    result = leaseq("queue", "update", queue)
    assert result.exit_code == 2 and "nothing to update" in result.stderr


def test_queue_stats_purge_delete(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue], input="a\nb\n")
    stats = leaseq.json("queue", "stats", queue)
    assert (stats["visible"], stats["total"]) == (2, 2)
    assert stats["channels"] == [
        {"channel": "", "visible": 2, "leased": 0, "delayed": 0, "total": 2}
    ]
    assert leaseq.json("queue", "purge", queue, "--yes") == {"queue": queue, "purged_count": 2}
    assert leaseq.json("queue", "delete", queue, "-y") == {"deleted": queue}
    assert leaseq("queue", "get", queue).exit_code == 1


def test_human_output(leaseq: Leaseq, queue: str) -> None:
    assert queue in leaseq.ok(["queue", "list", "--prefix", queue]).stdout
    shown = leaseq.ok(["queue", "get", queue]).stdout
    assert "visibility_timeout" in shown and "30s" in shown and "7d" in shown
    assert "purged 0 message(s)" in leaseq.ok(["queue", "purge", queue, "--yes"]).stdout
    leaseq.ok(["send", queue, "hello there"])
    assert "hello there" in leaseq.ok(["peek", queue]).stdout
    assert "visible" in leaseq.ok(["queue", "stats", queue]).stdout


# --- messages --------------------------------------------------------------------------------


def test_send_one_body(leaseq: Leaseq, queue: str) -> None:
    result = leaseq.ok(["send", queue, "hello", "--attr", "k=v", "--channel", "eu"])
    message_id = result.stdout.strip()
    [peeked] = leaseq.json("peek", queue)["messages"]
    assert peeked["message_id"] == message_id
    assert (peeked["body"], peeked["attributes"], peeked["channel"]) == ("hello", {"k": "v"}, "eu")
    assert peeked["state"] == "VISIBLE"


def test_send_lines_from_stdin(leaseq: Leaseq, queue: str) -> None:
    document = leaseq.json("send", queue, input="one\ntwo\r\n\nthree")
    assert [r["id"] for r in document["results"]] == ["0", "1", "2"]  # the empty line is skipped
    assert all(r["error"] is None for r in document["results"])
    bodies = [m["body"] for m in leaseq.json("peek", queue, "--max", "10")["messages"]]
    assert bodies == ["one", "two", "three"]


def test_send_lines_from_a_file(leaseq: Leaseq, queue: str, tmp_path: Path) -> None:
    path = tmp_path / "bodies.txt"
    path.write_bytes(b"a\n\xff\xfe\n")
    document = leaseq.json("send", queue, "--file", str(path), "--delay", "10m")
    assert len(document["results"]) == 2
    peeked = leaseq.json("peek", queue, "--include-delayed")["messages"]
    assert [(m["body"], m["body_encoding"], m["state"]) for m in peeked] == [
        ("a", "utf-8", "DELAYED"),
        (base64.b64encode(b"\xff\xfe").decode(), "base64", "DELAYED"),
    ]


def test_send_lines_larger_than_one_grpc_message(
    leaseq: Leaseq, queue: str, tmp_path: Path
) -> None:
    # 120 lines of 600 KB are 72 MB: more than gRPC's 64 MiB message limit in one request, so
    # the command must cut its batches by bytes, not only at 10,000 lines.
    path = tmp_path / "big.txt"
    with path.open("wb") as f:
        for i in range(120):
            f.write(f"{i:03d}".encode() + b"x" * 600_000 + b"\n")
    document = leaseq.json("send", queue, "--file", str(path))
    assert [r["error"] for r in document["results"]] == [None] * 120
    assert leaseq.json("queue", "stats", queue)["total"] == 120
    assert leaseq.json("peek", queue)["messages"][0]["body"][:3] == "000"


def test_send_dedup_id(leaseq: Leaseq, queue: str) -> None:
    first = leaseq.json("send", queue, "x", "--dedup-id", "d1")["results"][0]
    again = leaseq.json("send", queue, "x", "--dedup-id", "d1")["results"][0]
    assert again["duplicate"] is True and again["message_id"] == first["message_id"]


def test_fifo_queue_and_send_group(leaseq: Leaseq, queue_name: str) -> None:
    created = leaseq.json(
        "queue", "create", queue_name, "--ordering", "fifo", "--content-based-dedup"
    )
    assert created["config"]["ordering"] == "fifo" and created["config"]["content_based_dedup"]
    leaseq.json("send", queue_name, "a1", "--group", "a")
    leaseq.json("send", queue_name, "--group", "b", input="b1\nb2\n")
    refused = leaseq("send", queue_name, "plain")
    assert refused.exit_code == 1 and "group" in refused.stderr
    peeked = leaseq.json("peek", queue_name)["messages"]
    assert [(m["body"], m["group"]) for m in peeked] == [("a1", "a"), ("b1", "b"), ("b2", "b")]
    assert "group" in leaseq.ok(["peek", queue_name]).stdout
    stats = leaseq.json("queue", "stats", queue_name)
    assert (stats["groups"], stats["blocked_groups"]) == (2, 0)


def test_send_refused_exits_1(leaseq: Leaseq, queue_name: str) -> None:
    leaseq.ok(["queue", "create", queue_name, "--max-message-bytes", "1024"])
    result = leaseq("send", queue_name, "x" * 2000)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "INVALID_ARGUMENT" in result.stderr
    lines = leaseq("send", queue_name, "--json", input="ok\n" + "x" * 2000 + "\n")
    assert lines.exit_code == 1
    results = json.loads(lines.stdout)["results"]
    assert [r["error"] is None for r in results] == [True, False]
    assert results[1]["error"]["code"] == "INVALID_ARGUMENT"


def test_receive_and_delete(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue], input="a\nb\nc\n")
    document = leaseq.json(
        "receive", queue, "--max", "2", "--visibility", "60", "--wait", "0", "--delete"
    )
    messages = document["messages"]
    assert [m["body"] for m in messages] == ["a", "b"]
    assert all(m["receipt"] and m["delivery_count"] == 1 for m in messages)
    assert [d["status"] for d in document["deleted"]] == ["OK", "OK"]
    stats = leaseq.json("queue", "stats", queue)
    assert (stats["total"], stats["deleted_total"]) == (1, 2)


def test_receive_leases_without_delete(leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue, "a"])
    document = leaseq.json("receive", queue, "--wait", "0")
    assert "deleted" not in document and len(document["messages"]) == 1
    peeked = leaseq.json("peek", queue, "--include-leased")["messages"]
    assert [m["state"] for m in peeked] == ["LEASED"]
    assert leaseq.json("receive", queue, "--wait", "0") == {"messages": []}
    assert "0 message(s) received" in leaseq.ok(["receive", queue, "--wait", "0"]).stdout


def test_redrive(leaseq: Leaseq, queue_name: str) -> None:
    dlq = f"{queue_name}-dlq"
    leaseq.ok(["queue", "create", dlq])
    leaseq.ok(
        ["queue", "create", queue_name, "--dead-letter-queue", dlq, "--max-delivery-count", "1"]
    )
    leaseq.ok(["send", queue_name, "poison"])
    leaseq.json("receive", queue_name, "--wait", "0", "--visibility", "0")  # no lease: visible
    assert leaseq.json("receive", queue_name, "--wait", "0") == {"messages": []}  # moved
    assert leaseq.json("redrive", dlq) == {"queue": dlq, "moved_count": 1}
    assert [m["body"] for m in leaseq.json("peek", queue_name)["messages"]] == ["poison"]


# --- errors ----------------------------------------------------------------------------------


def test_server_errors_are_one_line_and_exit_1(leaseq: Leaseq, queue_name: str) -> None:
    result = leaseq("queue", "get", queue_name)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == f"Error: queue '{queue_name}' does not exist (NOT_FOUND)\n"


def test_out_of_range_message(leaseq: Leaseq, queue: str) -> None:
    result = leaseq("receive", queue, "--visibility", "30d")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "visibility_timeout" in result.stderr and "604800s" in result.stderr


def test_max_out_of_the_batch_range_is_a_usage_error(leaseq: Leaseq, queue: str) -> None:
    # Checked before any call, as --wait soon is: exit 2 and click's usage line, not the
    # server's INVALID_ARGUMENT.
    for command, value in (("receive", "0"), ("peek", "0"), ("receive", "10001")):
        result = leaseq(command, queue, "--max", value)
        assert result.exit_code == 2, (command, value, result.stderr)
        assert "Invalid value for '--max'" in result.stderr and "1<=x<=10000" in result.stderr
    assert leaseq("redrive", queue, "--max", "-1").exit_code == 2


def test_a_refused_line_of_input_is_an_error_line(leaseq: Leaseq, queue_name: str) -> None:
    leaseq.ok(["queue", "create", queue_name, "--max-message-bytes", "1024"])
    one = leaseq("send", queue_name, input="x" * 2000 + "\n")
    assert one.exit_code == 1
    assert one.stderr.startswith("Error: entries[0].body: body plus attributes is 2000 bytes")
    assert one.stderr.count("\n") == 1 and one.stdout == ""
    several = leaseq("send", queue_name, input="ok\n" + "x" * 2000 + "\n")
    assert several.exit_code == 1
    assert several.stderr.splitlines() == [
        "Error: entry 1: entries[1].body: body plus attributes is 2000 bytes, over the "
        "queue's max_message_bytes 1024 (INVALID_ARGUMENT)",
        "sent 1 of 2 message(s)",
    ]


def test_redrive_of_a_queue_that_dead_letters_nothing_says_so(
    leaseq: Leaseq, queue_name: str
) -> None:
    dlq = f"{queue_name}-dlq"
    leaseq.ok(["queue", "create", dlq])
    leaseq.ok(
        ["queue", "create", queue_name, "--dead-letter-queue", dlq, "--max-delivery-count", "5"]
    )
    # The source queue named by mistake: say why nothing moved, and what to redrive.
    assert leaseq.ok(["redrive", queue_name]).stdout == (
        f"moved 0 message(s) from {queue_name}: no queue you can list names {queue_name} as "
        f"its dead letter queue (its own is {dlq}: leaseq redrive {dlq})\n"
    )
    # An empty dead letter queue: nothing to explain.
    assert leaseq.ok(["redrive", dlq]).stdout == f"moved 0 message(s) from {dlq}\n"
    assert leaseq.json("redrive", queue_name) == {"queue": queue_name, "moved_count": 0}


def test_queue_list_keeps_each_time_on_one_line_at_80_columns(
    leaseq: Leaseq, queue_name: str
) -> None:
    dlq = f"{queue_name}-dlq"
    leaseq.ok(["queue", "create", dlq])
    leaseq.ok(
        ["queue", "create", queue_name, "--dead-letter-queue", dlq, "--max-delivery-count", "5"]
    )
    result = leaseq.runner.invoke(
        cli,
        ["queue", "list", "--prefix", queue_name],
        env={"LEASEQ_TARGET": leaseq.target, "COLUMNS": "80"},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    times = [re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", line) for line in lines]
    assert sum(1 for t in times if t) == 2  # one whole time per queue, on its name's line
    assert all(queue_name in line for line, t in zip(lines, times) if t)


def test_unreachable_server(leaseq: Leaseq) -> None:
    target = f"127.0.0.1:{free_port()}"
    result = leaseq("queue", "list", "--target", target)
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: no leaseq server answers at {target} (connection refused): "
        "is leaseq serve running?\n"
    )


def test_bad_duration_is_a_usage_error(leaseq: Leaseq, queue: str) -> None:
    result = leaseq("receive", queue, "--wait", "soon")
    assert result.exit_code == 2 and "not a duration" in result.stderr


def test_bad_attribute_is_a_usage_error(leaseq: Leaseq, queue: str) -> None:
    result = leaseq("send", queue, "x", "--attr", "novalue")
    assert result.exit_code == 2 and "KEY=VALUE" in result.stderr


def test_durations_are_shown_to_the_millisecond() -> None:
    from datetime import timedelta

    from leaseq.cli.output import seconds_text

    shown = [seconds_text(timedelta(seconds=s)) for s in (4.36866, 0.25, 30, 90.5, 5400, 604800)]
    assert shown == ["4.369s", "0.25s", "30s", "90.5s", "1h30m", "7d"]
