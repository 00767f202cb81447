"""The OCI Queue endpoint: an aiohttp server on the gRPC server's own event loop (the one HTTP
stack of every front end: sqs/app.py says why), over the same `QueueCore`.

One handler takes every request: it checks the OCI request signature (signature.py) before
reading the body (at most MAX_REQUEST_BYTES), checks the body against its signed SHA-256, routes
the request (routing.py), runs the operation and answers JSON. Every answer carries
opc-request-id (the client's, or a new one); every failure is OCI's `{"code", "message"}`: bad
input is a 4xx, never a 500 (a 500 InternalServerError means a bug, logged with its traceback).
The access log and the RPC metrics (service "OciQueue") get one record per request, as for SQS.
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
from . import messages, queues, signature
from .context import Answer, Operation, Request
from .errors import (
    INTERNAL,
    INVALID_PARAMETER,
    PAYLOAD_TOO_LARGE,
    UNAVAILABLE,
    Kind,
    OciError,
    from_domain,
)
from .routing import Route, route
from .work_requests import WorkRequests

log = logging.getLogger(__name__)

SERVICE = "OciQueue"  # the service label of this front end's metrics and access log
DEFAULT_PORT = 10443
MAX_REQUEST_BYTES = 12 * 1024 * 1024
"""Largest request body read: a PutMessages of leaseq's largest messages in JSON, with room;
anything above is PayloadTooLarge (413)."""
NOT_AUTHORIZED = Kind("NotAuthorized", 403)
REQUEST_TIMEOUT = Kind("RequestTimeout", 408)
_REFUSALS = {TOO_LARGE: PAYLOAD_TOO_LARGE, BODY_TIMEOUT: REQUEST_TIMEOUT, BUSY: UNAVAILABLE}
MAX_CLIENT_REQUEST_ID = 98  # characters of a client's opc-request-id echoed (OCI's limit)

OPERATIONS: dict[str, Operation] = {
    "CreateQueue": queues.create_queue,
    "ListQueues": queues.list_queues,
    "GetQueue": queues.get_queue,
    "UpdateQueue": queues.update_queue,
    "DeleteQueue": queues.delete_queue,
    "PurgeQueue": queues.purge_queue,
    "ChangeQueueCompartment": queues.change_compartment,
    "GetStats": queues.get_stats,
    "ListChannels": queues.list_channels,
    "ListWorkRequests": queues.list_work_requests,
    "GetWorkRequest": queues.get_work_request,
    "ListWorkRequestErrors": queues.list_work_request_errors,
    "ListWorkRequestLogs": queues.list_work_request_logs,
    "PutMessages": messages.put_messages,
    "GetMessages": messages.get_messages,
    "UpdateMessage": messages.update_message,
    "UpdateMessages": messages.update_messages,
    "DeleteMessage": messages.delete_message,
    "DeleteMessages": messages.delete_messages,
}


class OciFrontend(DialectFrontend):
    """The aiohttp application and its listener; `start` then `stop`."""

    DEFAULT_PORT = DEFAULT_PORT
    MAX_REQUEST_BYTES = MAX_REQUEST_BYTES

    def _setup(self) -> None:
        self.work_requests = WorkRequests()

    async def handle(self, request: web.Request) -> web.Response:
        started = time.monotonic()
        given = request.headers.get("opc-request-id", "")[:MAX_CLIENT_REQUEST_ID]
        request_id = given if given.isprintable() and given else uuid.uuid4().hex.upper()
        reset = request_id_var.set(request_id)  # in every log record written meanwhile
        try:
            return await self._handle(request, request_id, started)
        finally:
            request_id_var.reset(reset)

    async def _handle(self, request: web.Request, request_id: str, started: float) -> web.Response:
        found: Route | None = None
        try:
            self.check_origin(request)
            principal = self._authenticate(request)
            body = await self._body(request)
            signature.check_body(request.method, request.headers, body)
            found = route(request.method, request.rel_url.raw_path)
            query = {k: request.rel_url.query.getone(k) for k in request.rel_url.query.keys()}
            answer = await OPERATIONS[found.operation](
                Request(
                    found,
                    query,
                    body,
                    principal,
                    self.core,
                    self.work_requests,
                    f"{request.scheme}://{request.host}",
                )
            )
            outcome = "OK"
        except Exception as caught:  # every failure becomes an OCI error answer
            error = self._as_oci_error(caught, found)
            outcome = error.kind.code
            answer = Answer(error.kind.status, {"code": error.kind.code, "message": error.message})
            if error.retry_after is not None:
                answer.headers["Retry-After"] = str(max(1, round(error.retry_after)))
        headers = answer.headers
        headers["opc-request-id"] = request_id
        operation = found.operation if found is not None else "-"
        queue = found.queue_id.rpartition(".")[2] if found is not None else ""
        log_request(SERVICE, operation, queue, answer.status, started, request.remote or "")
        if self.metrics is not None:
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
        body = answer.body()
        if body:
            headers["Content-Type"] = "application/json"
        response = web.Response(status=answer.status, body=body or None, headers=headers)
        return request_body.close_if_needed(request, response)

    def _authenticate(self, request: web.Request) -> Principal | None:
        keys = None if self.policy is None else self.policy.current().oci_keys
        return signature.verify(
            request.method, request.raw_path, request.headers, keys, self.core.now()
        )

    async def _body(self, request: web.Request) -> bytes:
        """Within the shared bounds (an HttpRefusal when over them: _as_oci_error answers it)."""
        try:
            return await request_body.read(request, self.max_request_bytes)
        except request_body.UndecodableBody as error:
            raise OciError(INVALID_PARAMETER, f"The request body is malformed: {error}.") from None

    @staticmethod
    def _as_oci_error(caught: Exception, found: Route | None) -> OciError:
        if isinstance(caught, OciError):
            return caught
        if isinstance(caught, HttpRefusal):
            kind = _REFUSALS.get(caught.reason, NOT_AUTHORIZED)
            return OciError(kind, caught.message, 1.0 if kind is UNAVAILABLE else None)
        if isinstance(caught, LeaseqError):
            return from_domain(caught)
        log.exception(
            "unexpected error in OCI operation %s", found.operation if found else "(unknown)"
        )
        return OciError(INTERNAL, "Internal server error.")
