"""The ``leaseq`` command: ``serve``, ``queue ...``, ``send``, ``receive``, ``ack``, ``release``,
``extend``, ``peek``, ``redrive``, ``auth ...``, ``bench``.

Every command but ``serve`` talks to a server at ``--target`` (env ``LEASEQ_TARGET``) and prints
tables for people, or one JSON document with ``--json``; those options go before or after the
subcommand. A failed call prints one line on stderr and exits with status 1; usage errors (a bad
target, an unreadable TLS file) exit with status 2.

Example::

    leaseq serve --store sqlite:///./data/q.db &
    leaseq queue create jobs --visibility-timeout 60
    echo hello | leaseq send jobs
    leaseq receive jobs --max 10 --wait 5 --json | leaseq ack jobs
"""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from leaseq.client import LeaseqError

from .auth_cmd import auth_group
from .bench_cmd import bench
from .common import TARGET_KEY, group_client_options
from .errors import describe
from .lease_cmds import ack, dead_letter, extend, release
from .message_cmds import peek, receive, redrive, send
from .queue_cmds import queue_group
from .serve_cmd import serve

COMMANDLINE = ParameterSource.COMMANDLINE


class LeaseqGroup(click.Group):
    """Turns client errors into a one-line message and exit status 1 (never a traceback)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LeaseqError as e:
            raise click.ClickException(describe(e, ctx.meta.get(TARGET_KEY))) from e


# Commands that do not read the group's connection options (serve and bench have options of
# their own): given before them on the command line, those options would be silently ignored.
_NOT_CLIENT_COMMANDS = ("serve", "bench", "auth")


@click.group(cls=LeaseqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="leaseq")
@group_client_options
def cli(**connection: object) -> None:
    """leaseq: a lease-based message queue served over gRPC.

    The connection options and --json may also follow the command
    (leaseq queue list --target HOST:PORT); there they win over these.
    """
    ctx = click.get_current_context()
    command = ctx.invoked_subcommand
    if command not in _NOT_CLIENT_COMMANDS:
        return
    for param in ctx.command.params:
        if param.name in connection and ctx.get_parameter_source(param.name) is COMMANDLINE:
            option = param.opts[0]
            where = (
                f"; give it after the command (leaseq bench ... {option})"
                if (command == "bench" and option in ("--target", "--json"))
                else ""
            )
            raise click.UsageError(
                f"{option} is an option of the client commands: `leaseq {command}` does not"
                f" read it{where}"
            )


cli.add_command(serve)
cli.add_command(queue_group)
cli.add_command(send)
cli.add_command(receive)
cli.add_command(ack)
cli.add_command(release)
cli.add_command(extend)
cli.add_command(dead_letter)
cli.add_command(peek)
cli.add_command(redrive)
cli.add_command(auth_group)
cli.add_command(bench)


if __name__ == "__main__":  # pragma: no cover
    cli()
