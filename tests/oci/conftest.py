"""A real `leaseq serve --oci-listen` process per module and store (SQLite, PostgreSQL), and the
real `oci` SDK clients (QueueClient, QueueAdminClient) signing with an API key made here.

Each test makes its own queues (unique names), so the tests of a module share one server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import oci
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from leaseq.client import QueueClient as LeaseqClient
from tests.support import http_frontend
from tests.support.http_frontend import FrontendServer

FAULT = "unexpected error in OCI operation"  # what a 500 logs: bad input is never a server fault
TENANCY = "ocid1.tenancy.oc1..aaaatenancy"
COMPARTMENT = "ocid1.compartment.oc1..aaaacompartment"


@dataclass
class ApiKey:
    """An OCI API key as a user makes one: the private key file the SDK signs with, and the
    public key (PEM) to upload, which leaseq's policy lists."""

    user: str
    key_file: Path
    public_pem: str
    fingerprint: str

    def config(self) -> dict[str, str]:
        return {
            "user": self.user,
            "tenancy": TENANCY,
            "fingerprint": self.fingerprint,
            "key_file": str(self.key_file),
            "region": "us-ashburn-1",
        }


def make_key(directory: Path, user: str) -> ApiKey:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = directory / f"{user.rpartition('.')[2]}.pem"
    key_file.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = private.public_key()
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    import hashlib

    digest = hashlib.md5(der).hexdigest()
    pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return ApiKey(
        user, key_file, pem.decode(), ":".join(digest[i : i + 2] for i in range(0, 32, 2))
    )


def unique(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def api_key(tmp_path_factory: pytest.TempPathFactory) -> ApiKey:
    return make_key(tmp_path_factory.mktemp("oci-key"), "ocid1.user.oc1..aaaadeveloper")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def oci_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FrontendServer]:
    yield from http_frontend.per_store(request, tmp_path_factory, "--oci-listen", FAULT)


def clients(
    server: FrontendServer, key: ApiKey
) -> tuple[oci.queue.QueueClient, oci.queue.QueueAdminClient]:
    # No retries (the SDK's default for these operations): an error answer is the test's to see.
    admin = oci.queue.QueueAdminClient(key.config(), service_endpoint=server.endpoint)
    messages = oci.queue.QueueClient(key.config(), service_endpoint=server.endpoint)
    return messages, admin


@pytest.fixture(scope="module")
def admin(oci_server: FrontendServer, api_key: ApiKey) -> oci.queue.QueueAdminClient:
    return clients(oci_server, api_key)[1]


@pytest.fixture(scope="module")
def messages(oci_server: FrontendServer, api_key: ApiKey) -> oci.queue.QueueClient:
    return clients(oci_server, api_key)[0]


def create_queue(admin: oci.queue.QueueAdminClient, **settings: object) -> str:
    """CreateQueue and wait on its work request, as a user of the SDK does; the queue's OCID."""
    details = oci.queue.models.CreateQueueDetails(
        display_name=str(settings.pop("display_name", unique())),
        compartment_id=COMPARTMENT,
        **settings,
    )
    composite = oci.queue.QueueAdminClientCompositeOperations(admin)
    done = composite.create_queue_and_wait_for_state(
        details, wait_for_states=["SUCCEEDED", "FAILED"]
    )
    assert done.data.status == "SUCCEEDED"
    return done.data.resources[0].identifier


@pytest.fixture
def queue_id(admin: oci.queue.QueueAdminClient) -> str:
    return create_queue(admin)


@pytest.fixture(scope="module")
def grpc_client(oci_server: FrontendServer) -> Iterator[LeaseqClient]:
    with LeaseqClient(oci_server.grpc_target) as client:
        yield client
