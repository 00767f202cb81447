"""`leaseq` as a child process, for what CliRunner cannot show: gRPC core's own log lines on the
real stderr (file descriptor 2), and a terminal (a pseudo-terminal on stdin or stderr)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass

TIMEOUT = 60.0


def child_env(**extra: str) -> dict[str, str]:
    """The test's environment without what the CLI must set up by itself: GRPC_VERBOSITY (the
    in-process CLI tests set it in this process) and LEASEQ_* settings."""
    env = {
        k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY" and not k.startswith("LEASEQ_")
    }
    env.update(extra)
    return env


def run_leaseq(
    args: Sequence[str], *, input: bytes | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """`python -m leaseq.cli ARGS` with pipes for stdin, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "leaseq.cli", *args],
        input=input.decode() if input is not None else "",
        capture_output=True,
        text=True,
        env=child_env(**env),
        timeout=TIMEOUT,
    )


@dataclass
class TerminalRun:
    returncode: int
    stdout: str
    stderr: str  # "" when stderr was the terminal
    terminal: str  # everything the child wrote to the terminal (and its echo of the input)


def run_in_terminal(
    args: Sequence[str],
    *,
    stdin_is_terminal: bool = False,
    stderr_is_terminal: bool = False,
    typed: bytes = b"",
    **env: str,
) -> TerminalRun:
    """Run `leaseq ARGS` with a pseudo-terminal as stdin and/or stderr; stdout is a pipe.
    ``typed`` goes to the terminal's input (``b"\\x04"`` is Ctrl-D: end of input)."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "leaseq.cli", *args],
        stdin=slave if stdin_is_terminal else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave if stderr_is_terminal else subprocess.PIPE,
        env=child_env(TERM="xterm", COLUMNS="120", **env),
    )
    os.close(slave)
    seen = bytearray()

    def read_terminal() -> None:
        # Until the child closes its end (EIO on Linux): the terminal's buffer must not fill up.
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            seen.extend(data)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    if typed:
        os.write(master, typed)
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    finally:
        reader.join(timeout=TIMEOUT)
        os.close(master)
    return TerminalRun(
        process.returncode,
        stdout.decode(),
        (stderr or b"").decode(),
        seen.decode(errors="replace"),
    )
