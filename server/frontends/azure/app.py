"""The Azure Queue Storage endpoint: an aiohttp server on the gRPC server's own event loop (the
one HTTP stack of every front end: sqs/app.py says why), over the same `QueueCore`.

One handler takes every request: it refuses header values that are not UTF-8 text, authenticates
(SharedKey or SharedKeyLite against the policy's azure_keys; without a policy, the development
account devstoreaccount1 with its published key, as Azurite) before reading the body (at most
MAX_REQUEST_BYTES; checked against its Content-MD5 when the client sends one, as Azure does),
routes the request (routing.py), runs the operation and answers. Every answer carries x-ms-request-id,
x-ms-version, Date and the client's x-ms-client-request-id; every failure is Azure's XML <Error>
with x-ms-error-code: bad input is a 4xx, never a 500 (a 500 InternalError means a bug, logged
with its traceback). The access log and the RPC metrics (service "AzureQueueStorage") get one
record per request, as for SQS.
"""

from __future__ import annotations

import logging
import time
import uuid

from aiohttp import web

from ...auth import Principal
from ...errors import LeaseqError
from ...logs import request_id_var
from .. import request_body
from ..dialect import DialectFrontend
from ..http_refusal import BODY_TIMEOUT, BUSY, TOO_LARGE, HttpRefusal
from ..observe import count_request, log_request
from . import request_checks, shared_key, xml_bodies
from .errors import (
    INTERNAL_ERROR,
    REQUEST_BODY_TOO_LARGE,
    SERVER_BUSY,
    AzureError,
    Kind,
    from_domain,
    invalid_input,
)
from .operations import OPERATIONS, Answer, Request
from .parameters import check_timeout, single
from .pop_receipts import PopReceipts
from .routing import Route, route
from .times import rfc1123

log = logging.getLogger(__name__)

SERVICE = "AzureQueueStorage"  # the service label of this front end's metrics and access log
DEFAULT_PORT = 10001  # Azurite's queue port
API_VERSION = "2018-03-28"  # answered when the client names none
MAX_REQUEST_BYTES = 12 * 1024 * 1024
"""Largest request body read: an 8 MiB message (leaseq's largest max_message_bytes) escaped in
XML, with room; anything above is RequestBodyTooLarge (413)."""
REQUEST_TIMEOUT = Kind("RequestTimeout", 408)
AUTHORIZATION_FAILURE = Kind("AuthorizationFailure", 403)
_REFUSALS = {TOO_LARGE: REQUEST_BODY_TOO_LARGE, BODY_TIMEOUT: REQUEST_TIMEOUT, BUSY: SERVER_BUSY}
MAX_CLIENT_REQUEST_ID = 1024  # characters of x-ms-client-request-id echoed (Azure's limit)


