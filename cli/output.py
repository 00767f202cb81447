"""Printing results: rich tables for people, one JSON document (``--json``) for scripts.

JSON conventions: times are ISO 8601 strings in UTC, durations are seconds (numbers), enums are
their names, and a body is its UTF-8 text with ``"body_encoding": "utf-8"``, or base64 with
``"body_encoding": "base64"`` when it is not valid UTF-8.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import grpc
from rich.console import Console
from rich.table import Table

from leaseq.client import LeaseResult, Message, PeekedMessage, Queue, QueueStats

BODY_PREVIEW = 200
"""Characters of a body shown in a table; JSON always has the whole body."""


def console() -> Console:
    # Built per call: click's CliRunner (and any caller) may have swapped sys.stdout meanwhile.
    # (sys.stdout, not click.get_text_stream: Click 8.5 deprecates it, Click 9 drops it.)
    return Console(file=sys.stdout, soft_wrap=False)


def to_jsonable(value: Any) -> Any:
    """Plain JSON values for the client's dataclasses, enums, times and durations."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name == "body" and isinstance(item, bytes):
                out.update(body_fields(item))
            else:
                out[f.name] = to_jsonable(item)
        return out
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, grpc.StatusCode):
        return value.name
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def body_fields(body: bytes) -> dict[str, str]:
    try:
        return {"body": body.decode("utf-8"), "body_encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "body_encoding": "base64"}


def print_json(document: Any) -> None:
    click.echo(json.dumps(to_jsonable(document), indent=2, sort_keys=False))


def body_preview(body: bytes) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(body)} bytes of binary>"
    return text if len(text) <= BODY_PREVIEW else text[: BODY_PREVIEW - 1] + "…"


def seconds_text(value: timedelta) -> str:
    """A duration the way people write it: 30s, 5m, 1h30m, 7d, 0.5s."""
    total = value.total_seconds()
    if total < 60 or total != int(total):
        return f"{round(total, 3):g}s"  # to the millisecond: 4.369s, not 4.36866s
    parts = []
    rest = int(total)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def when_text(value: datetime | None) -> str:
    """A UTC time to the second, e.g. 2026-01-02 03:04:05Z."""
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value is not None else ""


def attributes_text(attributes: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(attributes.items()))


# --- queues ----------------------------------------------------------------------------------


def print_queue(queue: Queue) -> None:
    table = Table(title=f"queue {queue.name}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("name", queue.name)
    table.add_row("created", when_text(queue.create_time))
    for f in dataclasses.fields(queue.config):
        value = getattr(queue.config, f.name)
        if isinstance(value, timedelta):
            text = seconds_text(value)
        elif dataclasses.is_dataclass(value):  # the retry policy: its two backoffs
            text = " .. ".join(
                seconds_text(getattr(value, g.name)) for g in dataclasses.fields(value)
            )
        else:
            text = "" if value is None else str(value)
        table.add_row(f.name, text)
    console().print(table)


def print_queues(queues: Sequence[Queue]) -> None:
    out = console()
    rows = []
    for q in queues:
        dlq = q.config.dead_letter_queue or ""
        if dlq and q.config.max_delivery_count:
            dlq += f" (after {q.config.max_delivery_count})"
        rows.append(
            (
                q.name,
                seconds_text(q.config.visibility_timeout),
                seconds_text(q.config.message_retention),
                dlq,
                when_text(q.create_time),
            )
        )
    # A time split over two lines at 80 columns (what a pipe gets) reads as two values: times
    # and durations never wrap. Names are what people copy: they keep their width, and fold
    # (never cut) only when they cannot fit. The dead letter queue folds into what is left.
    created = len(when_text(datetime.now(UTC)))
    name = max((len(r[0]) for r in rows), default=4)
    fixed = name + len("visibility") + len("retention") + created + _RULES_AND_PADDING
    table = Table(title=f"{len(queues)} queue(s)")
    table.add_column("name", overflow="fold")
    table.add_column("visibility", no_wrap=True)
    table.add_column("retention", no_wrap=True)
    table.add_column("dead letter queue", overflow="fold", max_width=max(8, out.width - fixed))
    table.add_column("created", no_wrap=True, min_width=created)
    for row in rows:
        table.add_row(*row)
    out.print(table)


# A table of five columns: six vertical rules and a space each side of every cell.
_RULES_AND_PADDING = 6 + 5 * 2


def print_stats(name: str, stats: QueueStats) -> None:
    table = Table(title=f"queue {name}")
    for column in ("channel", "visible", "leased", "delayed", "total"):
        table.add_column(column, justify="right" if column != "channel" else "left")
    table.add_row(
        "(all)",
        str(stats.visible),
        str(stats.leased),
        str(stats.delayed),
        str(stats.total),
        style="bold",
    )
    for c in stats.channels:
        table.add_row(
            c.channel or "(default)", str(c.visible), str(c.leased), str(c.delayed), str(c.total)
        )
    out = console()
    out.print(table)
    out.print(
        f"oldest visible age {seconds_text(stats.oldest_visible_age)}, "
        f"deleted {stats.deleted_total}, expired {stats.expired_total}, "
        f"dead-lettered {stats.dead_lettered_total}"
        + (f", groups {stats.groups} ({stats.blocked_groups} blocked)" if stats.groups else "")
    )


# --- messages --------------------------------------------------------------------------------


def print_messages(messages: Iterable[Message | PeekedMessage], *, title: str) -> None:
    messages = list(messages)
    peeked = bool(messages) and isinstance(messages[0], PeekedMessage)
    # Few columns, so that 80 characters (what a pipe gets) stay readable: channel and
    # attributes only when some message has them. --json has every field.
    with_channel = any(m.channel for m in messages)
    with_group = any(m.group for m in messages)
    with_attributes = any(m.attributes for m in messages)
    table = Table(title=f"{len(messages)} {title}")
    table.add_column("message id", no_wrap=True)
    if peeked:
        table.add_column("state", no_wrap=True)
    table.add_column("#", justify="right")
    if with_channel:
        table.add_column("channel")
    if with_group:
        table.add_column("group")
    if with_attributes:
        table.add_column("attributes")
    table.add_column("body", ratio=1)  # what is left of the width
    for m in messages:
        row = [m.message_id]
        if isinstance(m, PeekedMessage):
            row.append(m.state.name.lower())
        row.append(str(m.delivery_count))
        if with_channel:
            row.append(m.channel)
        if with_group:
            row.append(m.group)
        if with_attributes:
            row.append(attributes_text(m.attributes))
        row.append(body_preview(m.body))
        table.add_row(*row)
    console().print(table)


def print_receipts(messages: Sequence[Message]) -> None:
    """One line per message, receipt first, for ``leaseq ack|release|extend``: plain text, never
    wrapped or cut, so a receipt can be copied whole."""
    if not messages:
        return
    click.echo("receipts (leaseq ack|release|extend QUEUE RECEIPT...):")
    for m in messages:
        click.echo(f"  {m.receipt}  message {m.message_id}")


# --- leases ----------------------------------------------------------------------------------


def print_lease_results(results: Sequence[LeaseResult]) -> None:
    """One line per receipt: its status, the receipt, and when a changed lease ends."""
    width = max((len(r.status.name) for r in results), default=0)
    for r in results:
        line = f"{r.status.name:<{width}}  {r.receipt}"
        if r.visible_at is not None:
            line += f"  visible at {when_text(r.visible_at)}"
        click.echo(line)
