"""The one interceptor that enforces the auth policy (`policy.py`) on every QueueService RPC,
unary and streaming alike.

Deny by default: a call is allowed only when a grant of the caller's principal names its action
on every queue it touches. What each RPC needs (`RULES`):

    CreateQueue, UpdateQueue        admin on the queue, and on config.dead_letter_queue when set
                                    (a dead letter queue receives the other queue's messages)
    DeleteQueue, PurgeQueue         admin
    GetQueue, GetQueueStats         any action on the queue (senders and consumers read limits
                                    and counts)
    ListQueues                      any authenticated caller; the answer lists only the queues on
                                    which the principal holds some action (a page may hold fewer
                                    than page_size queues and still carry a next_page_token)
    SendMessages                    send
    GetMessages (streaming)         receive
    PeekMessages                    peek
    ChangeVisibility, DeleteMessages, UpdateMessage, DeadLetterMessages      ack
    RedriveMessages                 redrive on the dead letter queue and on the destination when
                                    one is named; without one the messages go back to the queues
                                    they were dead-lettered from, whose owners chose this dead
                                    letter queue (which needed admin on it)

Authentication, in this order:
1. an `authorization: Bearer <token>` header: the principal whose token hash matches; a header
   that is malformed or names no known token is UNAUTHENTICATED (a certificate does not rescue
   a wrong token);
2. no header, under mutual TLS: the principal listing the client certificate's CN or a SAN;
   without a policy file every client certificate the CA signed may do everything;
3. otherwise UNAUTHENTICATED.
A token header is checked before the request is even parsed, so bad credentials cost no work.
Nothing here logs a token or a message body; denials are logged at DEBUG with the principal's
name.

A running follow stream is checked again against each new policy (`policy.PolicyFile` reloads)
before each batch it leases and before each batch it sends (`stream_checks`), so a revoked grant
or token ends it with PERMISSION_DENIED / UNAUTHENTICATED without leasing another message.

Health and reflection are not QueueService methods: they stay open.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message

from ..errors import clip
from ..stream_checks import set_still_allowed
from .policy import ANY, EVERYTHING, MAX_TOKEN_CHARS, FixedPolicy, Policy, PolicyFile, Principal

log = logging.getLogger(__name__)

SERVICE_PREFIX = "/leaseq.v1.QueueService/"


# --- what each RPC needs ----------------------------------------------------------------------

Needs = list[tuple[frozenset[str], str]]


def _one(action: frozenset[str], attr: str) -> Callable[[Any], Needs]:
    return lambda request: [(action, getattr(request, attr))]


def _admin_with_dlq(request: Any) -> Needs:
    needs = [(frozenset({"admin"}), request.name)]
    if request.HasField("config") and request.config.dead_letter_queue:
        needs.append((frozenset({"admin"}), request.config.dead_letter_queue))
    return needs


def _redrive(request: Any) -> Needs:
    needs = [(frozenset({"redrive"}), request.queue)]
    if request.destination:
        needs.append((frozenset({"redrive"}), request.destination))
    return needs


_ADMIN = frozenset({"admin"})
_ACK = frozenset({"ack"})

RULES: dict[str, Callable[[Any], Needs]] = {
    "CreateQueue": _admin_with_dlq,
    "UpdateQueue": _admin_with_dlq,
    "DeleteQueue": _one(_ADMIN, "name"),
    "PurgeQueue": _one(_ADMIN, "name"),
    "GetQueue": _one(ANY, "name"),
    "GetQueueStats": _one(ANY, "name"),
    "ListQueues": lambda request: [],  # filtered instead (module docstring)
    "SendMessages": _one(frozenset({"send"}), "queue"),
    "GetMessages": _one(frozenset({"receive"}), "queue"),
    "PeekMessages": _one(frozenset({"peek"}), "queue"),
    "ChangeVisibility": _one(_ACK, "queue"),
    "DeleteMessages": _one(_ACK, "queue"),
    "UpdateMessage": _one(_ACK, "queue"),
    "DeadLetterMessages": _one(_ACK, "queue"),
    "RedriveMessages": _redrive,
}
"""RPC name -> the (actions, queue) pairs a request needs; every pair must be granted. An RPC of
the service missing here is refused (deny by default)."""


# --- the interceptor --------------------------------------------------------------------------


class _Denied(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class _Credentials:
    """What the caller presented: a bearer token, or None (then the client certificate, read
    from the call's auth context, decides). Kept for the call's lifetime so that a follow stream
    can be checked again against a new policy; never logged."""

    token: str | None


def _bearer(metadata: Sequence[tuple[str, Any]] | None) -> str | None:
    """The token of the authorization header; None when there is none. _Denied when malformed."""
    values = [v for k, v in (metadata or ()) if k == "authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise _Denied(grpc.StatusCode.UNAUTHENTICATED, "more than one authorization header")
    value: str | bytes = values[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
        raise _Denied(
            grpc.StatusCode.UNAUTHENTICATED, "the authorization header is not 'Bearer <token>'"
        )
    return token


def certificate_names(context: grpc.aio.ServicerContext[Any, Any]) -> list[str]:
    """The verified client certificate's common name and subject alternative names (empty
    without a client certificate)."""
    try:
        auth = context.auth_context() or {}
    except (AttributeError, RuntimeError, ValueError):  # pragma: no cover - no security context
        return []
    names = []
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for value in auth.get(key, ()):
            names.append(value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
    return names


def _skip_body(raw: bytes) -> None:
    """Deserializer of refused calls: the body of an unauthenticated call is not even parsed."""
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates every QueueService call and checks the policy before the handler runs.

    source: the policy (a PolicyFile or FixedPolicy); None under mutual TLS without a policy
    file, where every verified client certificate may do everything.
    certificates: whether client certificates are verified (mutual TLS), so that a call without
    a token may authenticate by its certificate.
    """

    def __init__(self, source: PolicyFile | FixedPolicy | None, *, certificates: bool) -> None:
        if source is None and not certificates:
            raise ValueError("authentication needs a policy or client certificates")
        self._source = source
        self._certificates = certificates

    # --- deciding -----------------------------------------------------------------------------

    def _policy(self) -> Policy | None:
        return self._source.current() if self._source is not None else None

    def _principal(
        self, policy: Policy | None, credentials: _Credentials, names: Sequence[str]
    ) -> Principal:
        """names: the client certificate's (see `_certificate_names`)."""
        if credentials.token is not None:
            principal = policy.by_token(credentials.token) if policy is not None else None
            if principal is None:
                raise _Denied(grpc.StatusCode.UNAUTHENTICATED, "unknown bearer token")
            return principal
        if self._certificates:
            if names:
                if policy is None:
                    return Principal(f"certificate:{names[0]}", EVERYTHING)
                principal = policy.by_certificate(names)
                if principal is not None:
                    return principal
                raise _Denied(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "the client certificate names no principal of the policy, and no token was sent",
                )
        raise _Denied(grpc.StatusCode.UNAUTHENTICATED, "missing 'authorization: Bearer <token>'")

    @staticmethod
    def _check(principal: Principal, rpc: str, request: Any) -> None:
        if not isinstance(request, Message):
            return  # unparsable: the handler answers INVALID_ARGUMENT and touches nothing
        for actions, queue in RULES[rpc](request):
            if not principal.allows(actions, queue):
                what = "/".join(sorted(actions)) if actions != ANY else "any action"
                shown = clip(queue)  # the request's, not checked yet: any length
                log.debug(
                    "denied: principal %r, %s on queue %r (needs %s)",
                    principal.name,
                    rpc,
                    shown,
                    what,
                )
                raise _Denied(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"principal {principal.name!r} may not call {rpc} on queue {shown!r} "
                    f"(needs {what})",
                )

    def _certificate_names(self, credentials: _Credentials, context: Any) -> list[str]:
        """The names a call without a token may authenticate by, read once when the call starts:
        auth_context() reaches into grpc's call, which must not be touched once the call has
        ended (interceptors' module docstring), and a stream re-authorizes later."""
        if credentials.token is not None or not self._certificates:
            return []
        return certificate_names(context)

    def authorize(
        self, credentials: _Credentials, rpc: str, request: Any, names: Sequence[str]
    ) -> tuple[Policy | None, Principal]:
        policy = self._policy()
        principal = self._principal(policy, credentials, names)
        self._check(principal, rpc, request)
        return policy, principal

    # --- wrapping -----------------------------------------------------------------------------

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method = details.method or ""
        handler: grpc.RpcMethodHandler[Any, Any] | None = await continuation(details)
        if not method.startswith(SERVICE_PREFIX) or handler is None:
            return handler  # health, reflection, unknown methods (UNIMPLEMENTED)
        rpc = method[len(SERVICE_PREFIX) :]
        if rpc not in RULES:
            return _refusal(
                handler, grpc.StatusCode.PERMISSION_DENIED, f"{clip(rpc)}: no rule allows it"
            )
        try:
            credentials = _Credentials(_bearer(details.invocation_metadata))
            if credentials.token is not None:
                # Known before the body is parsed: refuse a wrong token without doing any work.
                self._principal(self._policy(), credentials, ())
            elif not self._certificates:
                raise _Denied(
                    grpc.StatusCode.UNAUTHENTICATED, "missing 'authorization: Bearer <token>'"
                )
        except _Denied as denied:
            log.debug("unauthenticated call of %s: %s", rpc, denied.message)
            return _refusal(handler, denied.code, denied.message)
        if handler.unary_unary is not None:
            return _replace(handler, unary_unary=self._unary(handler.unary_unary, rpc, credentials))
        if handler.unary_stream is not None:
            return _replace(
                handler, unary_stream=self._stream(handler.unary_stream, rpc, credentials)
            )
        # The service has no client-streaming RPC; one added later is refused until handled here.
        return _refusal(handler, grpc.StatusCode.PERMISSION_DENIED, f"{rpc}: not authorized")

    def _unary(
        self, behaviour: Callable[..., Any], rpc: str, credentials: _Credentials
    ) -> Callable[..., Any]:
        async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                names = self._certificate_names(credentials, context)
                _, principal = self.authorize(credentials, rpc, request, names)
            except _Denied as denied:
                await context.abort(denied.code, denied.message)
            response = await behaviour(request, context)
            if rpc == "ListQueues" and response is not None:
                kept = [q for q in response.queues if principal.allows(ANY, q.name)]
                if len(kept) != len(response.queues):
                    del response.queues[:]
                    response.queues.extend(kept)
            return response

        return guarded

    def _stream(
        self, behaviour: Callable[..., Any], rpc: str, credentials: _Credentials
    ) -> Callable[..., Any]:
        async def guarded(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            names = self._certificate_names(credentials, context)
            try:
                policy, _ = self.authorize(credentials, rpc, request, names)
            except _Denied as denied:
                await context.abort(denied.code, denied.message)
            checked = [policy]

            async def still_allowed() -> None:
                if self._policy() is checked[0]:
                    return
                # The policy changed while the stream runs: still allowed?
                try:
                    checked[0], _ = self.authorize(credentials, rpc, request, names)
                except _Denied as denied:
                    await context.abort(denied.code, denied.message)

            # The handler asks too, before it leases more (stream_checks): this call runs in a
            # task of its own, whose context the variable lives in.
            set_still_allowed(still_allowed)
            async with aclosing(behaviour(request, context)) as responses:
                async for response in responses:
                    await still_allowed()
                    yield response

        return guarded


def _replace(
    handler: grpc.RpcMethodHandler[Any, Any], **behaviour: Any
) -> grpc.RpcMethodHandler[Any, Any]:
    factory = (
        grpc.unary_stream_rpc_method_handler
        if handler.unary_stream is not None
        else grpc.unary_unary_rpc_method_handler
    )
    return factory(
        next(iter(behaviour.values())),
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _refusal(
    handler: grpc.RpcMethodHandler[Any, Any], code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler[Any, Any]:
    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(code, message)

    async def stream(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        await context.abort(code, message)
        yield  # pragma: no cover - makes this an async generator

    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=_skip_body, response_serializer=handler.response_serializer
        )
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            unary, request_deserializer=_skip_body, response_serializer=handler.response_serializer
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            unary, request_deserializer=_skip_body, response_serializer=handler.response_serializer
        )
    return grpc.stream_stream_rpc_method_handler(
        stream, request_deserializer=_skip_body, response_serializer=handler.response_serializer
    )
