"""The auth policy: principals, their grants, and the credentials that authenticate as them,
parsed from a policy file and kept in step with it. gRPC knows nothing of this module's types
beyond `Principal.allows`; the interceptor (`interceptor.py`) and the HTTP front ends ask it.

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
    # The OCI endpoint (--oci-listen): API keys (the public key in PEM, as uploaded to OCI) whose
    # request signatures authenticate as this principal; the key id the SDK signs with is
    # "<tenancy>/<user>/<fingerprint>", the fingerprint computed from the key.
    oci_keys = [{ tenancy = "ocid1.tenancy.oc1..x", user = "ocid1.user.oc1..y", public_key = "-----BEGIN PUBLIC KEY-----..." }]

    [[principals.grants]]
    queues = ["orders-*", "orders"]      # fnmatch patterns (* ? [...]), case-sensitive
    actions = ["receive", "ack"]         # or ["*"] for every action

Tokens are compared as SHA-256 digests with `hmac.compare_digest`, against every stored digest
(no early exit). Tokens should be random (`leaseq auth new-token`: 256 bits), so an unsalted
hash leaves nothing to guess; a salted slow hash would only cost every RPC time. Nothing here
logs a token, a digest or a message body.

Reloading: `PolicyFile.current()` looks at the file's (mtime, size, inode) at most once per
`check_interval` and re-reads it when it changed; SIGHUP (`request_reload`) re-reads at once. A
file that fails to load is logged and ignored: the previous policy stays in force. An empty file
is taken for one being rewritten in place and is not read until it has content.
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
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

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
    # "tenancy/user/fingerprint" -> (RSA public key, principal), for OCI request signatures
    # (frontends/oci/signature.py)
    oci_keys: Mapping[str, tuple[Any, Principal]] = field(default_factory=dict, repr=False)

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
    oci_keys: dict[str, tuple[Any, Principal]] = {}
    seen_digests: set[bytes] = set()
    for index, entry in enumerate(entries):
        where = f"principals[{index}]"
        entry = _keys(
            entry,
            {"name", "tokens", "certificates", "grants", "access_keys", "azure_keys", "oci_keys"},
            where,
        )
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
        _oci_keys(entry.get("oci_keys", []), where, principal, oci_keys)
    return Policy(tuple(principals), tuple(tokens), certificates, access_keys, azure_keys, oci_keys)


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


def _oci_keys(
    raw: object, where: str, principal: Principal, into: dict[str, tuple[Any, Principal]]
) -> None:
    """A principal's oci_keys: {tenancy, user, public_key} tables (an RSA public key in PEM),
    keyed by the key id OCI's SDKs sign with: tenancy/user/fingerprint, where the fingerprint is
    the MD5 of the DER public key in colon-separated hex (as OCI's console shows it)."""
    if not isinstance(raw, list):
        raise PolicyError(f"{where}.oci_keys: a list of {{tenancy, user, public_key}} tables")
    for index, table in enumerate(raw):
        k_where = f"{where}.oci_keys[{index}]"
        table = _keys(table, {"tenancy", "user", "public_key"}, k_where)
        for name in ("tenancy", "user", "public_key"):
            if not isinstance(table.get(name), str) or not table[name]:
                raise PolicyError(f"{k_where}.{name}: required, a non-empty string")
            if name != "public_key" and "/" in table[name]:
                raise PolicyError(f"{k_where}.{name}: an OCID has no '/'")
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        try:
            key = serialization.load_pem_public_key(table["public_key"].encode())
        except ValueError:
            key = None
        if not isinstance(key, rsa.RSAPublicKey):
            raise PolicyError(f"{k_where}.public_key: an RSA public key in PEM (BEGIN PUBLIC KEY)")
        der = key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        digest = hashlib.md5(der, usedforsecurity=False).hexdigest()
        fingerprint = ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))
        key_id = f"{table['tenancy']}/{table['user']}/{fingerprint}"
        if key_id in into:
            raise PolicyError(f"{k_where}: this key of user {table['user']!r} is listed twice")
        into[key_id] = (key, principal)


def parse_policy(text: str, suffix: str = ".toml") -> Policy:
    """Parse policy text; the suffix (".toml", ".yaml", ".yml", ".json") picks the format."""
    suffix = suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError as e:  # pragma: no cover - PyYAML is in the dev extra
                raise PolicyError(
                    "a YAML policy needs PyYAML (pip install pyyaml); or use TOML"
                ) from e
            data = yaml.safe_load(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
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
