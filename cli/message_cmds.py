"""``leaseq send|receive|peek|redrive``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import IO, Any

import click

from leaseq.client import LeaseqError, QueueClient, SendEntry, SendResult
from leaseq.client.batching import DEFAULT_BATCH_BYTES, chunks, send_entry_cost

from . import output
from .common import DURATION, TARGET_KEY, client_options, open_client
from .errors import describe
from .progress import waiting

# --max of receive and peek: the API's batch range, checked before any call (a usage error).
BATCH_SIZE = click.IntRange(1, 10_000)


def _attributes(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--attr")
        out[key] = value
    return out


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Non-empty lines without their line ending: one message each."""
    for line in stream:
        line = line.rstrip(b"\r\n")
        if line:
            yield line


@click.command("send")
@click.argument("queue")
@click.argument("body", required=False)
@click.option(
    "--file",
    "file",
    type=click.File("rb"),
    default=None,
    help="Send each non-empty line of FILE as a message ('-' for stdin).",
)
@click.option(
    "--attr", "attrs", multiple=True, metavar="KEY=VALUE", help="An attribute (repeatable)."
)
@click.option("--channel", default="", help="The messages' channel.")
@click.option("--delay", type=DURATION, default=None, help="Invisible for this long.")
@click.option("--ttl", type=DURATION, default=None, help="Time to live.")
@click.option("--dedup-id", default="", help="Deduplication id (a single BODY only).")
@click.option("--group", default="", help="The messages' group (required on a FIFO queue).")
@client_options
def send(
    queue: str,
    body: str | None,
    file: IO[bytes] | None,
    attrs: tuple[str, ...],
    channel: str,
    delay: float | None,
    ttl: float | None,
    dedup_id: str,
    group: str,
    client_args: dict[str, Any],
    as_json: bool,
) -> None:
    """Send BODY to QUEUE; without BODY, send each non-empty line of --file or stdin.

    Exits with status 1 if any message was refused.
    """
    if body is not None and file is not None:
        raise click.UsageError("give BODY or --file, not both")
    attributes = _attributes(attrs)
    if body is not None:
        bodies: Iterator[bytes] = iter([body.encode("utf-8")])
    else:
        if dedup_id:
            raise click.UsageError("--dedup-id needs a single BODY argument")
        stream = file if file is not None else sys.stdin.buffer
        if stream.isatty():
            # Typing into a bare `leaseq send jobs` looks like a hang without this.
            click.echo(
                "reading messages from the terminal, one per line; end with Ctrl-D", err=True
            )
        bodies = _lines(stream)
    entries = (
        SendEntry(
            b,
            attributes=attributes,
            channel=channel,
            delay=delay,
            ttl=ttl,
            dedup_id=dedup_id,
            id=str(i),
            group=group,
        )
        for i, b in enumerate(bodies)
    )
    # Cut like the Arrow path: 10,000 entries or 32 MiB a request, well below gRPC's 64 MiB.
    costed = ((e, send_entry_cost(e.body, e.channel, e.dedup_id, e.attributes)) for e in entries)
    results: list[SendResult] = []
    with open_client(client_args) as client:
        for chunk in chunks(costed, DEFAULT_BATCH_BYTES):
            try:
                results.extend(client.send_batch(queue, chunk))
            except LeaseqError as e:
                if not results:
                    raise
                # Show what went in before the failure, so that a rerun can skip it.
                _print_send_results(results, as_json)
                target = click.get_current_context().meta.get(TARGET_KEY)
                raise click.ClickException(
                    f"{describe(e, target)}; the {len(results)} message(s) before were sent, "
                    "the rest not"
                ) from e
    failed = [r for r in results if not r.ok]
    if len(results) == 1 and failed and not as_json:
        # One message (BODY, or one line of input): its error like any other failed command's.
        error = failed[0].error
        assert error is not None
        raise click.ClickException(f"{error.message} ({error.code.name})")
    if not results and not as_json:
        click.echo("nothing to send: the input has no non-empty line", err=True)
    _print_send_results(results, as_json)
    if failed:
        sys.exit(1)


def _print_send_results(results: list[SendResult], as_json: bool) -> None:
    if as_json:
        output.print_json({"results": results})
        return
    for r in results:
        if r.error is not None:
            click.echo(f"Error: entry {r.id}: {r.error.message} ({r.error.code.name})", err=True)
        else:
            click.echo(r.message_id + (" (duplicate)" if r.duplicate else ""))
    if len(results) > 1:
        failed = sum(1 for r in results if not r.ok)
        click.echo(f"sent {len(results) - failed} of {len(results)} message(s)", err=True)


