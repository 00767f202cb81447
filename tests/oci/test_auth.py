"""OCI request signatures on the OCI endpoint: with --auth-policy, signatures are verified
against the policy's oci_keys and the principal's grants apply as over gRPC; without a policy
(loopback) any well-formed signature is taken."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import oci
import pytest
import requests
from oci.queue.models import PutMessagesDetails, PutMessagesDetailsEntry

from leaseq.server.auth import PolicyError, parse_policy
from tests.support import http_frontend
from tests.support.http_frontend import FrontendServer

from .conftest import FAULT, TENANCY, ApiKey, clients, create_queue, make_key, unique

NOBODY = "ocid1.user.oc1..aaaanobody"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ApiKey]:
    directory = tmp_path_factory.mktemp("oci-keys")
    return {
        who: make_key(directory, f"ocid1.user.oc1..aaaa{who}")
        for who in ("admin", "sender", "stranger")
    }


@pytest.fixture(scope="module")
def auth_server(
    tmp_path_factory: pytest.TempPathFactory, keys: dict[str, ApiKey]
) -> Iterator[FrontendServer]:
    directory = tmp_path_factory.mktemp("oci-auth")
    policy = directory / "policy.toml"

    def key(who: str) -> str:
        k = keys[who]
        return f'{{ tenancy = "{TENANCY}", user = "{k.user}", public_key = """{k.public_pem}""" }}'

    policy.write_text(
        f"""
[[principals]]
name = "admin"
oci_keys = [{key("admin")}]
[[principals.grants]]
queues = ["*"]
actions = ["*"]

[[principals]]
name = "orders-sender"
oci_keys = [{key("sender")}]
[[principals.grants]]
queues = ["orders-*"]
actions = ["send"]
"""
    )
    server = http_frontend.start(
        "--oci-listen",
        f"sqlite:///{directory / 'leaseq.db'}",
        directory,
        "--auth-policy",
        str(policy),
    )
    try:
        yield server
    finally:
        http_frontend.stop(server, FAULT)


def entry(content: str) -> PutMessagesDetails:
    return PutMessagesDetails(messages=[PutMessagesDetailsEntry(content=content)])


def test_grants_apply(auth_server: FrontendServer, keys: dict[str, ApiKey]) -> None:
    _, admin = clients(auth_server, keys["admin"])
    queue_id = create_queue(admin, display_name=unique("orders"))
    sender, sender_admin = clients(auth_server, keys["sender"])
    assert sender.put_messages(queue_id, entry("ok")).data.messages[0].id >= 0
    with pytest.raises(oci.exceptions.ServiceError) as refused:
        sender.get_messages(queue_id, timeout_in_seconds=0)
    assert (refused.value.status, refused.value.code) == (404, "NotAuthorizedOrNotFound")
    with pytest.raises(oci.exceptions.ServiceError) as refused:
        sender_admin.delete_queue(queue_id)
    assert refused.value.status == 404
    other = create_queue(admin, display_name=unique("billing"))
    assert other not in [q.id for q in sender_admin.list_queues(compartment_id="c").data.items]
    assert queue_id in [q.id for q in sender_admin.list_queues(compartment_id="c").data.items]


def test_unknown_key_and_wrong_signature_are_refused(
    auth_server: FrontendServer, keys: dict[str, ApiKey]
) -> None:
    stranger, _ = clients(auth_server, keys["stranger"])
    with pytest.raises(oci.exceptions.ServiceError) as refused:
        stranger.get_stats("ocid1.queue.oc1.leaseq.orders-x")
    assert (refused.value.status, refused.value.code) == (401, "NotAuthenticated")
    # The admin's key id with the stranger's private key: the signature does not verify.
    forged = ApiKey(keys["admin"].user, keys["stranger"].key_file, "", keys["admin"].fingerprint)
    forger, _ = clients(auth_server, forged)
    with pytest.raises(oci.exceptions.ServiceError) as refused:
        forger.get_stats("ocid1.queue.oc1.leaseq.orders-x")
    assert refused.value.status == 401 and "does not verify" in refused.value.message


def signer(key: ApiKey) -> oci.signer.Signer:
    return oci.signer.Signer(TENANCY, key.user, key.fingerprint, str(key.key_file))


def test_a_body_changed_after_signing_is_refused(
    auth_server: FrontendServer, keys: dict[str, ApiKey]
) -> None:
    _, admin = clients(auth_server, keys["admin"])
    queue_id = create_queue(admin)
    url = f"{auth_server.endpoint}/20210201/queues/{queue_id}/messages"
    body = b'{"messages":[{"content":"signed"}]}'
    prepared = requests.Request("POST", url, data=body, auth=signer(keys["admin"])).prepare()
    prepared.body = b'{"messages":[{"content":"swaped"}]}'  # same length, other bytes
    with requests.Session() as session:
        answer = session.send(prepared, timeout=10)
    assert answer.status_code == 401 and answer.json()["code"] == "NotAuthenticated"
    assert answer.headers["opc-request-id"]
    unsigned = requests.get(f"{auth_server.endpoint}/20210201/queues", timeout=10)
    assert unsigned.status_code == 401 and unsigned.json()["code"] == "NotAuthenticated"


def test_no_policy_takes_any_well_formed_signature(
    oci_server: FrontendServer, tmp_path: Path
) -> None:
    anyone = make_key(tmp_path, "ocid1.user.oc1..aaaaanyone")
    messages, admin = clients(oci_server, anyone)
    queue_id = create_queue(admin)
    assert messages.put_messages(queue_id, entry("hi")).data.messages
    unsigned = requests.get(f"{oci_server.endpoint}/20210201/queues", timeout=10)
    assert unsigned.status_code == 401


def test_policy_oci_keys_are_checked() -> None:
    with pytest.raises(PolicyError, match="public_key"):
        parse_policy(
            '[[principals]]\nname = "a"\noci_keys = [{ tenancy = "t", user = "u", public_key = "x" }]'
        )
    with pytest.raises(PolicyError, match="unknown key"):
        parse_policy(
            '[[principals]]\nname = "a"\noci_keys = [{ tenancy = "t", user = "u", key = "x" }]'
        )
