"""The web console's aiohttp application on the gRPC server's event loop.

Routes: "/" is the page (static/index.html), /static/ its script and style, /api/ the JSON API
(api.py). One middleware guards every request:

- /api/ requests need, when a policy is configured, a signed-in session (sessions.py), whose
  principal is resolved again from the policy on every request (a revoked token signs out at
  once); visitors not signed in hold no session (their CSRF token comes from a nonce cookie);
- a request that may change data (any method but GET/HEAD) needs its CSRF token in the
  X-CSRF-Token header, the sign-in included; then the core checks the principal's grants;
- every failure is a JSON error: a domain error of the core maps to its HTTP status (400, 403,
  404, 409, 429, 503), an unexpected one is a 500 logged with its traceback (a bug);
- a cross-site request that may change data, and without a policy a Host name that is not
  loopback (DNS rebinding), are refused before anything else (http_origin.py);
- a body is read within the shared bounds (http_body.py): at most SIGN_IN_BYTES until the
  session has signed in (when a policy asks for it), MAX_REQUEST_BYTES after;
- every answer carries a strict Content-Security-Policy (scripts and styles from this origin
  only, no framing) and API answers are not cached.

The access log (logger "leaseq.access") gets one record per API request: method, route, queue,
status, duration, peer; never a body, a token, a cookie, a handle or a query string.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web

from ...auth import FixedPolicy, PolicyFile, Principal
from ...core import PermissionDenied, QueueCore
from ...errors import (
    InvalidArgument,
    LeaseqError,
    LeaseRejected,
    NoDeadLetterQueue,
    OutOfRange,
    OverLimit,
    QueueAlreadyExists,
    QueueInUse,
    QueueNotFound,
    Unavailable,
)
from ...logs import request_id_var
from ...metrics import Metrics
from .. import http_origin, request_body
from ..http_body import BODY_LIMIT
from ..http_refusal import HttpRefusal
from ..http_site import HttpShared, HttpSite
from ..observe import count_request, log_request
from .api import Api, ApiError, json_body
from .sessions import COOKIE, CSRF_HEADER, NONCE_COOKIE, Session, Sessions

log = logging.getLogger(__name__)

DEFAULT_PORT = 8080
MAX_REQUEST_BYTES = 32 * 1024 * 1024
"""Largest request body: a sent message's body (up to 8 MiB) as a JSON string, escaping and all."""
SIGN_IN_BYTES = 8 * 1024
"""Largest body before the session has signed in (a sign-in: a token of at most 4,096 characters
in JSON): what an anonymous client can make the server read."""

SERVICE = "Console"

_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_STATIC_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_METHODS = frozenset({"GET", "HEAD", "POST", "PATCH", "DELETE"})


def _status_of(error: LeaseqError) -> tuple[int, str]:
    for kind, status, code in (
        (OutOfRange, 400, "OUT_OF_RANGE"),
        (InvalidArgument, 400, "INVALID_ARGUMENT"),
        (PermissionDenied, 403, "PERMISSION_DENIED"),
        (QueueNotFound, 404, "QUEUE_NOT_FOUND"),
        (QueueAlreadyExists, 409, "QUEUE_ALREADY_EXISTS"),
        (QueueInUse, 409, "QUEUE_IN_USE"),
        (NoDeadLetterQueue, 409, "NO_DEAD_LETTER_QUEUE"),
        (LeaseRejected, 409, "LEASE_REJECTED"),
        (OverLimit, 429, "OVER_LIMIT"),
        (Unavailable, 503, "UNAVAILABLE"),
    ):
        if isinstance(error, kind):
            return status, code
    return 400, "INVALID_ARGUMENT"


def error_response(status: int, code: str, message: str, field: str = "") -> web.Response:
    error: dict[str, Any] = {"code": code, "message": message}
    if field:
        error["field"] = field
    return web.json_response({"error": error}, status=status)


