"""The console's JSON API: each handler translates JSON to calls of core.QueueCore and back.

Every grant is checked by the core with the request's principal (the same rules as gRPC); the
`can` flags of an answer only tell the page which buttons to show. Pages are bounded: at most
MAX_QUEUES queues per overview, at most MAX_MESSAGES messages and about PAGE_BYTES of bodies per
message list (the store's byte limit), and counts come from the stats (never a scan of the
messages). Bad input is a 400 with {"error": {...}}, never a 500, and changes nothing.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import math
from typing import Any

from aiohttp import web

from ...auth import ACTIONS, Principal
from ...core import QueueCore
from ...domain.types import (
    MessageState,
    NewMessage,
    PeekedMessage,
    QueueConfig,
    QueueInfo,
    QueueStats,
    RetryPolicy,
)
from ...errors import InvalidArgument, clip
from ...traffic import WINDOW_SECONDS
from .. import request_body
from ..http_body import BODY_LIMIT
from .history import DepthHistory

MAX_BODY_BYTES = 8 * 1024  # a body read where the guard set no limit
MAX_QUEUES = 50  # queues of one overview page (each costs one stats read per refresh)
MAX_MESSAGES = 200  # messages of one list page
DEFAULT_MESSAGES = 50
PAGE_BYTES = 1024 * 1024  # bodies of one list page (the store stops after the message reaching it)
PREVIEW_CHARS = 120  # of each body in a list
OVERVIEW_SECONDS = 60  # rate history sent with each overview row
QUEUE_SECONDS = WINDOW_SECONDS

_DURATIONS = (
    "visibility_timeout",
    "receive_wait_time",
    "message_retention",
    "default_delay",
    "dedup_window",
)
_INTS = ("max_message_bytes", "max_delivery_count", "max_in_flight")


class ApiError(Exception):
    """A refusal of the console itself (not of the core): status, code, message."""

    def __init__(self, status: int, code: str, message: str, field: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field


def bad(field: str, message: str) -> ApiError:
    return ApiError(400, "INVALID_ARGUMENT", f"{field}: {message}", field)


# --- reading requests -------------------------------------------------------------------------


async def json_body(request: web.Request) -> dict[str, Any]:
    try:
        # The limit is the guard's (app.py): small until the session has signed in.
        raw = await request_body.read(request, request.get(BODY_LIMIT, MAX_BODY_BYTES))
    except request_body.UndecodableBody as error:
        raise bad("body", str(error)) from None
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise bad("body", "not JSON") from None
    except RecursionError:  # nested deeper than the decoder goes; no request here needs that
        raise bad("body", "JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise bad("body", "a JSON object is expected")
    return data


def _number(data: dict[str, Any], key: str, default: float | None = None) -> float | None:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(key, "a number is expected")
    return float(value)


def _int(data: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(key, "an integer is expected")
    return value


def _string(data: dict[str, Any], key: str, default: str = "", limit: int = 1024) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise bad(key, "a string is expected")
    if len(value) > limit:
        raise bad(key, f"at most {limit} characters")
    return value


def _query_int(request: web.Request, key: str, default: int, low: int, high: int) -> int:
    text = request.query.get(key)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise bad(key, "an integer is expected") from None
    if not low <= value <= high:
        raise bad(key, f"{clip(text)} is out of range [{low}, {high}]")
    return value


def _retry_policy(value: object) -> RetryPolicy | None:
    """null, or {minimum_backoff, maximum_backoff} in seconds (an unset one: its default)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not set(value) <= {"minimum_backoff", "maximum_backoff"}:
        raise bad("config.retry_policy", "null or {minimum_backoff, maximum_backoff} is expected")
    backoffs = {}
    for key in value:
        number = _number(value, key)
        if number is None:
            raise bad(f"config.retry_policy.{key}", "a number is expected")
        backoffs[key] = number
    return RetryPolicy(**backoffs)


