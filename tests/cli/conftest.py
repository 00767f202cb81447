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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Whatever Click (or another library) deprecates, the command line must stop using before
    # it is removed: a deprecation warning fails these tests (Click 8.5 deprecated
    # get_text_stream/get_binary_stream, which Click 9 drops).
    for item in items:
        if item.nodeid.startswith("tests/cli/"):
            item.add_marker(pytest.mark.filterwarnings("error::DeprecationWarning"))


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server() as srv:
        yield srv


class Leaseq:
    """Runs `leaseq ...` in-process against the test server (through LEASEQ_TARGET)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.runner = CliRunner()  # click >= 8.2: stdout and stderr apart

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