@click.command("receive")
@click.argument("queue")
@click.option(
    "max_messages",
    "--max",
    type=BATCH_SIZE,
    default=1,
    show_default=True,
    help="Most messages to lease (1 .. 10,000).",
)
@click.option("--visibility", type=DURATION, default=None, help="Lease length [queue's].")
@click.option("--wait", type=DURATION, default=None, help="Long-poll wait [queue's].")
@click.option("--channel", default=None, help="An exact channel, or a prefix ending in '*'.")
@click.option("--attempt-id", default=None, help="Receive attempt id (repeatable receives).")
@click.option("--delete", "delete", is_flag=True, help="Delete (acknowledge) what was received.")
@client_options
def receive(
    queue: str,
    max_messages: int,
    visibility: float | None,
    wait: float | None,
    channel: str | None,
    attempt_id: str | None,
    delete: bool,
    client_args: dict[str, Any],
    as_json: bool,
) -> None:
    """Lease up to --max messages of QUEUE and print them with their receipts (with --delete:
    and acknowledge them).

    Finish each message with leaseq ack, release or extend and its receipt, e.g.
    leaseq receive QUEUE --json | leaseq ack QUEUE. Waits up to --wait for a first message;
    in a terminal a line on stderr says so meanwhile.
    """
    with open_client(client_args) as client, waiting(queue, wait, quiet=as_json):
        messages = client.receive(
            queue,
            max_messages,
            visibility_timeout=visibility,
            wait_time=wait,
            channel=channel,
            attempt_id=attempt_id,
        )
        deleted = None
        if delete and messages:
            deleted = client.delete(queue, messages)
    if as_json:
        document: dict[str, Any] = {"messages": messages}
        if deleted is not None:
            document["deleted"] = deleted.results
        output.print_json(document)
    else:
        output.print_messages(messages, title="message(s) received")
        if deleted is None:
            output.print_receipts(messages)
        else:
            ok = sum(1 for r in deleted.results if r.ok)
            click.echo(f"deleted {ok} of {len(deleted.results)} message(s)")
    if deleted is not None and not deleted.ok:
        sys.exit(1)


@click.command("peek")
@click.argument("queue")
@click.option(
    "max_messages",
    "--max",
    type=BATCH_SIZE,
    default=10,
    show_default=True,
    help="Most messages to show (1 .. 10,000).",
)
@click.option("--include-leased", is_flag=True, help="Also list leased messages.")
@click.option("--include-delayed", is_flag=True, help="Also list delayed messages.")
@click.option("--channel", default=None, help="An exact channel, or a prefix ending in '*'.")
@client_options
def peek(
    queue: str,
    max_messages: int,
    include_leased: bool,
    include_delayed: bool,
    channel: str | None,
    client_args: dict[str, Any],
    as_json: bool,
) -> None:
    """Show messages of QUEUE without leasing them."""
    with open_client(client_args) as client:
        messages = client.peek(
            queue,
            max_messages,
            include_leased=include_leased,
            include_delayed=include_delayed,
            channel=channel,
        )
    if as_json:
        output.print_json({"messages": messages})
    else:
        output.print_messages(messages, title="message(s)")


@click.command("redrive")
@click.argument("queue")
@click.option("--destination", default=None, help="Target queue [each message's source].")
@click.option(
    "max_messages",
    "--max",
    type=click.IntRange(min=0),
    default=0,
    help="Most messages to move (0: all).",
)
@click.option("--channel", default=None, help="An exact channel, or a prefix ending in '*'.")
@client_options
def redrive(
    queue: str,
    destination: str | None,
    max_messages: int,
    channel: str | None,
    client_args: dict[str, Any],
    as_json: bool,
) -> None:
    """Move messages from dead letter queue QUEUE back to their source queue."""
    with open_client(client_args) as client:
        moved = client.redrive(
            queue, destination=destination, max_messages=max_messages, channel=channel
        )
        # Nothing moved from a queue that dead-letters nothing: most likely the source queue was
        # named instead of its dead letter queue. Say so rather than a bare "moved 0".
        why = "" if moved or as_json else _not_a_dead_letter_queue(client, queue)
    if as_json:
        output.print_json({"queue": queue, "moved_count": moved})
    else:
        click.echo(f"moved {moved} message(s) from {queue}" + (f": {why}" if why else ""))


def _not_a_dead_letter_queue(client: QueueClient, queue: str) -> str:
    """Why a redrive of ``queue`` moved nothing when no queue names it as its dead letter
    queue, with the one to redrive when ``queue`` has one; "" when it is some queue's (or when
    that cannot be told: the redrive itself succeeded). Under a policy only the queues the
    caller holds some grant on are listed, hence "you can list"."""
    try:
        if any(q.config.dead_letter_queue == queue for q in client.list_queues()):
            return ""
        own = client.get_queue(queue).config.dead_letter_queue
    except LeaseqError:
        return ""
    why = f"no queue you can list names {queue} as its dead letter queue"
    return why + (f" (its own is {own}: leaseq redrive {own})" if own else "")