class ConsoleFrontend:
    """The console's application and listener; `start` then `stop`."""

    def __init__(
        self,
        core: QueueCore,
        policy: PolicyFile | FixedPolicy | None = None,
        *,
        metrics: Metrics | None = None,
        http: HttpShared | None = None,
    ) -> None:
        self.core = core
        self.policy = policy
        self.http = http or HttpShared()
        self.metrics = metrics
        self.sessions = Sessions()
        self.api = Api(core)
        self.port = 0
        self._site: HttpSite | None = None
        self._static = resources.files(__package__) / "static"

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES, middlewares=[self.guard])
        app.add_routes(
            [
                web.get("/", self.page),
                web.get("/static/{file}", self.static_file),
                web.get("/api/session", self.session_info),
                web.post("/api/session", self.sign_in),
                web.delete("/api/session", self.sign_out),
                *self.api.routes(),
            ]
        )
        return app

    async def start(self, listen: str) -> int:
        self._site = HttpSite(self.application(), shared=self.http)
        self.port = await self._site.start(listen, DEFAULT_PORT)
        return self.port

    async def stop(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None

    # --- the guard ----------------------------------------------------------------------------

    @web.middleware
    async def guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        started = time.monotonic()
        reset = request_id_var.set(str(uuid.uuid4()))
        try:
            response = await self._guarded(request, handler)
        finally:
            request_id_var.reset(reset)
        request_body.close_if_needed(request, response)
        response.headers["Content-Security-Policy"] = _CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        if request.path.startswith("/api/"):
            response.headers["Cache-Control"] = "no-store"
            self._log(request, response.status, started)
            if self.metrics is not None:
                self._count(request, response.status, started)
        return response

    async def _guarded(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            http_origin.check(
                request,
                open_access=self.policy is None,
                allowed_hosts=self.http.limits.allowed_hosts,
                safe_methods=http_origin.SAFE_METHODS,  # a link from another site opens the page
            )
        except HttpRefusal as refusal:
            return error_response(refusal.status, refusal.reason.upper(), refusal.message)
        if not request.path.startswith("/api/"):
            try:
                return await handler(request)
            except web.HTTPException as error:
                return error
        try:
            session = self.sessions.get(request.cookies.get(COOKIE))
            request["session"] = session
            if request.method not in _SAFE_METHODS and not self.sessions.csrf_ok(
                session, request.cookies.get(NONCE_COOKIE), request.headers.get(CSRF_HEADER)
            ):
                return error_response(
                    403, "CSRF", "Missing or wrong CSRF token: reload the page and try again."
                )
            principal = self._principal(session)
            request["principal"] = principal
            if self.policy is not None and principal is None and request.path != "/api/session":
                return error_response(401, "UNAUTHENTICATED", "Sign in with a token first.")
            signing_in = request.path == "/api/session" or (
                self.policy is not None and principal is None
            )
            request[BODY_LIMIT] = SIGN_IN_BYTES if signing_in else MAX_REQUEST_BYTES
            return await handler(request)
        except HttpRefusal as refusal:
            return error_response(refusal.status, refusal.reason.upper(), refusal.message)
        except ApiError as error:
            return error_response(error.status, error.code, str(error), error.field)
        except LeaseqError as error:
            status, code = _status_of(error)
            return error_response(status, code, str(error), getattr(error, "field", ""))
        except web.HTTPException as error:  # no such route or method: aiohttp's own
            return error_response(
                error.status, "NOT_FOUND" if error.status == 404 else "BAD_REQUEST", error.reason
            )
        except Exception:
            log.exception("unexpected error in console request %s", _route(request))
            return error_response(500, "INTERNAL", "Internal error (logged by the server).")

    def _principal(self, session: Session | None) -> Principal | None:
        """None without a policy (the core then allows everything); else the principal of the
        session's token under the current policy, or None when not signed in."""
        if self.policy is None or session is None or session.token is None:
            return None
        principal = self.policy.current().by_token(session.token)
        if principal is None:
            self.sessions.forget_token(session)  # revoked or removed from the policy: signed out
        return principal

    # --- the page -----------------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.Response:
        return self._file("index.html", "text/html")

    async def static_file(self, request: web.Request) -> web.Response:
        name = request.match_info["file"]
        types = {"js": "text/javascript", "css": "text/css", "svg": "image/svg+xml"}
        kind = types.get(name.rpartition(".")[2])
        # Names as the page's own files are: anything else (a 300-character name the file
        # system refuses, "..", odd characters) is not one of them.
        if kind is None or not _STATIC_NAME.fullmatch(name):
            raise web.HTTPNotFound()
        return self._file(name, kind)

    def _file(self, name: str, content_type: str) -> web.Response:
        resource = self._static / name
        if not resource.is_file():
            raise web.HTTPNotFound()
        return web.Response(
            body=resource.read_bytes(),
            content_type=content_type,
            charset="utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    # --- sessions -----------------------------------------------------------------------------

    def _answer(
        self, request: web.Request, session: Session | None, principal: Principal | None
    ) -> web.Response:
        """The session's state and CSRF token: a signed-in session's own, else the one derived
        from the visitor's nonce cookie (set here when missing; no server state)."""
        nonce = request.cookies.get(NONCE_COOKIE, "")
        fresh_nonce = session is None and not Sessions.nonce_ok(nonce)
        if fresh_nonce:
            nonce = Sessions.new_nonce()
        csrf = session.csrf if session is not None else self.sessions.anonymous_csrf(nonce)
        response = web.json_response(
            {
                "auth": self.policy is not None,
                "signed_in": self.policy is None or principal is not None,
                "principal": principal.name if principal is not None else None,
                # Whether to offer "new queue" (the server checks the grant on the name anyway).
                "may_create": principal is None
                or any("admin" in grant.actions for grant in principal.grants),
                "csrf": csrf,
            }
        )
        # Secure over HTTPS; over plain HTTP (loopback, or behind a TLS proxy) not.
        secure = self.http.tls is not None
        if session is not None:
            response.set_cookie(
                COOKIE, session.id, httponly=True, samesite="Strict", path="/", secure=secure
            )
        elif COOKIE in request.cookies:
            response.del_cookie(COOKIE, path="/")  # signed out, ended or expired
        if fresh_nonce:
            response.set_cookie(
                NONCE_COOKIE, nonce, httponly=True, samesite="Strict", path="/", secure=secure
            )
        return response

    async def session_info(self, request: web.Request) -> web.Response:
        # No session is made here: only a sign-in makes one (a flood of these holds nothing).
        return self._answer(request, request["session"], request["principal"])

    async def sign_in(self, request: web.Request) -> web.Response:
        if self.policy is None:
            raise ApiError(
                400, "NO_AUTH", "This server has no --auth-policy: nothing to sign in to."
            )
        data = await json_body(request)
        token = data.get("token")
        if not isinstance(token, str) or not token or len(token) > 4096:
            raise ApiError(400, "INVALID_ARGUMENT", "token: a token string is expected", "token")
        principal = self.policy.current().by_token(token)
        if principal is None:
            raise ApiError(401, "UNAUTHENTICATED", "Unknown token.")
        self.sessions.end(request["session"])
        return self._answer(request, self.sessions.new(token), principal)

    async def sign_out(self, request: web.Request) -> web.Response:
        self.sessions.end(request["session"])
        return self._answer(request, None, None)

    # --- the access log -----------------------------------------------------------------------

    def _count(self, request: web.Request, status: int, started: float) -> None:
        """The RPC metrics (service "Console", method the route pattern: a fixed set, never
        client text; code "OK" or the HTTP status); messages sent and deleted count per queue
        as gRPC's do."""
        assert self.metrics is not None
        route = _route(request)
        # A label from a fixed set: the routes' patterns with their methods, else "-".
        method = f"{request.method} {route}" if route != "-" and request.method in _METHODS else "-"
        handler = request.match_info.route.handler
        messages = None
        if status < 400 and handler == self.api.send:
            messages = ("sent", 1)
        elif status < 400 and handler == self.api.delete_message:
            messages = ("deleted", 1)
        count_request(
            self.metrics,
            SERVICE,
            method,
            "OK" if status < 400 else str(status),
            started,
            request.match_info.get("name") or "",
            messages,
        )

    @staticmethod
    def _log(request: web.Request, status: int, started: float) -> None:
        queue = request.match_info.get("name") or ""
        log_request(
            SERVICE,
            f"{request.method} {_route(request)}",
            queue[:80],
            status,
            started,
            request.remote or "",
        )


def _route(request: web.Request) -> str:
    """The route's pattern (/api/queues/{name}/messages/{handle}), never the values in it."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "-"
