"""The SQS endpoint: an aiohttp server on the gRPC server's own event loop.

Why aiohttp: asyncio-native (it runs on the loop that runs grpc.aio and the store, so a request
awaits `QueueCore` directly, no threads, no second loop), well kept, and one library for every
HTTP front end of leaseq (the Azure dialect and the web console build on it too).

One handler takes every request: it picks the protocol (an `X-Amz-Target` header means AWS JSON
1.0, anything else the query protocol), reads at most MAX_REQUEST_BYTES, authenticates (SigV4
against the policy's access keys when a policy is configured; without one, any or no credentials
are accepted: `leaseq serve` allows that only on loopback unless --allow-unauthenticated), runs
the action and answers in the protocol's shape. Every failure is an SQS error in that shape:
bad input is a 4xx, never a 500 (a 500 InternalError means a bug, logged with its traceback).

Each answer carries `x-amzn-RequestId` (also in the query protocol's XML); the access log
(logger "leaseq.access") gets one record per request: action, queue, status, duration, peer,
request id, never a body, attribute, receipt or credential. With --metrics-listen, requests count
in the RPC metrics (service "AmazonSQS") and their messages in the per-queue message counters.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.web_protocol import RequestPayloadError

from ...auth import Principal
from ...errors import LeaseqError
from ...logs import request_id_var
from ..dialect import DialectFrontend
from ..http_refusal import BODY_TIMEOUT, BUSY, TOO_LARGE, HttpRefusal
from ..observe import count_request, log_request
from . import identity, protocol_json, protocol_query, sigv4
from . import queue_attributes as qattrs
from .actions import ACTIONS, Context
from .errors import (
    ACCESS_DENIED,
    INTERNAL_ERROR,
    INVALID_ACTION,
    MALFORMED_JSON,
    MALFORMED_QUERY,
    METHOD_NOT_ALLOWED,
    REQUEST_TOO_LARGE,
    SERVICE_UNAVAILABLE,
    SIGNATURE_DOES_NOT_MATCH,
    Kind,
    SqsError,
    from_domain,
)
from .move_tasks import MoveTasks
from .queue_attributes import DEFAULT_REGION, name_from_url

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""Largest request body read (before the signature is checked, so what one unauthenticated
request can make the server hold): SQS's largest request carries 1 MiB of messages and
attributes (one message, or a batch's sum), which the query protocol's percent-encoding or
botocore's JSON escaping (ensure_ascii) make at most three times larger; anything above is
RequestEntityTooLarge (413)."""

READ_ONLY_ACTIONS = frozenset(
    {
        "GetQueueUrl",
        "GetQueueAttributes",
        "ListQueues",
        "ListQueueTags",
        "ListDeadLetterSourceQueues",
        "ListMessageMoveTasks",
        "GetCallerIdentity",
    }
)
"""The actions a GET may carry without an auth policy. SQS takes any action by GET (its query
API), signed in the Authorization header, which a link or an <img> cannot send: so does leaseq
with a policy. Without one nothing is signed, and a GET may carry only actions that change
nothing, so that a page cannot send, receive (which leases), delete or purge by a link or an
<img>. boto3 and aws-cli send every action by POST."""

REQUEST_TIMEOUT = Kind("RequestTimeout", "RequestTimeout", 408)
_REFUSALS = {TOO_LARGE: REQUEST_TOO_LARGE, BODY_TIMEOUT: REQUEST_TIMEOUT, BUSY: SERVICE_UNAVAILABLE}


SERVICE = "AmazonSQS"  # the service label of this front end's metrics and access log

_MESSAGE_COUNTS: dict[str, tuple[str, Any]] = {
    "SendMessage": ("sent", lambda r: 1),
    "SendMessageBatch": ("sent", lambda r: len(r.get("Successful", ()))),
    "ReceiveMessage": ("received", lambda r: len(r.get("Messages", ()))),
    "DeleteMessage": ("deleted", lambda r: 1),
    "DeleteMessageBatch": ("deleted", lambda r: len(r.get("Successful", ()))),
}
"""Action -> (Metrics counter attribute, messages its result counts)."""


