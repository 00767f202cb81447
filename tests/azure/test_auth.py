"""SharedKey on the Azure endpoint: with --auth-policy, signatures are checked against the
policy's azure_keys and the principal's grants apply as over gRPC; without a policy (on loopback)
only the development account devstoreaccount1 with its published key, as Azurite."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC
from urllib.parse import urlsplit

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.storage.queue import QueueClient, QueueServiceClient

from leaseq.server.auth import PolicyError, parse_policy
from tests.support import http_frontend
from tests.support.http_frontend import FrontendServer

from .conftest import DEV_KEY, FAULT, connection_string, http_date, raw, sign, unique

ADMIN_KEY = base64.b64encode(b"admin-key-" * 4).decode()
SENDER_KEY = base64.b64encode(b"sender-key" * 4).decode()
SENDER_KEY_2 = base64.b64encode(b"second-key" * 4).decode()

POLICY = f"""
[[principals]]
name = "admin"
azure_keys = [{{ account = "prod", key = "{ADMIN_KEY}" }}]
[[principals.grants]]
queues = ["*"]
actions = ["*"]

[[principals]]
name = "orders-sender"
# The same account name with another key: another principal.
azure_keys = [{{ account = "prod", key = "{SENDER_KEY}" }}, {{ account = "senders", key = "{SENDER_KEY_2}" }}]
[[principals.grants]]
queues = ["orders-*"]
actions = ["send", "peek"]
"""


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory) -> Iterator[FrontendServer]:
    directory = tmp_path_factory.mktemp("azure-auth")
    policy = directory / "policy.toml"
    policy.write_text(POLICY)
    server = http_frontend.start(
        "--azure-listen",
        f"sqlite:///{directory / 'leaseq.db'}",
        directory,
        "--auth-policy",
        str(policy),
    )
    try:
        yield server
    finally:
        http_frontend.stop(server, FAULT)


def client(server: FrontendServer, account: str, key: str, queue: str) -> QueueClient:
    return QueueClient.from_connection_string(
        connection_string(server, account, key), queue, retry_total=0
    )


def test_keys_map_to_principals_and_their_grants(auth_server):
    orders, private = unique("orders"), unique("private")
    client(auth_server, "prod", ADMIN_KEY, orders).create_queue()
    client(auth_server, "prod", ADMIN_KEY, private).create_queue()
    sender = client(auth_server, "prod", SENDER_KEY, orders)
    sender.send_message("allowed")
    assert [m.content for m in sender.peek_messages()] == ["allowed"]
    client(auth_server, "senders", SENDER_KEY_2, orders).send_message("second key")
    for denied in (
        sender.receive_message,
        sender.clear_messages,
        lambda: sender.set_queue_metadata({"a": "b"}),
        lambda: client(auth_server, "prod", SENDER_KEY, private).send_message("no"),
        lambda: client(auth_server, "prod", SENDER_KEY, unique("orders")).create_queue(),
    ):
        with pytest.raises(HttpResponseError) as caught:
            denied()
        assert caught.value.status_code == 403
        assert caught.value.error_code == "AuthorizationPermissionMismatch"
    # List Queues shows only the queues the principal holds some action on.
    service = QueueServiceClient.from_connection_string(
        connection_string(auth_server, "prod", SENDER_KEY), retry_total=0
    )
    names = {q.name for q in service.list_queues()}
    assert orders in names and private not in names
    assert (
        client(auth_server, "prod", ADMIN_KEY, orders)
        .get_queue_properties()
        .approximate_message_count
        == 2
    )


def test_wrong_or_unknown_keys_and_the_development_account_fail(auth_server):
    name = unique("orders")
    client(auth_server, "prod", ADMIN_KEY, name).create_queue()
    wrong = base64.b64encode(b"not-a-key" * 4).decode()
    for account, key in (("prod", wrong), ("nobody", ADMIN_KEY), ("devstoreaccount1", DEV_KEY)):
        with pytest.raises(ClientAuthenticationError) as caught:
            client(auth_server, account, key, name).send_message("x")
        assert caught.value.status_code == 403 and caught.value.error_code == "AuthenticationFailed"
    assert (
        client(auth_server, "prod", ADMIN_KEY, name)
        .get_queue_properties()
        .approximate_message_count
        == 0
    )


def test_shared_key_lite(azure_server):
    """SharedKeyLite's string to sign, written from the REST reference: VERB, Content-MD5,
    Content-Type, Date, the x-ms-* headers, the resource with only ?comp."""
    name = unique()
    QueueClient.from_connection_string(
        connection_string(azure_server), name, retry_total=0
    ).create_queue()
    url = f"{azure_server.endpoint}/devstoreaccount1/{name}?comp=metadata&timeout=5"
    headers = {"x-ms-date": http_date(), "x-ms-version": "2018-03-28"}
    path = urlsplit(url).path
    text = (
        "GET\n\n\n\n"
        + "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        + f"/devstoreaccount1{path}?comp=metadata"
    )
    headers["Authorization"] = f"SharedKeyLite devstoreaccount1:{sign(text)}"
    reply = raw("GET", url, headers=headers)
    assert reply.status_code == 200 and reply.headers["x-ms-approximate-messages-count"] == "0"
    headers["Authorization"] = f"SharedKeyLite devstoreaccount1:{sign(text + 'x')}"
    assert raw("GET", url, headers=headers).status_code == 403


@pytest.mark.parametrize(
    "entry, message",
    [
        ('azure_keys = [{ account = "a", key = "not base64!" }]', "base64"),
        ('azure_keys = [{ account = "", key = "AAAA" }]', "account"),
        (
            'azure_keys = [{ account = "a", key = "AAAA" }, { account = "a", key = "AAAA" }]',
            "twice",
        ),
        ('azure_keys = [{ account = "a", key = "AAAA", extra = 1 }]', "unknown"),
        ('azure_keys = "a:AAAA"', "list"),
    ],
)
def test_policy_file_errors(entry, message):
    with pytest.raises(PolicyError) as caught:
        parse_policy(f'[[principals]]\nname = "p"\n{entry}\n')
    assert message in str(caught.value)
    assert "AAAA" not in str(caught.value)  # a key is never echoed


def test_a_sas_carries_the_grants_of_the_key_that_signed_it(auth_server):
    """A SAS narrows its key's principal, never widens it: the sender's SAS with every
    permission still cannot receive (no grant) or reach a queue outside its grants; the key's
    other account name signs SASs for that account only."""
    from datetime import datetime, timedelta

    from azure.storage.queue import QueueSasPermissions, generate_queue_sas

    orders, private = unique("orders"), unique("private")
    for name in (orders, private):
        client(auth_server, "prod", ADMIN_KEY, name).create_queue()

    def sas_client(account: str, key: str, name: str) -> QueueClient:
        token = generate_queue_sas(
            account,
            name,
            key,
            permission=QueueSasPermissions(read=True, add=True, update=True, process=True),
            expiry=datetime.now(UTC) + timedelta(hours=1),
        )
        return QueueClient(
            f"{auth_server.endpoint}/{account}", name, credential=token, retry_total=0
        )

    sender = sas_client("prod", SENDER_KEY, orders)
    sender.send_message("by the sender's sas")
    assert [m.content for m in sender.peek_messages()] == ["by the sender's sas"]
    for call in (
        sender.receive_message,
        lambda: sas_client("prod", SENDER_KEY, private).send_message("no"),
    ):
        with pytest.raises(HttpResponseError) as caught:
            call()
        assert caught.value.error_code == "AuthorizationPermissionMismatch"
    sas_client("senders", SENDER_KEY_2, orders).send_message("second account")
    with pytest.raises(ClientAuthenticationError):  # that key is not one of prod's
        sas_client("prod", SENDER_KEY_2, orders).send_message("no")
    admin = client(auth_server, "prod", ADMIN_KEY, orders)
    assert admin.get_queue_properties().approximate_message_count == 2
