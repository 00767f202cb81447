"""What an OCI operation is given (`Request`) and returns (`Answer`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...auth import Principal
from ...core import QueueCore
from .routing import Route
from .work_requests import WorkRequests


@dataclass
class Request:
    route: Route
    query: Mapping[str, str]
    body: bytes
    principal: Principal | None
    core: QueueCore
    work_requests: WorkRequests
    endpoint: str  # "http://host:port": the messagesEndpoint of every queue


@dataclass
class Answer:
    status: int
    data: Any = None  # the JSON body; None: none
    headers: dict[str, str] = field(default_factory=dict)
    counted: tuple[str, int] | None = None  # (Metrics counter, messages)

    def body(self) -> bytes:
        return b"" if self.data is None else json.dumps(self.data, separators=(",", ":")).encode()


Operation = Callable[[Request], Awaitable[Answer]]