def config_changes(data: object) -> dict[str, Any]:
    """QueueConfig fields from JSON (durations in seconds); the core checks the ranges."""
    if not isinstance(data, dict):
        raise bad("config", "a JSON object is expected")
    known = {f.name for f in dataclasses.fields(QueueConfig)}
    changes: dict[str, Any] = {}
    for key in data:
        if key not in known:
            raise bad(f"config.{clip(key, 40)}", "no such setting")
        if key in _DURATIONS:
            changes[key] = _number(data, key)
            if changes[key] is None:
                raise bad(f"config.{key}", "a number is expected")
        elif key in _INTS:
            changes[key] = _int(data, key)
            if changes[key] is None and key != "max_delivery_count":
                raise bad(f"config.{key}", "an integer is expected")
        elif key == "retry_policy":
            changes[key] = _retry_policy(data[key])
        else:  # dead_letter_queue
            value = data[key]
            if value is not None and not isinstance(value, str):
                raise bad("config.dead_letter_queue", "a queue name or null is expected")
            changes[key] = value or None
    return changes


# --- writing answers --------------------------------------------------------------------------


def stats_json(stats: QueueStats, with_channels: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "visible": stats.visible,
        "leased": stats.leased,
        "delayed": stats.delayed,
        "total": stats.total,
        "oldest_visible_age": stats.oldest_visible_age,
        "dead_lettered_total": stats.dead_lettered_total,
        "expired_total": stats.expired_total,
        "deleted_total": stats.deleted_total,
        "groups": stats.groups,
        "blocked_groups": stats.blocked_groups,
    }
    if with_channels:
        out["channels"] = [
            {
                "channel": name,
                "visible": c.visible,
                "leased": c.leased,
                "delayed": c.delayed,
                "total": c.total,
            }
            for name, c in sorted(stats.channels.items())
        ]
    return out


def can(core: QueueCore, principal: Principal | None, queue: str) -> dict[str, bool]:
    """Which buttons the page shows for the queue (the server checks again on every action)."""
    return {
        action: core.allows(principal, frozenset({action}), queue) for action in sorted(ACTIONS)
    }


def _state_name(state: MessageState) -> str:
    return state.name.lower()


def _preview(body: bytes) -> str:
    text = body[: PREVIEW_CHARS * 4].decode("utf-8", "replace")
    return text[:PREVIEW_CHARS]


def message_json(core: QueueCore, queue: str, m: PeekedMessage, detail: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "handle": core.tokens.encode_message(queue, m),
        "message_id": m.message_id,
        "state": _state_name(m.state),
        "channel": m.channel,
        "group": m.group,
        "sequence": m.sequence,
        "enqueued_at": m.enqueued_at,
        "expires_at": m.expires_at,
        "visible_at": m.visible_at,
        "delivery_count": m.delivery_count,
        "size": len(m.body),
        "source_queue": m.source_queue,
    }
    if detail:
        out["body_base64"] = base64.b64encode(m.body).decode("ascii")
        out["attributes"] = m.attributes
        out["last_error"] = m.last_error
    else:
        out["preview"] = _preview(m.body)
        out["last_error"] = clip(m.last_error, 200)
    return out


def info_json(info: QueueInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "create_time": info.create_time,
        "config": dataclasses.asdict(info.config),
    }


# --- handlers ---------------------------------------------------------------------------------


