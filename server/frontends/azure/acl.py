"""Queue ACLs: Get/Set Queue ACL and the stored access policies a queue SAS names with `si`.

    <SignedIdentifiers><SignedIdentifier><Id>..</Id><AccessPolicy><Start>..</Start>
    <Expiry>..</Expiry><Permission>raup</Permission></AccessPolicy></SignedIdentifier>
    </SignedIdentifiers>

At most 5 identifiers of at most 64 characters; each field of a policy may be left out (the SAS
then gives it). They are kept with the queue (`QueueCore.queue_state`, namespace "azure.acl"):
every replica sees the same, they survive restarts and go with the queue, so deleting a policy
(or its queue) revokes every SAS that names it, as in Azure."""

from __future__ import annotations

import json

from ...auth import Principal
from ...core import QueueCore
from ...errors import QueueNotFound
from . import xml_bodies
from .sas import AccessPolicy, parse_time
from .shared_key import failed

NAMESPACE = "azure.acl"
_KEY = "identifiers"  # one pair: the identifiers in their order, as JSON
MAX_IDENTIFIERS = 5
MAX_ID = 64
PERMISSIONS = "raup"  # a queue's: read, add, update, process

Identifiers = list[tuple[str, AccessPolicy]]


def parse(body: bytes) -> Identifiers:
    """The identifiers of a Set Queue ACL body (empty: none, which removes every policy)."""
    if not body.strip():
        return []
    root = xml_bodies.parse(body)
    if root.tag != "SignedIdentifiers":
        raise xml_bodies.invalid_xml("The root element must be SignedIdentifiers")
    found: Identifiers = []
    for item in root:
        if item.tag != "SignedIdentifier":
            raise xml_bodies.invalid_xml(f"Unexpected element {item.tag[:64]}")
        ident = (item.findtext("Id") or "").strip()
        if not ident or len(ident) > MAX_ID:
            raise xml_bodies.invalid_xml(f"An Id is 1 to {MAX_ID} characters")
        if any(ident == known for known, _ in found):
            raise xml_bodies.invalid_xml(f"The Id {ident} is given twice")
        fields = {"Start": "", "Expiry": "", "Permission": ""}
        policy = item.find("AccessPolicy")
        for child in policy if policy is not None else ():
            if child.tag not in fields:
                raise xml_bodies.invalid_xml(f"Unexpected element {child.tag[:64]}")
            fields[child.tag] = (child.text or "").strip()
        for name in ("Start", "Expiry"):
            if fields[name]:
                try:
                    parse_time(fields[name], name)
                except Exception:
                    raise xml_bodies.invalid_xml(f"{name} is not an ISO 8601 UTC time") from None
        if any(p not in PERMISSIONS for p in fields["Permission"]):
            raise xml_bodies.invalid_xml(f"A queue's permissions are letters of {PERMISSIONS!r}")
        found.append((ident, AccessPolicy(fields["Start"], fields["Expiry"], fields["Permission"])))
    if len(found) > MAX_IDENTIFIERS:
        raise xml_bodies.invalid_xml(f"At most {MAX_IDENTIFIERS} signed identifiers")
    return found


def document(identifiers: Identifiers) -> bytes:
    parts = ["<SignedIdentifiers>"]
    for ident, policy in identifiers:
        parts += ["<SignedIdentifier>", xml_bodies.element("Id", ident), "<AccessPolicy>"]
        if policy.start:
            parts.append(xml_bodies.element("Start", policy.start))
        if policy.expiry:
            parts.append(xml_bodies.element("Expiry", policy.expiry))
        if policy.permission:
            parts.append(xml_bodies.element("Permission", policy.permission))
        parts += ["</AccessPolicy>", "</SignedIdentifier>"]
    parts.append("</SignedIdentifiers>")
    return xml_bodies.document("".join(parts))


async def load(core: QueueCore, principal: Principal | None, queue: str) -> Identifiers:
    state = await core.queue_state(principal, queue, NAMESPACE)
    rows = json.loads(state.get(_KEY, "[]"))
    return [(ident, AccessPolicy(start, expiry, perm)) for ident, start, expiry, perm in rows]


async def save(
    core: QueueCore, principal: Principal | None, queue: str, identifiers: Identifiers
) -> None:
    rows = [[ident, p.start, p.expiry, p.permission] for ident, p in identifiers]
    await core.update_queue_state(
        principal, queue, NAMESPACE, {_KEY: json.dumps(rows) if rows else None}, replace=True
    )


async def stored_policy(core: QueueCore, queue: str, identifier: str) -> AccessPolicy:
    """The queue's policy named by a SAS's si (read by the server: the SAS's key decides the
    caller's grants afterwards); AuthenticationFailed when there is none, so a deleted policy
    revokes its SASs."""
    try:
        identifiers = await load(core, None, queue)
    except QueueNotFound:
        identifiers = []
    for ident, policy in identifiers:
        if ident == identifier:
            return policy
    raise failed(
        f"The signed identifier {identifier[:64]} is not a stored access policy of the queue."
    )
