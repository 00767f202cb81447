"""``leaseq queue create|get|list|update|delete|purge|stats``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from leaseq.client import Queue

from . import output
from .common import BACKOFFS, DURATION, client_options, open_client
from .confirm import confirm, yes_option

F = TypeVar("F", bound=Callable[..., Any])

# (option, QueueConfig field, type, help) of every queue setting, shared by create and update.
_CONFIG_OPTIONS: list[tuple[str, str, Any, str]] = [
    ("--visibility-timeout", "visibility_timeout", DURATION, "Lease length (0 .. 7d)."),
    ("--receive-wait-time", "receive_wait_time", DURATION, "Default long-poll wait (0 .. 30s)."),
    ("--message-retention", "message_retention", DURATION, "Message lifetime (60s .. 14d)."),
    ("--default-delay", "default_delay", DURATION, "Delay of every new message."),
    ("--max-message-bytes", "max_message_bytes", int, "Largest body + attributes."),
    ("--dead-letter-queue", "dead_letter_queue", str, "Where undeliverable messages go."),
    ("--max-delivery-count", "max_delivery_count", int, "Deliveries before dead-lettering."),
    ("--max-in-flight", "max_in_flight", int, "Most leased messages at once."),
    ("--dedup-window", "dedup_window", DURATION, "How long a dedup id holds (0 .. 1h)."),
    (
        "--retry-backoff",
        "retry_policy",
        BACKOFFS,
        "MIN,MAX: redeliveries wait min(MAX, MIN * 2^(n-1)) (each 0 .. 600s).",
    ),
]
CONFIG_FIELDS = [field for _, field, _, _ in _CONFIG_OPTIONS]


def config_options(func: F) -> F:
    for option, field, type_, help_ in reversed(_CONFIG_OPTIONS):
        func = click.option(option, field, type=type_, default=None, help=help_)(func)
    return func


def given(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The configuration options that were given on the command line (pops them all)."""
    config = {name: kwargs.pop(name) for name in CONFIG_FIELDS}
    return {name: value for name, value in config.items() if value is not None}


def _show_queue(queue: Queue, as_json: bool) -> None:
    if as_json:
        output.print_json(queue)
    else:
        output.print_queue(queue)


@click.group("queue")
def queue_group() -> None:
    """Create, inspect and change queues."""


@queue_group.command("create")
@click.argument("name")
@config_options
@click.option(
    "--ordering",
    type=click.Choice(["none", "fifo", "fair"]),
    default=None,
    help="Message groups: fifo (send order within a group, one group member leased at a"
    " time) or fair (receives spread over the groups); fixed at creation.",
)
@click.option(
    "--content-based-dedup",
    is_flag=True,
    default=False,
    help="FIFO: a message without a dedup id is deduplicated by its body's SHA-256.",
)
@click.option(
    "--dedup-scope",
    type=click.Choice(["queue", "group"]),
    default=None,
    help="FIFO: dedup ids unique in the queue (default) or in each group.",
)
@client_options
def create(
    name: str,
    ordering: str | None,
    content_based_dedup: bool,
    dedup_scope: str | None,
    client_args: dict[str, Any],
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Create queue NAME (a no-op if it exists with the same configuration).

    Durations are seconds or take a unit: 500ms, 30s, 5m, 2h, 7d.
    """
    config = given(kwargs)
    if ordering is not None:
        config["ordering"] = ordering
    if content_based_dedup:
        config["content_based_dedup"] = True
    if dedup_scope is not None:
        config["dedup_scope"] = dedup_scope
    with open_client(client_args) as client:
        queue = client.create_queue(name, **config)
    _show_queue(queue, as_json)


@queue_group.command("get")
@click.argument("name")
@client_options
def get(name: str, client_args: dict[str, Any], as_json: bool) -> None:
    """Show queue NAME's configuration."""
    with open_client(client_args) as client:
        queue = client.get_queue(name)
    _show_queue(queue, as_json)


@queue_group.command("list")
@click.option("--prefix", default="", help="Only queues whose name starts with this.")
@client_options
def list_(prefix: str, client_args: dict[str, Any], as_json: bool) -> None:
    """List queues in name order."""
    with open_client(client_args) as client:
        queues = client.list_queues(prefix)
    if as_json:
        output.print_json({"queues": queues})
    else:
        output.print_queues(queues)


@queue_group.command("update")
@click.argument("name")
@config_options
@click.option(
    "--reset",
    "reset",
    multiple=True,
    type=click.Choice(CONFIG_FIELDS),
    help="Return a setting to its default (repeatable), e.g. --reset dead_letter_queue.",
)
@client_options
def update(
    name: str, reset: tuple[str, ...], client_args: dict[str, Any], as_json: bool, **kwargs: Any
) -> None:
    """Change the given settings of queue NAME; the others stay as they are."""
    changes: dict[str, Any] = given(kwargs)
    clash = sorted(set(changes) & set(reset))
    if clash:
        raise click.UsageError(f"{', '.join(clash)}: both set and reset")
    changes.update({field: None for field in reset})
    if not changes:
        raise click.UsageError("nothing to update: give at least one setting or --reset")
    with open_client(client_args) as client:
        queue = client.update_queue(name, **changes)
    _show_queue(queue, as_json)


@queue_group.command("delete")
@click.argument("name")
@yes_option
@client_options
def delete(name: str, yes: bool, client_args: dict[str, Any], as_json: bool) -> None:
    """Delete queue NAME and every message in it.

    Asks first in a terminal; elsewhere (a script, a pipe) it needs --yes.
    """
    confirm(f"Delete queue {name} and every message in it?", yes)
    with open_client(client_args) as client:
        client.delete_queue(name)
    if as_json:
        output.print_json({"deleted": name})
    else:
        click.echo(f"deleted queue {name}")


@queue_group.command("purge")
@click.argument("name")
@yes_option
@client_options
def purge(name: str, yes: bool, client_args: dict[str, Any], as_json: bool) -> None:
    """Delete every message of queue NAME, keeping the queue.

    Asks first in a terminal; elsewhere (a script, a pipe) it needs --yes.
    """
    confirm(f"Delete every message of queue {name}?", yes)
    with open_client(client_args) as client:
        count = client.purge_queue(name)
    if as_json:
        output.print_json({"queue": name, "purged_count": count})
    else:
        click.echo(f"purged {count} message(s) from {name}")


@queue_group.command("stats")
@click.argument("name")
@client_options
def stats(name: str, client_args: dict[str, Any], as_json: bool) -> None:
    """Show exact message counts of queue NAME."""
    with open_client(client_args) as client:
        result = client.stats(name)
    if as_json:
        output.print_json(result)
    else:
        output.print_stats(name, result)
