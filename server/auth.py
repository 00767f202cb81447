"""Who may do what: bearer tokens and client certificates mapped to principals by a policy file,
and the one interceptor that enforces it on every QueueService RPC, unary and streaming alike.

The policy file (TOML; YAML or JSON when the name ends in .yaml/.yml/.json, YAML needing PyYAML)::

    [[principals]]
    name = "orders-worker"
    # sha256 of the bearer token (`leaseq auth hash-token`); the token itself is never stored.
    tokens = ["sha256:9b2c...e1"]
    # Under mutual TLS: client certificates whose common name or DNS/URI subject alternative
    # name is listed here authenticate as this principal without a token.
    certificates = ["orders-worker.internal"]
    # The SQS endpoint (--sqs-listen): AWS access keys whose SigV4 signatures authenticate as this
    # principal. The secret itself is stored (HMAC needs it): keep the file private.
    access_keys = [{ id = "AKIAORDERSWORKER", secret = "..." }]
    # The Azure endpoint (--azure-listen): storage account keys (base64, as Azure shows them) whose
    # SharedKey signatures authenticate as this principal; several principals may share an
    # account name with different keys. Stored as given: keep the file private.
    azure_keys = [{ account = "orders", key = "..." }]

    [[principals.grants]]
    queues = ["orders-*", "orders"]      # fnmatch patterns (* ? [...]), case-sensitive
    actions = ["receive", "ack"]         # or ["*"] for every action

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
    ChangeVisibility, DeleteMessages, UpdateMessage      ack
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

Tokens are compared as SHA-256 digests with `hmac.compare_digest`, against every stored digest
(no early exit). Tokens should be random (`leaseq auth new-token`: 256 bits), so an unsalted
hash leaves nothing to guess; a salted slow hash would only cost every RPC time. Nothing here
logs a token, a digest or a message body; denials are logged at DEBUG with the principal's name.

Reloading: `PolicyFile.current()` looks at the file's (mtime, size, inode) at most once per
`check_interval` and re-reads it when it changed; SIGHUP (`request_reload`) re-reads at once. A
file that fails to load is logged and ignored: the previous policy stays in force. An empty file
is taken for one being rewritten in place and is not read until it has content. A running
follow stream is checked again against each new policy before each batch it leases and before
each batch it sends (`stream_checks`), so a revoked grant or token ends it with PERMISSION_DENIED /
UNAUTHENTICATED without leasing another message.

Health and reflection are not QueueService methods: they stay open.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import hmac
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message

from .errors import clip
from .stream_checks import set_still_allowed

log = logging.getLogger(__name__)

SERVICE_PREFIX = "/leaseq.v1.QueueService/"

ACTIONS = frozenset({"send", "receive", "ack", "peek", "admin", "redrive"})
ANY = ACTIONS  # "any action on the queue"

HASH_PREFIX = "sha256:"
MAX_TOKEN_CHARS = 4096  # a longer header is not one of our tokens: refuse before hashing


class PolicyError(ValueError):
    """The policy file is unreadable or malformed (the message never quotes a token or hash)."""


# --- tokens -----------------------------------------------------------------------------------


def hash_token(token: str) -> str:
    """The policy file's form of a token: "sha256:" and the hex SHA-256 of its UTF-8 bytes."""
    return HASH_PREFIX + hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random token: 32 bytes (256 bits), URL-safe base64."""
    return secrets.token_urlsafe(32)


def _parse_hash(text: object, where: str) -> bytes:
    if not isinstance(text, str):
        raise PolicyError(f"{where}: a token hash is a string like 'sha256:<64 hex digits>'")
    hexpart = text[len(HASH_PREFIX) :] if text.startswith(HASH_PREFIX) else text
    try:
        digest = bytes.fromhex(hexpart)
    except ValueError:
        digest = b""
    if len(digest) != 32:
        # Do not echo the value: someone may have pasted a token instead of its hash.
        raise PolicyError(
            f"{where}: not a token hash (expected 'sha256:' and 64 hex digits; "
            "`leaseq auth hash-token` makes one)"
        )
    return digest


# --- the policy -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    queues: tuple[str, ...]
    actions: frozenset[str]

    def covers(self, actions: frozenset[str], queue: str) -> bool:
        return bool(self.actions & actions) and any(
            fnmatch.fnmatchcase(queue, pattern) for pattern in self.queues
        )


@dataclass(frozen=True)
class Principal:
    name: str
    grants: tuple[Grant, ...] = ()

    def allows(self, actions: frozenset[str], queue: str) -> bool:
        """True when some grant names one of `actions` on `queue`."""
        return any(grant.covers(actions, queue) for grant in self.grants)


EVERYTHING = (Grant(("*",), ACTIONS),)


@dataclass(frozen=True)
class Policy:
    principals: tuple[Principal, ...] = ()
    _tokens: tuple[tuple[bytes, Principal], ...] = field(default=(), repr=False)
    _certificates: Mapping[str, Principal] = field(default_factory=dict, repr=False)
    # access key id -> (secret, principal), for SigV4 (frontends/sqs/sigv4.py)
    access_keys: Mapping[str, tuple[str, Principal]] = field(default_factory=dict, repr=False)
    # account name -> ((key, principal), ...), for SharedKey (frontends/azure/shared_key.py)
    azure_keys: Mapping[str, tuple[tuple[bytes, Principal], ...]] = field(
        default_factory=dict, repr=False
    )

    def by_token(self, token: str) -> Principal | None:
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = None
        for stored, principal in self._tokens:
            # Every digest is compared (no early exit): the time taken says nothing about which
            # one, or whether one, matched.
            if hmac.compare_digest(stored, digest):
                found = principal
        return found

    def by_certificate(self, names: Iterable[str]) -> Principal | None:
        for name in names:
            principal = self._certificates.get(name)
            if principal is not None:
                return principal
        return None


def _strings(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f"{where}: a list of non-empty strings")
    return tuple(value)


def _keys(table: object, allowed: set[str], where: str) -> Mapping[str, Any]:
    if not isinstance(table, Mapping):
        raise PolicyError(f"{where}: a table (mapping)")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise PolicyError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
    return table


def policy_from_data(data: object) -> Policy:
    """A Policy from the parsed file (see the module docstring); PolicyError when malformed."""
    top = _keys(data if data is not None else {}, {"principals"}, "policy")
    entries = top.get("principals", [])
    if not isinstance(entries, list):
        raise PolicyError("principals: a list of tables ([[principals]])")
    principals: list[Principal] = []
    tokens: list[tuple[bytes, Principal]] = []
    certificates: dict[str, Principal] = {}
    access_keys: dict[str, tuple[str, Principal]] = {}
    azure_keys: dict[str, tuple[tuple[bytes, Principal], ...]] = {}
    seen_digests: set[bytes] = set()
    for index, entry in enumerate(entries):
        where = f"principals[{index}]"
        entry = _keys(entry, {"name", "tokens", "certificates", "grants", "access_keys", "azure_keys"}, where)
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise PolicyError(f"{where}.name: required, a non-empty string")
        if any(p.name == name for p in principals):
            raise PolicyError(f"{where}.name: {name!r} is named twice")
        grants = []
        raw_grants = entry.get("grants", [])
        if not isinstance(raw_grants, list):
            raise PolicyError(f"{where}.grants: a list of tables ([[principals.grants]])")
        for g_index, grant in enumerate(raw_grants):
            g_where = f"{where}.grants[{g_index}]"
            grant = _keys(grant, {"queues", "actions"}, g_where)
            queues = _strings(grant.get("queues"), g_where + ".queues")
            actions = set(_strings(grant.get("actions"), g_where + ".actions"))
            if "*" in actions:
                actions = set(ACTIONS)
            unknown = sorted(actions - ACTIONS)
            if unknown:
                raise PolicyError(
                    f"{g_where}.actions: unknown action(s) {', '.join(unknown)} "
                    f"(known: {', '.join(sorted(ACTIONS))}, or *)"
                )
            grants.append(Grant(queues, frozenset(actions)))
        principal = Principal(name, tuple(grants))
        principals.append(principal)
        for t_index, text in enumerate(_strings(entry.get("tokens", []), where + ".tokens")):
            digest = _parse_hash(text, f"{where}.tokens[{t_index}]")
            if digest in seen_digests:
                raise PolicyError(f"{where}.tokens[{t_index}]: the same token is listed twice")
            seen_digests.add(digest)
            tokens.append((digest, principal))
        for cert_name in _strings(entry.get("certificates", []), where + ".certificates"):
            if cert_name in certificates:
                raise PolicyError(f"{where}.certificates: {cert_name!r} is listed twice")
            certificates[cert_name] = principal
        _access_keys(entry.get("access_keys", []), where, principal, access_keys)
        _azure_keys(entry.get("azure_keys", []), where, principal, azure_keys)
    return Policy(tuple(principals), tuple(tokens), certificates, access_keys, azure_keys)


def _credential_pairs(
    raw: object, where: str, key_list: str, names: tuple[str, str]
) -> Iterator[tuple[str, str, str]]:
    """(where, first, second) of each table of a principal's credential list `key_list` (a list
    of {first = ..., second = ...} tables of non-empty strings; the values are never echoed)."""
    first, second = names
    if not isinstance(raw, list):
        raise PolicyError(f"{where}.{key_list}: a list of {{{first} = ..., {second} = ...}} tables")
    for index, table in enumerate(raw):
        t_where = f"{where}.{key_list}[{index}]"
        table = _keys(table, set(names), t_where)
        values = table.get(first), table.get(second)
        for name, value in zip(names, values):
            if not isinstance(value, str) or not value:
                raise PolicyError(f"{t_where}.{name}: required, a non-empty string")
        yield t_where, str(values[0]), str(values[1])


def _access_keys(
    raw: object, where: str, principal: Principal, into: dict[str, tuple[str, Principal]]
) -> None:
    """A principal's access_keys: {id, secret} tables, for SigV4."""
    for k_where, key_id, secret in _credential_pairs(raw, where, "access_keys", ("id", "secret")):
        if key_id in into:
            raise PolicyError(f"{k_where}.id: {key_id!r} is listed twice")
        into[key_id] = (secret, principal)


