"""The account-level and ACL operations: Get/Set Queue Service Properties, Get Queue Service
Stats, Get/Set Queue ACL (properties.py and acl.py hold their bodies and storage)."""

from __future__ import annotations

from . import acl, properties
from .operations import Answer, Operation, Request, queue_name
from .times import rfc1123

_XML = {"Content-Type": "application/xml"}


async def get_service_properties(request: Request) -> Answer:
    stored = await properties.load(request.core, request.principal)
    return Answer(200, properties.document(stored), dict(_XML))


async def set_service_properties(request: Request) -> Answer:
    changes = properties.parse(request.body)
    await properties.save(request.core, request.principal, changes)
    return Answer(202)


async def get_service_stats(request: Request) -> Answer:
    await properties.load(request.core, request.principal)  # the same grant as the properties
    return Answer(200, properties.stats_document(rfc1123(request.core.now())), dict(_XML))


async def get_queue_acl(request: Request) -> Answer:
    name = queue_name(request)
    identifiers = await acl.load(request.core, request.principal, name)
    return Answer(200, acl.document(identifiers), dict(_XML))


async def set_queue_acl(request: Request) -> Answer:
    name = queue_name(request)
    identifiers = acl.parse(request.body)
    await request.core.get_queue(request.principal, name)  # QueueNotFound before admin
    await acl.save(request.core, request.principal, name, identifiers)
    return Answer(204)


OPERATIONS: dict[str, Operation] = {
    "GetServiceProperties": get_service_properties,
    "SetServiceProperties": set_service_properties,
    "GetServiceStats": get_service_stats,
    "GetQueueAcl": get_queue_acl,
    "SetQueueAcl": set_queue_acl,
}
