"""Shared access signatures made by the SDK's own generators (generate_queue_sas,
generate_account_sas), used the way applications without the account key use them: each
permission allowed and refused, start and expiry, the signed IP and protocol, an account SAS's
services and resource types, stored access policies named by `si` (and revoked by deleting
them), and the aio client. Every refusal is Azure's 403 with Azure's code, and changes nothing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.storage.queue import (
    AccessPolicy,
    AccountSasPermissions,
    QueueClient,
    QueueSasPermissions,
    QueueServiceClient,
    ResourceTypes,
    Services,
    generate_account_sas,
    generate_queue_sas,
)
from azure.storage.queue.aio import QueueClient as AsyncQueueClient

from .conftest import DEV_ACCOUNT, DEV_KEY, unique

ALL_OPS = ("metadata", "peek", "send", "receive", "update", "delete", "clear")
NEEDS = {"metadata": "r", "peek": "r", "send": "a", "update": "u", "receive": "p", "delete": "p"}


def later(**delta: float) -> datetime:
    return datetime.now(UTC) + timedelta(**delta)


def account_url(server) -> str:
    return f"{server.endpoint}/{DEV_ACCOUNT}"


def sas_queue(server, name: str, token: str) -> QueueClient:
    return QueueClient(account_url(server), name, credential=token, retry_total=0)


def queue_sas(name: str, permission: str = "", **options) -> str:
    options.setdefault("expiry", later(hours=1) if "policy_id" not in options else None)
    return generate_queue_sas(
        DEV_ACCOUNT,
        name,
        DEV_KEY,
        permission=QueueSasPermissions.from_string(permission) if permission else None,
        **options,
    )


def refused(call, code: str, status: int = 403) -> HttpResponseError:
    with pytest.raises(HttpResponseError) as caught:
        call()
    assert (caught.value.status_code, caught.value.error_code) == (status, code), str(caught.value)
    return caught.value


def detail(error: HttpResponseError) -> str:
    return {k.lower(): v for k, v in error.additional_info.items()}["authenticationerrordetail"]


def run(op: str, owner: QueueClient, client: QueueClient) -> None:
    """One operation through the SAS client; `owner` (the account key) prepares what it needs."""
    if op == "metadata":
        client.get_queue_properties()
    elif op == "peek":
        client.peek_messages()
    elif op == "send":
        client.send_message("by sas")
    elif op == "receive":
        client.receive_message(visibility_timeout=1)
    elif op in ("update", "delete"):
        owner.send_message("held")
        held = owner.receive_message(visibility_timeout=600)
        if op == "update":
            client.update_message(held, content="updated", visibility_timeout=600)
        else:
            client.delete_message(held)
    elif op == "clear":
        client.clear_messages()


@pytest.mark.parametrize("permission", ["r", "a", "u", "p"])
def test_each_queue_sas_permission_allows_its_operations_and_no_other(
    azure_server, queue, permission
):
    client = sas_queue(azure_server, queue.queue_name, queue_sas(queue.queue_name, permission))
    for op in ALL_OPS:
        if NEEDS.get(op) == permission:
            run(op, queue, client)
        else:
            error = refused(lambda op=op: run(op, queue, client), "AuthorizationPermissionMismatch")
            assert str(error).splitlines()[0] == (
                "This request is not authorized to perform this operation using this permission."
            )


def test_a_queue_sas_is_for_its_own_queue_only(azure_server, queue, service):
    other = service.create_queue(unique()).queue_name
    token = queue_sas(queue.queue_name, "raup")
    sas_queue(azure_server, queue.queue_name, token).send_message("mine")
    error = refused(
        lambda: sas_queue(azure_server, other, token).send_message("theirs"),
        "AuthenticationFailed",
    )
    assert "Signature did not match" in detail(error)
    assert service.get_queue_client(other).get_queue_properties().approximate_message_count == 0


def test_start_and_expiry(azure_server, queue):
    name = queue.queue_name
    for token in (
        queue_sas(name, "a", expiry=later(minutes=-1)),
        queue_sas(name, "a", start=later(minutes=10), expiry=later(hours=1)),
    ):
        error = refused(
            lambda token=token: sas_queue(azure_server, name, token).send_message("x"),
            "AuthenticationFailed",
        )
        assert detail(error).startswith("Signature not valid in the specified time frame")
    started = queue_sas(name, "a", start=later(minutes=-5), expiry=later(minutes=5))
    sas_queue(azure_server, name, started).send_message("in time")
    assert queue.get_queue_properties().approximate_message_count == 1


def test_signed_ip_and_protocol(azure_server, queue):
    name = queue.queue_name
    refused(
        lambda: sas_queue(azure_server, name, queue_sas(name, "a", ip="10.1.2.3")).send_message(
            "x"
        ),
        "AuthorizationSourceIPMismatch",
    )
    refused(
        lambda: sas_queue(
            azure_server, name, queue_sas(name, "a", ip="192.168.0.1-192.168.0.9")
        ).send_message("x"),
        "AuthorizationSourceIPMismatch",
    )
    refused(
        lambda: sas_queue(azure_server, name, queue_sas(name, "a", protocol="https")).send_message(
            "x"
        ),
        "AuthorizationProtocolMismatch",
    )
    ranged = queue_sas(name, "a", ip="127.0.0.0-127.0.0.255", protocol="https,http")
    sas_queue(azure_server, name, ranged).send_message("from loopback")
    assert queue.get_queue_properties().approximate_message_count == 1


def test_a_tampered_sas_fails(azure_server, queue):
    token = queue_sas(queue.queue_name, "r")
    widened = token.replace("sp=r", "sp=raup")
    assert widened != token
    refused(
        lambda: sas_queue(azure_server, queue.queue_name, widened).send_message("x"),
        "AuthenticationFailed",
    )


def account_sas(resource_types: str, permission: str, services: str = "q") -> str:
    return generate_account_sas(
        DEV_ACCOUNT,
        DEV_KEY,
        resource_types=ResourceTypes.from_string(resource_types),
        permission=AccountSasPermissions.from_string(permission),
        expiry=later(hours=1),
        services=Services.from_string(services),
    )


def sas_service(server, token: str) -> QueueServiceClient:
    return QueueServiceClient(account_url(server), credential=token, retry_total=0)


def test_account_sas_permissions_and_resource_types(azure_server, queue):
    name = unique()
    creator = sas_service(azure_server, account_sas("c", "c"))
    creator.create_queue(name)
    refused(lambda: creator.delete_queue(name), "AuthorizationPermissionMismatch")
    refused(lambda: list(creator.list_queues()), "AuthorizationResourceTypeMismatch")
    lister = sas_service(azure_server, account_sas("s", "l"))
    assert name in [q.name for q in lister.list_queues(name_starts_with=name)]
    refused(lambda: lister.get_service_properties(), "AuthorizationPermissionMismatch")
    messages = sas_service(azure_server, account_sas("o", "ap")).get_queue_client(name)
    messages.send_message("by account sas")
    assert messages.receive_message(visibility_timeout=5).content == "by account sas"
    refused(lambda: messages.get_queue_properties(), "AuthorizationResourceTypeMismatch")
    refused(lambda: messages.peek_messages(), "AuthorizationPermissionMismatch")
    deleter = sas_service(azure_server, account_sas("c", "d"))
    deleter.delete_queue(name)
    # Another service's SAS (blob) does not open the queue service.
    refused(
        lambda: list(sas_service(azure_server, account_sas("s", "l", "b")).list_queues()),
        "AuthorizationServiceMismatch",
    )


def test_acls_are_the_account_owners_only(azure_server, queue):
    owner_only = sas_service(azure_server, account_sas("sco", "rwdlacup")).get_queue_client(
        queue.queue_name
    )
    refused(owner_only.get_queue_access_policy, "AuthorizationPermissionMismatch")
    refused(lambda: owner_only.set_queue_access_policy({}), "AuthorizationPermissionMismatch")


def test_stored_access_policies(azure_server, queue):
    name = queue.queue_name
    queue.set_queue_access_policy(
        {
            "readers": AccessPolicy(
                permission=QueueSasPermissions(read=True), expiry=later(hours=1)
            ),
            "writers": AccessPolicy(permission=QueueSasPermissions(add=True)),
        }
    )
    stored = queue.get_queue_access_policy()
    assert set(stored) == {"readers", "writers"} and stored["readers"].permission == "r"
    readers = sas_queue(azure_server, name, queue_sas(name, policy_id="readers"))
    readers.peek_messages()
    refused(lambda: readers.send_message("x"), "AuthorizationPermissionMismatch")
    # The policy gives the permission, the SAS the expiry.
    writers = sas_queue(
        azure_server, name, queue_sas(name, policy_id="writers", expiry=later(hours=1))
    )
    writers.send_message("by policy")
    # A field in both the SAS and its policy is refused, as Azure does.
    both = queue_sas(name, "r", policy_id="readers")
    refused(lambda: sas_queue(azure_server, name, both).peek_messages(), "AuthenticationFailed")
    # Deleting the policy revokes every SAS that names it.
    queue.set_queue_access_policy({"writers": AccessPolicy(permission="a")})
    refused(readers.peek_messages, "AuthenticationFailed")
    writers.send_message("still")
    assert queue.get_queue_properties().approximate_message_count == 2
    refused(
        lambda: queue.set_queue_access_policy(
            {f"p{i}": AccessPolicy(permission="r") for i in range(6)}
        ),
        "InvalidXmlDocument",
        400,
    )
    assert set(queue.get_queue_access_policy()) == {"writers"}


def test_more_than_five_policies_and_bad_permissions_are_refused(azure_server, queue):
    from .conftest import raw

    url = f"{azure_server.endpoint}/{DEV_ACCOUNT}/{queue.queue_name}?comp=acl"
    six = "".join(
        f"<SignedIdentifier><Id>p{i}</Id><AccessPolicy><Permission>r</Permission>"
        "</AccessPolicy></SignedIdentifier>"
        for i in range(6)
    )
    body = f"<SignedIdentifiers>{six}</SignedIdentifiers>".encode()
    reply = raw("PUT", url, body)
    assert (reply.status_code, reply.headers["x-ms-error-code"]) == (400, "InvalidXmlDocument")
    bad = (
        b"<SignedIdentifiers><SignedIdentifier><Id>x</Id><AccessPolicy><Permission>rwd"
        b"</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>"
    )
    assert raw("PUT", url, bad).status_code == 400
    assert queue.get_queue_access_policy() == {}


def test_sas_with_the_aio_client(azure_server, queue):
    token = queue_sas(queue.queue_name, "rap")

    async def main() -> list[str]:
        async with AsyncQueueClient(
            account_url(azure_server), queue.queue_name, credential=token, retry_total=0
        ) as client:
            await asyncio.gather(*(client.send_message(f"m{i}") for i in range(3)))
            got = [m async for m in client.receive_messages(messages_per_page=32)]
            for message in got:
                await client.delete_message(message)
            with pytest.raises(HttpResponseError) as caught:
                await client.clear_messages()
            assert caught.value.error_code == "AuthorizationPermissionMismatch"
            return sorted(m.content for m in got)

    assert asyncio.run(main()) == ["m0", "m1", "m2"]


def test_a_sas_with_the_wrong_key_fails(azure_server, queue):
    wrong = generate_queue_sas(
        DEV_ACCOUNT,
        queue.queue_name,
        "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmc=",
        permission=QueueSasPermissions(add=True),
        expiry=later(hours=1),
    )
    with pytest.raises(ClientAuthenticationError):
        sas_queue(azure_server, queue.queue_name, wrong).send_message("x")
