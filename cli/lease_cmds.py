"""``leaseq ack|release|extend|dead-letter``: finish, give back, prolong or give up on the leases
``receive`` took.

Receipts come as arguments or on standard input (cli/receipts.py). Each receipt's outcome is
printed (``OK``, ``LEASE_EXPIRED``, ``RECEIPT_SUPERSEDED``, ...); the exit status is 1 when any
receipt failed. For ``ack``, ``ALREADY_DELETED`` counts as done: acking twice is harmless.

Example::

    leaseq receive jobs --max 10 --json > batch.json
    leaseq extend jobs --by 5m < batch.json
    leaseq ack jobs < batch.json
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from leaseq.client import LeaseResult, LeaseStatus, QueueClient, VisibilityChange
from leaseq.client.batching import DEFAULT_BATCH_BYTES, chunks, receipt_cost

from . import output
from .common import DURATION, client_options, open_client
from .receipts import receipts_from

_RECEIPTS_HELP = (
    "RECEIPT... are receipts as receive prints them; without any (or with '-') they are read "
    "from standard input: white-space separated, or the --json output of receive."
)

Apply = Callable[[QueueClient, list[str]], Sequence[LeaseResult]]


def _run(
    command: str,
    queue: str,
    receipt_args: tuple[str, ...],
    client_args: dict[str, Any],
    as_json: bool,
    apply: Apply,
    done: frozenset[LeaseStatus],
    verb: str,
) -> None:
    receipts = receipts_from(receipt_args, sys.stdin, command)
    results: list[LeaseResult] = []
    with open_client(client_args) as client:
        # 10,000 receipts a request (the API's batch limit; receipts are short, so bytes never cut).
        for chunk in chunks(((r, receipt_cost(r)) for r in receipts), DEFAULT_BATCH_BYTES):
            results.extend(apply(client, chunk))
    failed = [r for r in results if r.status not in done]
    if as_json:
        output.print_json({"queue": queue, "results": results})
    else:
        output.print_lease_results(results)
        click.echo(f"{verb} {len(results) - len(failed)} of {len(results)}", err=True)
    if failed:
        sys.exit(1)


@click.command("ack", epilog=_RECEIPTS_HELP)
@click.argument("queue")
@click.argument("receipts", nargs=-1, metavar="[RECEIPT]...")
@client_options
def ack(queue: str, receipts: tuple[str, ...], client_args: dict[str, Any], as_json: bool) -> None:
    """Acknowledge (delete) the messages of QUEUE that RECEIPT... name.

    OK and ALREADY_DELETED count as done; exits with status 1 when any receipt failed.
    """

    def apply(client: QueueClient, chunk: list[str]) -> Sequence[LeaseResult]:
        return client.delete(queue, chunk).results

    done = frozenset({LeaseStatus.OK, LeaseStatus.ALREADY_DELETED})
    _run("ack", queue, receipts, client_args, as_json, apply, done, "acknowledged")


@click.command("release", epilog=_RECEIPTS_HELP)
@click.argument("queue")
@click.argument("receipts", nargs=-1, metavar="[RECEIPT]...")
@click.option(
    "--delay",
    type=DURATION,
    default=0,
    show_default=True,
    help="Visible again after this long (until then the message stays leased).",
)
@click.option("--reason", default="", help="Kept as the messages' last_error.")
@client_options
def release(
    queue: str,
    receipts: tuple[str, ...],
    delay: float,
    reason: str,
    client_args: dict[str, Any],
    as_json: bool,
) -> None:
    """Give the messages RECEIPT... name back to QUEUE for another delivery.

    Works only while the lease is live; exits with status 1 when any receipt failed.
    """

    def apply(client: QueueClient, chunk: list[str]) -> Sequence[LeaseResult]:
        return client.change_visibility(queue, [VisibilityChange(r, delay, reason) for r in chunk])

    _run(
        "release",
        queue,
        receipts,
        client_args,
        as_json,
        apply,
        frozenset({LeaseStatus.OK}),
        "released",
    )


@click.command("extend", epilog=_RECEIPTS_HELP)
@click.argument("queue")
@click.argument("receipts", nargs=-1, metavar="[RECEIPT]...")
@click.option(
    "--by",
    "by",
    type=DURATION,
    required=True,
    help="The leases end this long from now (0s .. 7d), e.g. 60s, 5m.",
)
@client_options
def extend(
    queue: str,
    receipts: tuple[str, ...],
    by: float,
    client_args: dict[str, Any],
    as_json: bool,
) -> None:
    """Make the leases RECEIPT... name end --by from now (SQS's ChangeMessageVisibility).

    Works only while the lease is live; exits with status 1 when any receipt failed.
    """

    def apply(client: QueueClient, chunk: list[str]) -> Sequence[LeaseResult]:
        return client.change_visibility(queue, [VisibilityChange(r, by) for r in chunk])

    _run(
        "extend",
        queue,
        receipts,
        client_args,
        as_json,
        apply,
        frozenset({LeaseStatus.OK}),
        "extended",
    )


@click.command("dead-letter", epilog=_RECEIPTS_HELP)
@click.argument("queue")
@click.argument("receipts", nargs=-1, metavar="[RECEIPT]...")
@click.option("--reason", default="", help="Kept as the messages' last_error.")
@client_options
def dead_letter(
    queue: str,
    receipts: tuple[str, ...],
    reason: str,
    client_args: dict[str, Any],
    as_json: bool,
) -> None:
    """Move the messages RECEIPT... name to QUEUE's dead letter queue now, instead of retrying.

    Like ack, the latest receipt works after its lease ended; exits with status 1 when any
    receipt failed, and with an error when QUEUE has no dead letter queue.
    """

    def apply(client: QueueClient, chunk: list[str]) -> Sequence[LeaseResult]:
        return client.dead_letter(queue, chunk, reason)

    _run(
        "dead-letter",
        queue,
        receipts,
        client_args,
        as_json,
        apply,
        frozenset({LeaseStatus.OK}),
        "dead-lettered",
    )
