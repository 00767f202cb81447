"""Message move tasks (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask): each
task an asyncio task of this server process that redrives the dead letter queue in steps through
`QueueCore.redrive` (so the store's redrive rules hold), at most MaxNumberOfMessagesPerSecond a
second when given (SQS: at most 500), as fast as the store moves them otherwise.

SQS's rules: one active task per source queue; the source is a dead letter queue (some queue's
RedrivePolicy names it); ListMessageMoveTasks gives the most recent tasks of a source (up to 10,
MaxResults 1 by default) with the statuses RUNNING, CANCELLING, CANCELLED, COMPLETED, FAILED, the
messages moved and to move (the source's visible messages when the task started); a task handle
is shown while the task runs, and CancelMessageMoveTask of a task that is not running is
ResourceNotFoundException. Tasks live in the process that started them (a restart or another
worker of `serve --workers` does not know them)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import secrets
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ...auth import Principal
from ...core import QueueCore
from ...errors import LeaseqError
from . import queue_attributes as qattrs
from .errors import RESOURCE_NOT_FOUND, UNSUPPORTED_OPERATION, SqsError, invalid_value
from .params import Context, integer, required_string, string

log = logging.getLogger(__name__)

MAX_RATE = 500  # MaxNumberOfMessagesPerSecond's maximum
KEPT_TASKS = 10  # the tasks ListMessageMoveTasks can show per source queue
STEP = 1000  # messages per redrive step when no rate is given


@dataclass
class MoveTask:
    handle: str
    source: str
    source_arn: str
    destination: str | None
    destination_arn: str | None
    rate: int | None
    started_ms: int
    to_move: int
    moved: int = 0
    status: str = "RUNNING"
    failure: str = ""
    runner: asyncio.Task[None] | None = field(default=None, repr=False)

    def entry(self) -> dict[str, Any]:
        """Its ListMessageMoveTasksResultEntry."""
        entry: dict[str, Any] = {
            "Status": self.status,
            "SourceArn": self.source_arn,
            "ApproximateNumberOfMessagesMoved": self.moved,
            "ApproximateNumberOfMessagesToMove": self.to_move,
            "StartedTimestamp": self.started_ms,
        }
        if self.status == "RUNNING":
            entry["TaskHandle"] = self.handle
        if self.destination_arn:
            entry["DestinationArn"] = self.destination_arn
        if self.rate is not None:
            entry["MaxNumberOfMessagesPerSecond"] = self.rate
        if self.failure:
            entry["FailureReason"] = self.failure
        return entry


class MoveTasks:
    """The move tasks of one SQS front end."""

    def __init__(self) -> None:
        self._by_source: dict[str, deque[MoveTask]] = {}

    def running(self, source: str) -> MoveTask | None:
        tasks = self._by_source.get(source)
        if tasks and tasks[0].status in ("RUNNING", "CANCELLING"):
            return tasks[0]
        return None

    def start(self, core: QueueCore, principal: Principal | None, task: MoveTask) -> None:
        self._by_source.setdefault(task.source, deque(maxlen=KEPT_TASKS)).appendleft(task)
        task.runner = asyncio.get_running_loop().create_task(_run(core, principal, task))

    def recent(self, source: str, limit: int) -> list[MoveTask]:
        return list(self._by_source.get(source, ()))[:limit]

    def by_handle(self, handle: str) -> MoveTask | None:
        source = _source_of(handle)
        return next((t for t in self._by_source.get(source or "", ()) if t.handle == handle), None)

    def forget(self, source: str) -> None:
        self._by_source.pop(source, None)

    async def stop(self) -> None:
        """Cancel every running task (the server stops): they end CANCELLED."""
        runners = [t.runner for ts in self._by_source.values() for t in ts if t.runner]
        for runner in runners:
            runner.cancel()
        for runner in runners:
            with contextlib.suppress(asyncio.CancelledError):
                await runner


async def _run(core: QueueCore, principal: Principal | None, task: MoveTask) -> None:
    loop = asyncio.get_running_loop()
    step = task.rate or STEP
    try:
        while True:  # the first step, then one a second (with a rate) until cancelled or done
            began = loop.time()
            moved = await core.redrive(principal, task.source, task.destination, step)
            task.moved += moved
            if moved < step or task.status != "RUNNING":
                break
            if task.rate is not None:
                await asyncio.sleep(max(0.0, began + 1.0 - loop.time()))
            if task.status != "RUNNING":
                break
        task.status = "CANCELLED" if task.status == "CANCELLING" else "COMPLETED"
    except asyncio.CancelledError:
        task.status = "CANCELLED"
        raise
    except LeaseqError as error:
        task.status, task.failure = "FAILED", str(error)[:1000]
    except Exception:  # a bug: logged, and the task says it failed
        log.exception("message move task of %s failed", task.source)
        task.status, task.failure = "FAILED", "internal error"
    finally:
        task.to_move = max(task.to_move, task.moved)


def _source_of(handle: str) -> str | None:
    try:
        data = json.loads(base64.urlsafe_b64decode(handle.encode() + b"=="))
    except (ValueError, binascii.Error, UnicodeError, RecursionError):
        return None
    source = data.get("s") if isinstance(data, dict) else None
    return source if isinstance(source, str) else None


def _not_found() -> SqsError:
    return SqsError(RESOURCE_NOT_FOUND, "Task does not exist.")


# --- the actions --------------------------------------------------------------------------------


async def start_message_move_task(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    source_arn = required_string(params, "SourceArn")
    source = qattrs.name_from_arn(source_arn, "SourceArn")
    destination_arn = string(params, "DestinationArn", required=False)
    destination = (
        qattrs.name_from_arn(destination_arn, "DestinationArn") if destination_arn else None
    )
    rate = integer(params, "MaxNumberOfMessagesPerSecond", 1, MAX_RATE)
    await ctx.core.get_queue(ctx.principal, source)
    if destination is not None:
        await ctx.core.get_queue(ctx.principal, destination)
    if not await ctx.core.dead_letter_sources(ctx.principal, source):
        raise invalid_value(
            "SourceArn", source_arn, "Source queue must be configured as a Dead Letter Queue."
        )
    if ctx.move_tasks.running(source) is not None:
        raise SqsError(
            UNSUPPORTED_OPERATION,
            "There is already a task running. Only one active task is allowed for a source "
            "queue arn at a given time.",
        )
    stats = await ctx.core.stats(ctx.principal, source)
    handle = base64.urlsafe_b64encode(
        json.dumps({"s": source, "t": secrets.token_hex(8)}).encode()
    ).decode()
    task = MoveTask(
        handle=handle,
        source=source,
        source_arn=source_arn,
        destination=destination,
        destination_arn=destination_arn,
        rate=rate,
        started_ms=int(ctx.core.now() * 1000),
        to_move=stats.visible,
    )
    ctx.move_tasks.start(ctx.core, ctx.principal, task)
    return {"TaskHandle": handle}


async def list_message_move_tasks(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    source_arn = required_string(params, "SourceArn")
    source = qattrs.name_from_arn(source_arn, "SourceArn")
    limit = integer(params, "MaxResults", 1, KEPT_TASKS) or 1
    await ctx.core.get_queue(ctx.principal, source)
    return {"Results": [task.entry() for task in ctx.move_tasks.recent(source, limit)]}


async def cancel_message_move_task(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    handle = required_string(params, "TaskHandle")
    task = ctx.move_tasks.by_handle(handle)
    if task is None or task.status != "RUNNING":
        raise _not_found()
    await ctx.core.get_queue(ctx.principal, task.source)  # the caller may see the queue
    task.status = "CANCELLING"  # the runner stops after the step it is in
    return {"ApproximateNumberOfMessagesMoved": task.moved}
