"""Get/Set Queue Service Properties, Get Queue Service Stats and the `-secondary` endpoint, with
the real SDK: what is set is returned (also by a new client, and what a Set leaves out is kept),
bad properties are Azure's 400, the secondary serves reads and refuses writes."""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.queue import (
    CorsRule,
    Metrics,
    QueueAnalyticsLogging,
    QueueClient,
    QueueServiceClient,
    RetentionPolicy,
)

from .conftest import DEV_ACCOUNT, DEV_KEY, connection_string, raw, unique


def secondary_url(server) -> str:
    """The account's read-only endpoint, path-style as Azurite serves it."""
    return f"{server.endpoint}/{DEV_ACCOUNT}-secondary"


def credential() -> dict[str, str]:
    return {"account_name": DEV_ACCOUNT, "account_key": DEV_KEY}


@pytest.fixture
def clean_properties(service):
    """Tests of one server share its properties: each starts and ends without CORS rules."""
    service.set_service_properties(cors=[])
    yield service
    service.set_service_properties(cors=[])


def test_properties_are_stored_and_returned(azure_server, clean_properties):
    service = clean_properties
    defaults = service.get_service_properties()
    assert defaults["analytics_logging"].read is False and defaults["cors"] == []
    rule = CorsRule(
        ["https://app.example"],
        ["GET", "PUT"],
        allowed_headers=["x-ms-meta-*", "x-ms-version"],
        exposed_headers=["x-ms-request-id"],
        max_age_in_seconds=300,
    )
    service.set_service_properties(
        analytics_logging=QueueAnalyticsLogging(
            read=True, write=True, delete=False, retention_policy=RetentionPolicy(True, 7)
        ),
        hour_metrics=Metrics(
            enabled=True, include_apis=True, retention_policy=RetentionPolicy(True, 5)
        ),
        cors=[rule],
    )
    # A Set that names one section keeps the others.
    service.set_service_properties(minute_metrics=Metrics(enabled=False))
    fresh = QueueServiceClient.from_connection_string(connection_string(azure_server))
    got = fresh.get_service_properties()
    logging = got["analytics_logging"]
    assert (logging.read, logging.write, logging.delete) == (True, True, False)
    assert (logging.retention_policy.enabled, logging.retention_policy.days) == (True, 7)
    assert got["hour_metrics"].enabled and got["hour_metrics"].include_apis
    assert got["hour_metrics"].retention_policy.days == 5
    assert got["minute_metrics"].enabled is False
    (cors,) = got["cors"]
    assert cors.allowed_origins == "https://app.example"
    assert cors.allowed_methods == "GET,PUT"
    assert cors.allowed_headers == "x-ms-meta-*,x-ms-version"
    assert cors.exposed_headers == "x-ms-request-id"
    assert cors.max_age_in_seconds == 300


def test_bad_properties_are_refused_and_change_nothing(azure_server, clean_properties):
    url = f"{azure_server.endpoint}/{DEV_ACCOUNT}/?restype=service&comp=properties"
    rules = "".join(
        "<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods>"
        "<MaxAgeInSeconds>1</MaxAgeInSeconds></CorsRule>"
        for _ in range(6)
    )
    for body in (
        f"<StorageServiceProperties><Cors>{rules}</Cors></StorageServiceProperties>",
        "<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>*</AllowedOrigins>"
        "<AllowedMethods>FETCH</AllowedMethods></CorsRule></Cors></StorageServiceProperties>",
        "<StorageServiceProperties><HourMetrics><Enabled>maybe</Enabled></HourMetrics>"
        "</StorageServiceProperties>",
        "<Other/>",
        # Azure's 2 KiB of rule values: nine 250-character origins are over it.
        "<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>"
        + ",".join("https://" + "o" * 242 for _ in range(9))
        + "</AllowedOrigins><AllowedMethods>GET</AllowedMethods></CorsRule></Cors>"
        "</StorageServiceProperties>",
    ):
        reply = raw("PUT", url, body.encode())
        assert (reply.status_code, reply.headers["x-ms-error-code"]) == (400, "InvalidXmlDocument")
    assert clean_properties.get_service_properties()["cors"] == []


def test_stats_and_the_secondary_endpoint(azure_server, queue):
    # The SDK sends Get Service Stats to its secondary location: here the same host.
    service = QueueServiceClient(
        secondary_url(azure_server),
        credential(),
        secondary_hostname=f"127.0.0.1:{azure_server.port}",
        retry_total=0,
    )
    stats = service.get_service_stats()
    assert stats["geo_replication"]["status"] == "live"
    assert stats["geo_replication"]["last_sync_time"] is not None
    queue.send_message("replicated")
    secondary = QueueClient(
        secondary_url(azure_server), queue.queue_name, credential(), retry_total=0
    )
    assert [m.content for m in secondary.peek_messages()] == ["replicated"]
    assert secondary.get_queue_properties().approximate_message_count == 1
    with pytest.raises(HttpResponseError) as caught:
        secondary.receive_message()  # a read that changes the queue: the primary's only
    assert (caught.value.status_code, caught.value.error_code) == (403, "AuthorizationFailure")
    assert queue.receive_message().content == "replicated"


def test_acl_of_a_missing_queue(azure_server):
    missing = QueueClient.from_connection_string(
        connection_string(azure_server), unique(), retry_total=0
    )
    with pytest.raises(ResourceNotFoundError):
        missing.get_queue_access_policy()
    with pytest.raises(ResourceNotFoundError):
        missing.set_queue_access_policy({})


def test_acls_go_with_their_queue(azure_server, queue):
    from azure.storage.queue import AccessPolicy

    queue.set_queue_access_policy({"p": AccessPolicy(permission="r")})
    queue.delete_queue()
    queue.create_queue()
    assert queue.get_queue_access_policy() == {}
