"""Queue operations through azure-storage-queue: Create (with metadata), Delete, List (prefix,
marker, maxresults, include=metadata), Get/Set Queue Metadata."""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.queue import QueueClient, QueueServiceClient

from tests.support import http_frontend

from .conftest import FAULT, connection_string, raw, unique


def test_create_with_metadata_then_properties_count_every_message(azure_server, grpc_client):
    client = QueueClient.from_connection_string(
        connection_string(azure_server), unique(), retry_total=0
    )
    client.create_queue(metadata={"team": "orders", "Owner_2": "x"})
    props = client.get_queue_properties()
    assert props.name == client.queue_name
    assert props.metadata == {"team": "orders", "Owner_2": "x"}
    assert props.approximate_message_count == 0
    client.send_message("one")
    client.send_message("two", visibility_timeout=600)  # delayed: counted all the same
    client.receive_message(visibility_timeout=600)  # leased: counted too
    assert client.get_queue_properties().approximate_message_count == 2
    # The queue is a leaseq queue like any other.
    assert grpc_client.stats(client.queue_name).total == 2


def test_create_again_same_metadata_is_exists_and_other_metadata_is_conflict(queue: QueueClient):
    with pytest.raises(ResourceExistsError) as same:
        queue.create_queue()  # 204: the SDK raises, as against Azure
    assert same.value.status_code == 204
    with pytest.raises(ResourceExistsError) as other:
        queue.create_queue(metadata={"a": "b"})
    assert other.value.status_code == 409 and other.value.error_code == "QueueAlreadyExists"


def test_set_metadata_replaces_it(queue: QueueClient):
    queue.set_queue_metadata({"k1": "v1", "k2": "v2"})
    assert queue.get_queue_properties().metadata == {"k1": "v1", "k2": "v2"}
    queue.set_queue_metadata({"k3": ""})
    assert queue.get_queue_properties().metadata == {"k3": ""}
    queue.set_queue_metadata({})
    assert queue.get_queue_properties().metadata == {}


def test_delete_then_everything_is_queue_not_found(queue: QueueClient):
    queue.delete_queue()
    for call in (
        queue.delete_queue,
        queue.get_queue_properties,
        lambda: queue.send_message("x"),
        queue.receive_message,
        lambda: list(queue.peek_messages()),
        queue.clear_messages,
        lambda: queue.set_queue_metadata({"a": "b"}),
    ):
        with pytest.raises(ResourceNotFoundError) as caught:
            call()
        assert caught.value.error_code == "QueueNotFound" and caught.value.status_code == 404


def test_a_queue_created_again_has_no_old_metadata(azure_server):
    name = unique()
    client = QueueClient.from_connection_string(
        connection_string(azure_server), name, retry_total=0
    )
    client.create_queue(metadata={"old": "1"})
    client.delete_queue()
    client.create_queue()
    assert client.get_queue_properties().metadata == {}


def test_list_queues_prefix_pages_and_metadata(service: QueueServiceClient):
    prefix = unique("list")
    names = [f"{prefix}-{i}" for i in range(5)]
    for i, name in enumerate(names):
        service.create_queue(name, metadata={"i": str(i)})
    listed = list(service.list_queues(name_starts_with=prefix, include_metadata=True))
    assert [q.name for q in listed] == names
    assert [q.metadata for q in listed] == [{"i": str(i)} for i in range(5)]
    # Without include=metadata the SDK shows none.
    assert all(not q.metadata for q in service.list_queues(name_starts_with=prefix))
    # Pages of 2 (maxresults, NextMarker, marker), in order, nothing twice.
    pages = list(service.list_queues(name_starts_with=prefix, results_per_page=2).by_page())
    assert [[q.name for q in page] for page in pages] == [names[0:2], names[2:4], names[4:5]]
    assert list(service.list_queues(name_starts_with=prefix + "-nothing")) == []


