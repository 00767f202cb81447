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
from dataclasses import replace

from aiohttp import web

from ...auth import Principal
from ...errors import LeaseqError
from ...logs import request_id_var
from .. import http_origin, request_body
from ..dialect import DialectFrontend
from ..http_refusal import BODY_TIMEOUT, BUSY, TOO_LARGE, HttpRefusal
from ..observe import count_request, log_request
from . import acl, properties, request_checks, sas, service_operations, shared_key, xml_bodies
from .errors import (
    INTERNAL_ERROR,
    INVALID_HEADER,
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
CORS_PREFLIGHT_FAILURE = Kind("CorsPreflightFailure", 403)
ALL_OPERATIONS = {**OPERATIONS, **service_operations.OPERATIONS}
_REFUSALS = {TOO_LARGE: REQUEST_BODY_TOO_LARGE, BODY_TIMEOUT: REQUEST_TIMEOUT, BUSY: SERVER_BUSY}
SECONDARY_SUFFIX = "-secondary"  # "<account>-secondary": the account's read-only endpoint
SECONDARY_OPERATIONS = frozenset(
    {
        "ListQueues",
        "GetServiceProperties",
        "GetServiceStats",
        "GetQueueMetadata",
        "GetQueueAcl",
        "PeekMessages",
    }
)
MAX_CLIENT_REQUEST_ID = 1024  # characters of x-ms-client-request-id echoed (Azure's limit)


class _Preflight(Exception):
    """A preflight's answer, out of the operation path."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer


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
        cors: dict[str, str] = {}
        try:
            request_checks.check_headers(request.headers)
            query = single(
                {k: request.rel_url.query.getall(k) for k in request.rel_url.query.keys()}
            )
            if request.method == "OPTIONS":
                found = route(request.method, request.rel_url.raw_path, query)
                raise _Preflight(await self._preflight(request))
            cors = await self._cors(request)
            # Neither SharedKey nor a SAS signs the body: a caller that fails costs no body read.
            found, principal = await self._authorize(request, query)
            body = await self._body(request)
            request_checks.check_content_md5(request.headers, body)
            check_timeout(query)
            answer = await ALL_OPERATIONS[found.operation](
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
        except _Preflight as preflight:
            answer, outcome = preflight.answer, "OK"
        except Exception as caught:  # every failure becomes an Azure error answer
            error = self._as_azure_error(caught, found)
            outcome = error.kind.code
            answer = self._error_answer(error, request_id)
        headers = answer.headers
        headers.update(cors)
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

    async def _cors(self, request: web.Request) -> dict[str, str]:
        """The CORS headers of the answer when a stored rule allows the request's Origin and
        method; then the request may come from that other site. Without a matching rule a
        cross-site request is refused as on every HTTP port (http_origin.py): leaseq's
        development account has a public key, so no page may use it unless a rule says so."""
        origin = request.headers.get("Origin")
        rule = None
        if origin:
            rule = properties.match(await properties.cors_rules(self.core), origin, request.method)
        if rule is None:
            self.check_origin(request)
            return {}
        http_origin.check(
            request,
            open_access=self.policy is None,
            allowed_hosts=self.http.limits.allowed_hosts,
            safe_methods=(request.method,),
        )
        return properties.answer_headers(rule, origin or "")

    async def _preflight(self, request: web.Request) -> Answer:
        """A browser's OPTIONS before a cross-origin request: not authenticated (it carries no
        credentials), answered from the stored CORS rules."""
        origin = request.headers.get("Origin")
        method = request.headers.get("Access-Control-Request-Method")
        if not origin or not method:
            raise AzureError(
                INVALID_HEADER,
                "A required CORS header is not present.",
                {"HeaderName": "Origin" if not origin else "Access-Control-Request-Method"},
            )
        http_origin.check(
            request,
            open_access=self.policy is None,
            allowed_hosts=self.http.limits.allowed_hosts,
            safe_methods=("OPTIONS",),
        )
        requested = request.headers.get("Access-Control-Request-Headers", "")
        rule = properties.match(
            await properties.cors_rules(self.core), origin, method, requested.split(",")
        )
        if rule is None:
            raise AzureError(
                CORS_PREFLIGHT_FAILURE,
                "CORS not enabled or no matching rule found for this request.",
                {"MessageDetails": "No CORS rule matches this origin, method and headers."},
            )
        return Answer(200, headers=properties.preflight_headers(rule, origin, method, requested))

    async def _authorize(
        self, request: web.Request, query: dict[str, str]
    ) -> tuple[Route, Principal | None]:
        """The route (its account the primary one) and the caller: SharedKey, or a SAS."""
        found = route(request.method, request.rel_url.raw_path, query)
        url_account = found.account
        primary = url_account.removesuffix(SECONDARY_SUFFIX)
        if primary != url_account:
            if found.operation not in SECONDARY_OPERATIONS:
                raise AzureError(
                    AUTHORIZATION_FAILURE,
                    "This request is not authorized to perform this operation.",
                    {"Reason": "The secondary endpoint serves reads only."},
                )
            found = replace(found, account=primary)
        if not sas.is_sas(query, request.headers):
            account, principal = self._authenticate(request)
            if account != primary:
                raise shared_key.failed(
                    f"The request is signed for account {account[:64]} but its URL names account "
                    f"{url_account[:64]}."
                )
            return found, principal
        principal = sas.verify_signature(
            query, primary, found.queue if "ss" not in query else None, self._keys()
        )
        policy = None
        if query.get("si") and "ss" not in query:
            policy = await acl.stored_policy(self.core, found.queue, query["si"])
        sas.check(
            query,
            operation=found.operation,
            policy=policy,
            now=self.core.now(),
            remote=request.remote or "",
            scheme=request.scheme,
        )
        return found, principal

    def _keys(self) -> shared_key.Keys:
        if self.policy is None:
            return {shared_key.DEV_ACCOUNT: ((shared_key.DEV_KEY, None),)}
        return self.policy.current().azure_keys

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
        keys = self._keys()
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