class AzureFrontend(DialectFrontend):
    """The aiohttp application and its listener; `start` then `stop`."""

    DEFAULT_PORT = DEFAULT_PORT
    MAX_REQUEST_BYTES = MAX_REQUEST_BYTES

    def _setup(self) -> None:
        self._receipts: PopReceipts | None = None

    # --- requests ---------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        started = time.monotonic()
        request_id = str(uuid.uuid4())
        reset = request_id_var.set(request_id)  # in every log record written meanwhile
        try:
            return await self._handle(request, request_id, started)
        finally:
            request_id_var.reset(reset)

    async def _handle(self, request: web.Request, request_id: str, started: float) -> web.Response:
        found: Route | None = None
        try:
            self.check_origin(request)
            request_checks.check_headers(request.headers)
            # SharedKey signs no body: a caller that fails it costs no body read.
            account, principal = self._authenticate(request)
            query = single(
                {k: request.rel_url.query.getall(k) for k in request.rel_url.query.keys()}
            )
            body = await self._body(request)
            request_checks.check_content_md5(request.headers, body)
            found = route(request.method, request.rel_url.raw_path, query)
            if found.account != account:
                raise shared_key.failed(
                    f"The request is signed for account {account[:64]} but its URL names account "
                    f"{found.account[:64]}."
                )
            check_timeout(query)
            answer = await OPERATIONS[found.operation](
                Request(
                    found,
                    query,
                    request.headers,
                    body,
                    principal,
                    self.core,
                    f"{request.scheme}://{request.host}/{found.account}/",
                    self._pop_receipts(),
                )
            )
            outcome = "OK"
        except Exception as caught:  # every failure becomes an Azure error answer
            error = self._as_azure_error(caught, found)
            outcome = error.kind.code
            answer = self._error_answer(error, request_id)
        headers = answer.headers
        headers["x-ms-request-id"] = request_id
        headers["x-ms-version"] = self._version(request)
        headers["Date"] = rfc1123(time.time())
        client_id = request.headers.get("x-ms-client-request-id")
        if client_id:
            headers["x-ms-client-request-id"] = client_id[:MAX_CLIENT_REQUEST_ID]
        operation = found.operation if found is not None else "-"
        queue = found.queue if found is not None else ""
        log_request(SERVICE, operation, queue, answer.status, started, request.remote or "")
        if self.metrics is not None:
            self._count(operation, queue, outcome, answer, started)
        response = web.Response(status=answer.status, body=answer.body or None, headers=headers)
        return request_body.close_if_needed(request, response)

    def _pop_receipts(self) -> PopReceipts:
        """Made on first use: the store's secret exists once the store is open."""
        if self._receipts is None:
            self._receipts = PopReceipts(self.core.store.token_key())
        return self._receipts

    async def _body(self, request: web.Request) -> bytes:
        """Within the shared bounds (an HttpRefusal when over them: _as_azure_error answers it)."""
        try:
            return await request_body.read(request, self.max_request_bytes)
        except request_body.UndecodableBody as error:
            raise invalid_input(str(error)) from None

    def _authenticate(self, request: web.Request) -> tuple[str, Principal | None]:
        """(account, principal): the principal None means every action is allowed (no policy:
        the development account)."""
        keys: shared_key.Keys
        if self.policy is None:
            keys = {shared_key.DEV_ACCOUNT: ((shared_key.DEV_KEY, None),)}
        else:
            keys = self.policy.current().azure_keys
        return shared_key.verify(
            method=request.method,
            raw_path=request.rel_url.raw_path,
            raw_query=request.rel_url.raw_query_string,
            headers=request.headers,
            keys=keys,
            now=self.core.now(),
        )

    @staticmethod
    def _version(request: web.Request) -> str:
        version = request.headers.get("x-ms-version", "")
        return (
            version
            if len(version) == 10 and version[4] == "-" and version[7] == "-"
            else API_VERSION
        )

    @staticmethod
    def _as_azure_error(caught: Exception, found: Route | None) -> AzureError:
        if isinstance(caught, AzureError):
            return caught
        if isinstance(caught, HttpRefusal):
            if caught.reason == TOO_LARGE:
                return AzureError(
                    REQUEST_BODY_TOO_LARGE,
                    "The request body is too large and exceeds the maximum permissible limit.",
                    {"MaxLimit": str(caught.limit)},
                )
            kind = _REFUSALS.get(caught.reason, AUTHORIZATION_FAILURE)
            return AzureError(
                kind, caught.message, retry_after=1.0 if kind is SERVER_BUSY else None
            )
        if isinstance(caught, LeaseqError):
            return from_domain(caught)
        log.exception(
            "unexpected error in Azure operation %s", found.operation if found else "(unknown)"
        )
        return AzureError(
            INTERNAL_ERROR,
            "Server encountered an internal error. Please try again after some time.",
        )

    @staticmethod
    def _error_answer(error: AzureError, request_id: str) -> Answer:
        message = f"{error.message}\nRequestId:{request_id}\nTime:{rfc1123(time.time())}"
        headers = {"Content-Type": "application/xml", "x-ms-error-code": error.kind.code}
        if error.retry_after is not None:
            headers["Retry-After"] = str(max(1, round(error.retry_after)))
        return Answer(
            error.kind.status, xml_bodies.error(error.kind.code, message, error.details), headers
        )

    def _count(
        self, operation: str, queue: str, outcome: str, answer: Answer, started: float
    ) -> None:
        assert self.metrics is not None
        count_request(
            self.metrics,
            SERVICE,
            operation,
            outcome,
            started,
            queue,
            answer.counted if outcome == "OK" else None,
        )
        if outcome == "OK" and operation == "DeleteQueue" and queue:
            self.metrics.forget_queue(queue)
