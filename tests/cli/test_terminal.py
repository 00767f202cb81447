"""What the command line does in a terminal and only there: a long poll says it is waiting,
`send` says how to end its input, `queue delete`/`purge` ask first. Each runs `leaseq` with a
pseudo-terminal on stdin or stderr."""

from __future__ import annotations

import json

from tests.cli.conftest import Leaseq
from tests.cli.processes import run_in_terminal
from tests.support.server import RunningServer

WAITING = "waiting up to 1s for a message on"


def test_long_poll_in_a_terminal_says_it_is_waiting(server: RunningServer, queue: str) -> None:
    run = run_in_terminal(
        ["receive", queue, "--wait", "1s", "--target", server.target], stderr_is_terminal=True
    )
    assert run.returncode == 0, run.terminal
    assert f"{WAITING} {queue}" in run.terminal
    assert "0 message(s) received" in run.stdout


def test_no_waiting_line_in_json_or_without_a_terminal(server: RunningServer, queue: str) -> None:
    as_json = run_in_terminal(
        ["receive", queue, "--wait", "1s", "--json", "--target", server.target],
        stderr_is_terminal=True,
    )
    assert as_json.returncode == 0 and as_json.terminal == ""
    assert json.loads(as_json.stdout) == {"messages": []}
    piped = run_in_terminal(["receive", queue, "--wait", "1s", "--target", server.target])
    assert piped.returncode == 0 and piped.stderr == ""


def test_send_from_a_terminal_says_how_to_end_input(
    server: RunningServer, leaseq: Leaseq, queue: str
) -> None:
    run = run_in_terminal(
        ["send", queue, "--target", server.target],
        stdin_is_terminal=True,
        typed=b"first\nsecond\n\x04",  # Ctrl-D at the start of a line: end of input
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith(
        "reading messages from the terminal, one per line; end with Ctrl-D\n"
    )
    bodies = [m["body"] for m in leaseq.json("peek", queue)["messages"]]
    assert bodies == ["first", "second"]


def test_send_from_a_pipe_says_nothing_more(leaseq: Leaseq, queue: str) -> None:
    result = leaseq("send", queue, input="a\n")
    assert result.exit_code == 0 and result.stderr == ""


def test_queue_delete_asks_in_a_terminal(server: RunningServer, leaseq: Leaseq, queue: str) -> None:
    declined = run_in_terminal(
        ["queue", "delete", queue, "--target", server.target], stdin_is_terminal=True, typed=b"n\n"
    )
    assert declined.returncode == 1
    assert f"Delete queue {queue} and every message in it? [y/N]" in declined.stderr
    assert declined.stderr.endswith("Error: cancelled: nothing was changed\n")
    assert leaseq("queue", "get", queue).exit_code == 0
    accepted = run_in_terminal(
        ["queue", "delete", queue, "--target", server.target], stdin_is_terminal=True, typed=b"y\n"
    )
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout == f"deleted queue {queue}\n"
    assert leaseq("queue", "get", queue).exit_code == 1


def test_queue_purge_asks_in_a_terminal(server: RunningServer, leaseq: Leaseq, queue: str) -> None:
    leaseq.ok(["send", queue, "keep me"])
    declined = run_in_terminal(
        ["queue", "purge", queue, "--target", server.target], stdin_is_terminal=True, typed=b"\n"
    )
    assert declined.returncode == 1  # the default answer is no
    assert f"Delete every message of queue {queue}? [y/N]" in declined.stderr
    assert leaseq.json("queue", "stats", queue)["total"] == 1


def test_delete_and_purge_without_a_terminal_need_yes(leaseq: Leaseq, queue: str) -> None:
    for command in ("delete", "purge"):
        refused = leaseq("queue", command, queue)
        assert refused.exit_code == 2
        assert refused.stderr == "Error: no terminal to ask for confirmation on: add --yes\n"
    assert leaseq("queue", "get", queue).exit_code == 0
    assert leaseq.json("queue", "purge", queue, "--yes") == {"queue": queue, "purged_count": 0}
    assert leaseq.json("queue", "delete", queue, "-y") == {"deleted": queue}
