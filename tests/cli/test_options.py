"""Where the common options go, help texts, and Click's deprecation warnings."""

from __future__ import annotations

import json
import re
import warnings

import click
import pytest
from click.testing import CliRunner

from leaseq.cli.main import cli
from tests.support.process import free_port
from tests.support.server import RunningServer


def _invoke(args: list[str], **env: str) -> click.testing.Result:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def test_target_and_json_before_the_command(server: RunningServer) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    result = _invoke(["--target", server.target, "--json", "queue", "list"], LEASEQ_TARGET=nowhere)
    assert result.exit_code == 0, result.stderr
    assert "queues" in json.loads(result.stdout)


def test_target_and_json_after_the_command(server: RunningServer) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    result = _invoke(["queue", "list", "--target", server.target, "--json"], LEASEQ_TARGET=nowhere)
    assert result.exit_code == 0, result.stderr
    assert "queues" in json.loads(result.stdout)


def test_the_command_option_wins_over_the_group_one(server: RunningServer) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    result = _invoke(["--target", nowhere, "queue", "list", "--json", "--target", server.target])
    assert result.exit_code == 0, result.stderr
    result = _invoke(["--target", server.target, "queue", "list", "--target", nowhere])
    assert result.exit_code == 1 and nowhere in result.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--target", "127.0.0.1:1", "serve"], "--target"),
        (["--json", "bench", "send"], "--json"),
        (["--token", "t", "auth", "hash-token", "abc"], "--token"),
    ],
)
def test_client_options_before_a_command_that_ignores_them_are_a_usage_error(
    args: list[str], option: str
) -> None:
    result = _invoke(args)
    assert result.exit_code == 2  # refused before the command runs: no server, no bench
    assert f"Error: {option} is an option of the client commands" in result.stderr


def test_the_environment_may_set_them_for_every_command() -> None:
    result = _invoke(["auth", "hash-token", "abc"], LEASEQ_TARGET="127.0.0.1:1", LEASEQ_TOKEN="t")
    assert result.exit_code == 0 and result.stdout.startswith("sha256:")


def test_tls_options_before_the_command() -> None:
    result = _invoke(["--tls-ca", "/missing.pem", "queue", "list"])
    assert result.exit_code == 2
    assert result.stderr == "Error: --tls-ca /missing.pem: No such file or directory\n"


@pytest.mark.parametrize("command", [["receive"], ["peek"], ["redrive"]])
def test_max_has_a_help_text(command: list[str]) -> None:
    shown = _invoke([*command, "--help"]).stdout
    [line] = [line for line in shown.splitlines() if line.strip().startswith("--max")]
    words = re.sub(r"\[default: [^\]]*\]", "", line).split()
    assert words[2:], line  # more than the option, its metavar and its default


def _commands(group: click.Group, prefix: list[str]) -> list[list[str]]:
    out = []
    for name, command in group.commands.items():
        out.append([*prefix, name])
        if isinstance(command, click.Group):
            out.extend(_commands(command, [*prefix, name]))
    return out


@pytest.mark.parametrize("command", [[]] + _commands(cli, []), ids=" ".join)
def test_no_deprecation_warnings(command: list[str]) -> None:
    # Building and showing every command touches every option and parameter type; Click warns
    # about what it will drop (BaseCommand, MultiCommand, protected_args, __version__, ...).
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        result = _invoke([*command, "--help"])
    assert result.exit_code == 0, result.stderr