def _azure_keys(
    raw: object,
    where: str,
    principal: Principal,
    into: dict[str, tuple[tuple[bytes, Principal], ...]],
) -> None:
    """A principal's azure_keys: {account, key} tables, key in base64, for SharedKey."""
    for k_where, account, text in _credential_pairs(raw, where, "azure_keys", ("account", "key")):
        try:
            key = base64.b64decode(text, validate=True)
        except binascii.Error:
            key = b""
        if not key:
            raise PolicyError(f"{k_where}.key: required, a non-empty base64 string")
        if any(known == key for known, _ in into.get(account, ())):
            raise PolicyError(f"{k_where}: this key of account {account!r} is listed twice")
        into[account] = into.get(account, ()) + ((key, principal),)


def parse_policy(text: str, suffix: str = ".toml") -> Policy:
    """Parse policy text; the suffix (".toml", ".yaml", ".yml", ".json") picks the format."""
    suffix = suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError as e:  # pragma: no cover - PyYAML is in the dev extra
                raise PolicyError("a YAML policy needs PyYAML (pip install pyyaml); or use TOML") from e
            data = yaml.safe_load(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover
                import tomli as tomllib
            data = tomllib.loads(text)
    except PolicyError:
        raise
    except Exception as e:  # a syntax error of whichever parser: report its position, not text
        raise PolicyError(f"cannot parse the policy: {type(e).__name__}: {_position(e)}") from None
    return policy_from_data(data)


def _position(error: Exception) -> str:
    # Parsers' messages may quote the offending line (which may hold a hash): keep only where.
    for attr in ("lineno", "problem_mark"):
        mark = getattr(error, attr, None)
        if mark is not None:
            line = mark if isinstance(mark, int) else getattr(mark, "line", 0) + 1
            return f"near line {line}"
    text = str(error)
    return text.split("(")[-1].rstrip(")") if "line" in text else "syntax error"


def load_policy(path: str | os.PathLike[str]) -> Policy:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PolicyError(f"cannot read the policy file {str(path)!r}: {e}") from None
    try:
        return parse_policy(text, path.suffix)
    except PolicyError as e:
        raise PolicyError(f"{path}: {e}") from None


class PolicyFile:
    """The policy in force, kept in step with its file (module docstring, "Reloading")."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        check_interval: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.check_interval = check_interval
        self._monotonic = monotonic
        self._signature = self._stat()
        self._policy = load_policy(self.path)  # a bad file at start is the caller's error
        self._checked = monotonic()
        self.reloads = 0  # successful reloads since start (tests and logs)

    def _stat(self) -> tuple[int, ...] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)

    def current(self) -> Policy:
        now = self._monotonic()
        if now - self._checked >= self.check_interval:
            self._checked = now
            signature = self._stat()
            # A file of no bytes is one being written in place (`cat new > policy.toml`, or
            # Path.write_text, truncate first and write after): loading it would lock every
            # principal out for that moment. Its signature is not kept, so the next check
            # reads the finished file. (To deny everyone, write `principals = []`.)
            if signature != self._signature and signature is not None and signature[1] > 0:
                self._signature = signature
                self._reload()
        return self._policy

    def request_reload(self) -> None:
        """Re-read the file now (SIGHUP)."""
        self._signature = self._stat()
        self._checked = self._monotonic()
        self._reload()

    def _reload(self) -> bool:
        try:
            policy = load_policy(self.path)
        except PolicyError as e:
            log.error("auth policy not reloaded, the previous one stays in force: %s", e)
            return False
        self._policy = policy
        self.reloads += 1
        log.info("auth policy reloaded from %s: %d principal(s)", self.path, len(policy.principals))
        return True


class FixedPolicy:
    """A policy that never changes (tests, or a policy built in code)."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy

    def current(self) -> Policy:
        return self._policy


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
    value = values[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
        raise _Denied(
            grpc.StatusCode.UNAUTHENTICATED, "the authorization header is not 'Bearer <token>'"
        )
    return token


def certificate_names(context: grpc.aio.ServicerContext) -> list[str]:
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
                    "denied: principal %r, %s on queue %r (needs %s)", principal.name, rpc, shown, what
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
    ) -> grpc.RpcMethodHandler | None:
        method = details.method or ""
        handler = await continuation(details)
        if not method.startswith(SERVICE_PREFIX) or handler is None:
            return handler  # health, reflection, unknown methods (UNIMPLEMENTED)
        rpc = method[len(SERVICE_PREFIX) :]
        if rpc not in RULES:
            return _refusal(handler, grpc.StatusCode.PERMISSION_DENIED, f"{clip(rpc)}: no rule allows it")
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

    def _unary(self, behaviour: Callable[..., Any], rpc: str, credentials: _Credentials):
        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
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

    def _stream(self, behaviour: Callable[..., Any], rpc: str, credentials: _Credentials):
        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
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


def _replace(handler: grpc.RpcMethodHandler, **behaviour: Any) -> grpc.RpcMethodHandler:
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
    handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler:
    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
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


# --- the server's security settings -----------------------------------------------------------


@dataclass(frozen=True)
class TLSFiles:
    """The server's certificate and key, and the CA of client certificates (mutual TLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None


@dataclass
class Security:
    """What `app.build` needs to secure the port: TLS files and the policy (either may be None).

    Authentication is on when there is a policy, or client certificates are required."""

    policy: PolicyFile | FixedPolicy | None = None
    tls: TLSFiles | None = None

    @property
    def authenticates(self) -> bool:
        return self.policy is not None or (self.tls is not None and self.tls.client_ca is not None)

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        if not self.authenticates:
            return []
        mutual = self.tls is not None and self.tls.client_ca is not None
        return [AuthInterceptor(self.policy, certificates=mutual)]

    def credentials(self) -> grpc.ServerCredentials | None:
        if self.tls is None:
            return None
        from .tls import server_credentials

        return server_credentials(self.tls)
