"""Fixtures of the command-line tests: a real server per module and a CliRunner bound to it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from click.testing import CliRunner, Result

from leaseq.cli.main import cli
from tests.support.server import RunningServer, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server() as srv:
        yield srv


class Leaseq:
    """Runs `leaseq ...` in-process against the test server (through LEASEQ_TARGET)."""

    def __init__(self, target: str) -> None:
        self.target = target
        try:  # click < 8.2 mixes stderr into output unless told not to
            self.runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
        except TypeError:
            self.runner = CliRunner()

    def __call__(self, *args: str, input: str | bytes | None = None) -> Result:
        return self.runner.invoke(
            cli, list(args), input=input, env={"LEASEQ_TARGET": self.target}, catch_exceptions=False
        )

    def json(self, *args: str, input: str | bytes | None = None) -> Any:
        """Run with --json, check success, return the parsed document."""
        result = self(*args, "--json", input=input)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    def ok(self, args: Sequence[str], input: str | bytes | None = None) -> Result:
        result = self(*args, input=input)
        assert result.exit_code == 0, result.stderr
        return result


@pytest.fixture
def leaseq(server: RunningServer) -> Leaseq:
    return Leaseq(server.target)


@pytest.fixture
def queue_name() -> str:
    return f"cli-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def queue(leaseq: Leaseq, queue_name: str) -> str:
    leaseq.ok(["queue", "create", queue_name])
    return queue_name