class SqsFrontend(DialectFrontend):
    """The aiohttp application and its listener; `start` then `stop`."""

    DEFAULT_PORT = 9324
    MAX_REQUEST_BYTES = MAX_REQUEST_BYTES

    def _setup(self) -> None:
        self.move_tasks = MoveTasks()
        self.account = qattrs.DEFAULT_ACCOUNT

    def set_account(self, account: str | None) -> None:
        """The account id of queue URLs, ARNs and GetCallerIdentity (12 digits)."""
        if account:
            if not qattrs.ACCOUNT_ID.fullmatch(account):
                raise ValueError(f"an AWS account id is 12 digits, not {account!r}")
            self.account = account

    async def stop(self) -> None:
        await super().stop()
        await self.move_tasks.stop()

    # --- requests ---------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        started = time.monotonic()
        request_id = str(uuid.uuid4())
        # In every log record written while the request runs (logs.py), as for gRPC calls.
        reset = request_id_var.set(request_id)
        try:
            return await self._handle(request, request_id, started)
        finally:
            request_id_var.reset(reset)

    async def _handle(self, request: web.Request, request_id: str, started: float) -> web.Response:
        target = request.headers.get("X-Amz-Target")
        is_json = target is not None
        action, queue = "", ""
        unreadable = False  # the body stream broke: the connection cannot carry another request
        try:
            self.check_origin(request)
            if request.method not in ("POST", "GET") or (is_json and request.method != "POST"):
                raise SqsError(METHOD_NOT_ALLOWED, f"Method {request.method} is not allowed.")
            body = await self.read_body(request)
            principal = self._authenticate(request, body)  # before any parsing of the body
            base_url = f"{request.scheme}://{request.host}"
            if is_json:
                action = protocol_json.action_of(target or "")
                self._known(action)
                params = protocol_json.parse(body)
            else:
                text = protocol_query.decode(body) if request.method == "POST" else ""
                pairs = protocol_query.parse_form(request.rel_url.raw_query_string)
                pairs += protocol_query.parse_form(text)
                action, params = protocol_query.parse(pairs, request.path, base_url)
                self._known(action)
                if (
                    request.method == "GET"
                    and self.policy is None
                    and action not in READ_ONLY_ACTIONS
                ):
                    raise SqsError(
                        METHOD_NOT_ALLOWED,
                        f"The action {action} changes state: send it by POST (a GET may carry "
                        "only actions that change nothing).",
                    )
            self._check_service(request, action)
            queue = self._queue_of(params)
            context = Context(
                self.core,
                principal,
                base_url,
                sigv4.region_of(request.headers.get("Authorization")) or DEFAULT_REGION,
                self.move_tasks,
                self.account,
                xml_answer=not is_json,
            )
            result = await ACTIONS[action](context, params)
            status, outcome = 200, "OK"
            if is_json:
                payload, headers = protocol_json.render(result)
            else:
                payload, headers = protocol_query.render(action, result, request_id)
        except Exception as caught:  # every failure becomes an SQS error answer
            unreadable = isinstance(caught, (RequestPayloadError, BadHttpMessage))
            error = self._as_sqs_error(caught, action, is_json)
            status, outcome, result = error.kind.status, error.kind.shape, {}
            if is_json:
                payload, headers = protocol_json.render_error(error)
            else:
                payload, headers = protocol_query.render_error(error, request_id)
        headers["x-amzn-RequestId"] = request_id
        self._log(request, action, queue, status, started)
        if self.metrics is not None:
            self._count(action, queue, outcome, result if outcome == "OK" else None, started)
        response = web.Response(status=status, body=payload, headers=headers)
        if unreadable:
            # Answer, then close: marking the broken body read keeps aiohttp from reading the
            # rest of it after the answer (it would raise the same error again, logged with a
            # traceback), and the connection closes instead of parsing that rest as a request.
            request.content.feed_eof()
            response.force_close()
        return response

    @staticmethod
    def _known(action: str) -> None:
        if action not in ACTIONS:
            shown = action[:100] if action else "(none)"
            raise SqsError(INVALID_ACTION, f"The action {shown} is not valid for this endpoint.")

    @staticmethod
    def _check_service(request: web.Request, action: str) -> None:
        """A request signed for STS may only ask GetCallerIdentity."""
        if action != identity.ACTION and (
            sigv4.service_of(request.headers.get("Authorization")) != sigv4.SERVICE
        ):
            raise SqsError(
                SIGNATURE_DOES_NOT_MATCH,
                f"Credential should be scoped to correct service: '{sigv4.SERVICE}'.",
            )

    @staticmethod
    def _queue_of(params: dict[str, Any]) -> str:
        """For the access log only."""
        for key in ("QueueUrl", "QueueName"):
            value = params.get(key)
            if isinstance(value, str):
                try:
                    return name_from_url(value)
                except SqsError:
                    return ""
        return ""

    def _authenticate(self, request: web.Request, body: bytes) -> Principal | None:
        """The caller's principal; None without a policy (every caller may do everything)."""
        if self.policy is None:
            return None
        keys = self.policy.current().access_keys
        access_key = sigv4.verify(
            method=request.method,
            raw_path=request.rel_url.raw_path,
            raw_query=request.rel_url.raw_query_string,
            headers=request.headers,
            body=body,
            secrets_by_key={key: secret for key, (secret, _) in keys.items()},
        )
        return keys[access_key][1]

    @staticmethod
    def _as_sqs_error(caught: Exception, action: str, is_json: bool) -> SqsError:
        if isinstance(caught, SqsError):
            return caught
        if isinstance(caught, HttpRefusal):
            return SqsError(_REFUSALS.get(caught.reason, ACCESS_DENIED), caught.message)
        if isinstance(caught, LeaseqError):
            return from_domain(caught)
        if isinstance(caught, (RequestPayloadError, BadHttpMessage)):
            # A body aiohttp could not read as its headers say (garbage under Content-Encoding
            # gzip or deflate): the request's fault, in the protocol's "malformed" error.
            return SqsError(
                MALFORMED_JSON if is_json else MALFORMED_QUERY,
                "The request body could not be read as its headers describe it "
                "(Content-Encoding, Content-Length).",
            )
        log.exception("unexpected error in SQS action %s", action or "(unknown)")
        return SqsError(INTERNAL_ERROR, "We encountered an internal error. Please try again.")

    def _count(
        self, action: str, queue: str, outcome: str, result: dict[str, Any] | None, started: float
    ) -> None:
        """The RPC metrics of metrics.py, service "AmazonSQS", code "OK" or the SQS error's name;
        messages sent, received and deleted count in the same per-queue counters as gRPC's."""
        assert self.metrics is not None
        method = action if action in ACTIONS else "-"  # client text never becomes a label
        counted = _MESSAGE_COUNTS.get(action) if result is not None else None
        messages = (counted[0], counted[1](result)) if counted is not None else None
        count_request(self.metrics, SERVICE, method, outcome, started, queue, messages)
        if result is not None and queue and action == "DeleteQueue":
            self.metrics.forget_queue(queue)

    @staticmethod
    def _log(request: web.Request, action: str, queue: str, status: int, started: float) -> None:
        log_request(SERVICE, action, queue, status, started, request.remote or "")