class Api:
    def __init__(self, core: QueueCore) -> None:
        self.core = core
        self.depths = DepthHistory()

    def series(self, queue: str, stats: QueueStats, seconds: int) -> dict[str, list[Any]]:
        """The chart's data: sent and acked per second (every front end, traffic.py) and the
        depth as console pages saw it (history.py), this read included."""
        self.depths.record(queue, stats.total)
        sent, acked = self.core.longpoll.traffic.series(queue, seconds)
        return {"sent": sent, "acked": acked, "depth": self.depths.series(queue, seconds)}

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/queues", self.list_queues),
            web.post("/api/queues", self.create_queue),
            web.get("/api/queues/{name}", self.get_queue),
            web.patch("/api/queues/{name}", self.update_queue),
            web.delete("/api/queues/{name}", self.delete_queue),
            web.post("/api/queues/{name}/purge", self.purge),
            web.post("/api/queues/{name}/redrive", self.redrive),
            web.get("/api/queues/{name}/sources", self.sources),
            web.get("/api/queues/{name}/messages", self.messages),
            web.post("/api/queues/{name}/messages", self.send),
            web.get("/api/queues/{name}/messages/{handle}", self.message),
            web.post("/api/queues/{name}/messages/{handle}/release", self.release),
            web.post("/api/queues/{name}/messages/{handle}/delete", self.delete_message),
            web.post("/api/queues/{name}/messages/{handle}/dead-letter", self.dead_letter),
        ]

    @staticmethod
    def principal(request: web.Request) -> Principal | None:
        principal: Principal | None = request["principal"]  # set by the app's guard
        return principal

    async def list_queues(self, request: web.Request) -> web.Response:
        principal = self.principal(request)
        prefix = request.query.get("prefix", "")
        after = request.query.get("after") or None
        if len(prefix) > 80 or (after is not None and len(after) > 80):
            raise bad("prefix", "at most 80 characters")
        page = await self.core.list_queues(principal, prefix, after, MAX_QUEUES)
        stats = await asyncio.gather(
            *(self.core.stats(principal, q.name) for q in page.queues), return_exceptions=True
        )
        rows = []
        for info, stat in zip(page.queues, stats):
            if isinstance(stat, BaseException):
                continue  # deleted between the listing and its stats
            rows.append(
                {
                    "name": info.name,
                    "dead_letter_queue": info.config.dead_letter_queue,
                    "stats": stats_json(stat, with_channels=False),
                    "rates": self.series(info.name, stat, OVERVIEW_SECONDS),
                    "can": can(self.core, principal, info.name),
                }
            )
        return web.json_response(
            {
                "queues": rows,
                "next_after": page.queues[-1].name if page.more and page.queues else None,
                "server_time": self.core.now(),
            }
        )

    async def create_queue(self, request: web.Request) -> web.Response:
        data = await json_body(request)
        name = _string(data, "name", limit=200)
        changes = config_changes(data.get("config", {}))
        info = await self.core.create_queue(
            self.principal(request), name, dataclasses.replace(QueueConfig(), **changes)
        )
        return web.json_response(info_json(info), status=201)

    async def get_queue(self, request: web.Request) -> web.Response:
        principal, name = self.principal(request), request.match_info["name"]
        info = await self.core.get_queue(principal, name)
        stats = await self.core.stats(principal, name)
        out = info_json(info)
        out.update(
            stats=stats_json(stats, with_channels=True),
            rates=self.series(name, stats, QUEUE_SECONDS),
            can=can(self.core, principal, name),
            server_time=self.core.now(),
        )
        return web.json_response(out)

    async def update_queue(self, request: web.Request) -> web.Response:
        data = await json_body(request)
        changes = config_changes(data.get("config", {}))
        info = await self.core.update_queue(
            self.principal(request), request.match_info["name"], changes
        )
        return web.json_response(info_json(info))

    async def delete_queue(self, request: web.Request) -> web.Response:
        await self.core.delete_queue(self.principal(request), request.match_info["name"])
        self.depths.forget(request.match_info["name"])
        return web.json_response({"deleted": True})

    async def purge(self, request: web.Request) -> web.Response:
        count = await self.core.purge_queue(self.principal(request), request.match_info["name"])
        return web.json_response({"purged": count})

    async def redrive(self, request: web.Request) -> web.Response:
        data = await json_body(request)
        count = _int(data, "max_messages", 0)
        assert count is not None
        if not 0 <= count <= 10_000_000:
            raise bad("max_messages", f"{count} is out of range [0, 10000000]")
        channel = _string(data, "channel", limit=65)
        destination = data.get("destination") or None
        if destination is not None and not isinstance(destination, str):
            raise bad("destination", "a queue name is expected")
        moved = await self.core.redrive(
            self.principal(request), request.match_info["name"], destination, count, channel
        )
        return web.json_response({"moved": moved})

    async def sources(self, request: web.Request) -> web.Response:
        """The queues that dead-letter into this one (a scan of queue configurations, asked once
        per page view, not per refresh)."""
        names = await self.core.dead_letter_sources(
            self.principal(request), request.match_info["name"]
        )
        return web.json_response({"sources": names})

    async def messages(self, request: web.Request) -> web.Response:
        principal, name = self.principal(request), request.match_info["name"]
        limit = _query_int(request, "limit", DEFAULT_MESSAGES, 1, MAX_MESSAGES)
        channel = request.query.get("channel", "")
        states = request.query.get("states", "all")
        if states not in ("all", "visible"):
            raise bad("states", "'all' or 'visible'")
        everything = states == "all"
        token = request.query.get("page", "")
        try:
            after = (
                self.core.tokens.decode_peek(token, name, channel, everything, everything)
                if token
                else None
            )
        except InvalidArgument as error:
            raise bad("page", error.description) from None
        page = await self.core.peek(
            principal, name, limit, channel, everything, everything, after, max_bytes=PAGE_BYTES
        )
        next_page = (
            self.core.tokens.encode_peek(name, page.next_cursor, channel, everything, everything)
            if page.next_cursor is not None
            else None
        )
        return web.json_response(
            {
                "messages": [message_json(self.core, name, m, False) for m in page.messages],
                "next_page": next_page,
                "server_time": self.core.now(),
            }
        )

    async def message(self, request: web.Request) -> web.Response:
        principal, name = self.principal(request), request.match_info["name"]
        visible_at, key, _ = self.core.tokens.decode_message(request.match_info["handle"], name)
        found = await self.core.find_message(principal, name, visible_at, key)
        if found is None:
            raise ApiError(
                404,
                "MESSAGE_MOVED_ON",
                "The message is no longer where the list showed it: it was received, released, "
                "deleted, moved or expired since.",
            )
        out = message_json(self.core, name, found, True)
        out["server_time"] = self.core.now()
        return web.json_response(out)

    async def send(self, request: web.Request) -> web.Response:
        data = await json_body(request)
        body = data.get("body", "")
        if not isinstance(body, str):
            raise bad("body", "a string is expected")
        attributes = data.get("attributes") or {}
        if not isinstance(attributes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
        ):
            raise bad("attributes", "an object of strings is expected")
        try:
            encoded = body.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\udfff" in the JSON): not text
            raise bad("body", "must be valid Unicode text (holds a lone surrogate)") from None
        message = NewMessage(
            body=encoded,
            attributes=attributes,
            channel=_string(data, "channel", limit=65),
            delay=_number(data, "delay"),
        )
        [outcome] = await self.core.send(
            self.principal(request), request.match_info["name"], [message]
        )
        if isinstance(outcome, InvalidArgument):
            raise bad(outcome.field.removeprefix("entries[0]."), outcome.description)
        return web.json_response({"message_id": outcome.message_id}, status=201)

    async def release(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        data = await json_body(request)
        reason = _string(data, "reason", limit=1024)
        visible_at, key, seq = self.core.tokens.decode_message(request.match_info["handle"], name)
        status = await self.core.admin_release(
            self.principal(request), name, visible_at, key, seq, reason
        )
        return _lease_answer(status)

    async def delete_message(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        _, key, seq = self.core.tokens.decode_message(request.match_info["handle"], name)
        status = await self.core.admin_delete(self.principal(request), name, key, seq)
        return _lease_answer(status)

    async def dead_letter(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        data = await json_body(request)
        reason = _string(data, "reason", limit=1024)
        _, key, seq = self.core.tokens.decode_message(request.match_info["handle"], name)
        status = await self.core.admin_dead_letter(self.principal(request), name, key, seq, reason)
        return _lease_answer(status)


def _lease_answer(status: Any) -> web.Response:
    """OK, or 409 with the fencing status (the message was delivered again since the page
    showed it, its lease ended, ...): nothing changed."""
    if status.name == "OK":
        return web.json_response({"status": "OK"})
    return web.json_response(
        {
            "error": {
                "code": status.name,
                "message": f"Nothing changed: {status.name.lower().replace('_', ' ')}.",
            }
        },
        status=409,
    )