def test_list_queues_xml_has_the_reference_shape(azure_server):
    prefix = unique("shape")
    raw("PUT", f"{azure_server.endpoint}/devstoreaccount1/{prefix}-a")
    reply = raw(
        "GET", f"{azure_server.endpoint}/devstoreaccount1?comp=list&prefix={prefix}&maxresults=1"
    )
    assert reply.status_code == 200 and reply.headers["Content-Type"] == "application/xml"
    assert reply.text == (
        '<?xml version="1.0" encoding="utf-8"?>'
        f'<EnumerationResults ServiceEndpoint="{azure_server.endpoint}/devstoreaccount1/">'
        f"<Prefix>{prefix}</Prefix><MaxResults>1</MaxResults>"
        f"<Queues><Queue><Name>{prefix}-a</Name></Queue></Queues><NextMarker />"
        "</EnumerationResults>"
    )


@pytest.mark.parametrize(
    "name, code, sentence",
    [
        (name, "InvalidResourceName", "The specifed resource name contains invalid characters.")
        for name in ["Upper-case", "double--dash", "-lead", "trail-", "under_score"]
    ]
    + [
        (
            name,
            "OutOfRangeInput",
            "The specified resource name length is not within the permissible limits.",
        )
        for name in ["ab", "a" * 64, "A_"]
    ],
)
def test_create_refuses_names_azure_refuses(azure_server, name, code, sentence):
    """Azure's codes and sentences exactly (the length is checked first; "specifed" is Azure's
    own spelling, which clients that match the text expect)."""
    client = QueueClient.from_connection_string(
        connection_string(azure_server), name, retry_total=0
    )
    with pytest.raises(HttpResponseError) as caught:
        client.create_queue()
    assert caught.value.status_code == 400 and caught.value.error_code == code
    assert str(caught.value).splitlines()[0] == sentence


def test_queues_made_through_grpc_with_leaseq_names_are_reachable(azure_server, grpc_client):
    name = "Grpc_" + unique()
    grpc_client.create_queue(name)
    grpc_client.send(name, b"from grpc")
    client = QueueClient.from_connection_string(
        connection_string(azure_server), name, retry_total=0
    )
    assert client.receive_message().content == "from grpc"


def test_answers_carry_request_id_version_date_and_echo_the_client_request_id(azure_server):
    name = unique()
    reply = raw(
        "PUT",
        f"{azure_server.endpoint}/devstoreaccount1/{name}",
        headers={"x-ms-client-request-id": "my-id-42", "x-ms-meta-color": "blue"},
    )
    assert reply.status_code == 201
    assert reply.headers["x-ms-client-request-id"] == "my-id-42"
    assert reply.headers["x-ms-version"] == "2018-03-28"
    assert len(reply.headers["x-ms-request-id"]) == 36
    assert reply.headers["Date"].endswith(" GMT")
    meta = raw("HEAD", f"{azure_server.endpoint}/devstoreaccount1/{name}?comp=metadata")
    assert meta.status_code == 200
    assert meta.headers["x-ms-meta-color"] == "blue"
    assert meta.headers["x-ms-approximate-messages-count"] == "0"


def test_metadata_is_kept_by_the_store_across_a_restart(tmp_path):
    server = http_frontend.start("--azure-listen", f"sqlite:///{tmp_path / 'q.db'}", tmp_path)
    try:
        client = QueueClient.from_connection_string(
            connection_string(server), unique(), retry_total=0
        )
        client.create_queue(metadata={"team": "orders"})
        client.set_queue_metadata({"team": "billing", "tier": "1"})
        assert server.process.terminate() == 0
        server.process.start()
        http_frontend.wait_listening(server.port, server.process)
        assert client.get_queue_properties().metadata == {"team": "billing", "tier": "1"}
        with pytest.raises(ResourceExistsError) as other:  # the same rule as before the restart
            client.create_queue(metadata={"team": "orders"})
        assert other.value.status_code == 409
    finally:
        http_frontend.stop(server, FAULT)
