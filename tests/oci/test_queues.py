"""The OCI admin API through the real SDK's QueueAdminClient: each operation, its work request
(what the SDK's waiters poll), the settings OCI has, pagination, and queues made elsewhere."""

from __future__ import annotations

import oci
import pytest
from oci.queue.models import PurgeQueueDetails, UpdateQueueDetails

from .conftest import COMPARTMENT, create_queue, unique
from .test_messages import put


def test_create_get_update_delete(
    admin: oci.queue.QueueAdminClient, messages: oci.queue.QueueClient, oci_server
) -> None:
    name = unique("orders")
    queue_id = create_queue(
        admin,
        display_name=name,
        retention_in_seconds=3600,
        visibility_in_seconds=45,
        timeout_in_seconds=5,
        dead_letter_queue_delivery_count=3,
        channel_consumption_limit=50,
        custom_encryption_key_id="ocid1.key.oc1..kms",
        freeform_tags={"team": "shop"},
    )
    assert queue_id == f"ocid1.queue.oc1.leaseq.{name}"
    queue = admin.get_queue(queue_id).data
    assert (queue.display_name, queue.lifecycle_state, queue.compartment_id) == (
        name,
        "ACTIVE",
        COMPARTMENT,
    )
    assert queue.messages_endpoint == oci_server.endpoint
    assert (queue.retention_in_seconds, queue.visibility_in_seconds, queue.timeout_in_seconds) == (
        3600,
        45,
        5,
    )
    assert queue.dead_letter_queue_delivery_count == 3 and queue.channel_consumption_limit == 50
    assert queue.custom_encryption_key_id == "ocid1.key.oc1..kms" and queue.freeform_tags == {
        "team": "shop"
    }

    composite = oci.queue.QueueAdminClientCompositeOperations(admin)
    done = composite.update_queue_and_wait_for_state(
        queue_id,
        UpdateQueueDetails(visibility_in_seconds=90, dead_letter_queue_delivery_count=0),
        wait_for_states=["SUCCEEDED"],
    )
    assert done.data.operation_type == "UPDATE_QUEUE" and done.data.percent_complete == 100.0
    queue = admin.get_queue(queue_id).data
    assert queue.visibility_in_seconds == 90 and queue.dead_letter_queue_delivery_count == 0
    assert queue.freeform_tags == {"team": "shop"}  # kept: not in the update

    work_id = admin.delete_queue(queue_id).headers["opc-work-request-id"]
    work = admin.get_work_request(work_id).data
    assert (work.status, work.operation_type, work.resources[0].identifier) == (
        "SUCCEEDED",
        "DELETE_QUEUE",
        queue_id,
    )
    assert admin.list_work_request_errors(work_id).data.items == []
    assert admin.list_work_request_logs(work_id).data.items
    assert work_id in [
        w.id for w in admin.list_work_requests(compartment_id=COMPARTMENT).data.items
    ]
    with pytest.raises(oci.exceptions.ServiceError) as gone:
        admin.get_queue(queue_id)
    assert (gone.value.status, gone.value.code) == (404, "NotAuthorizedOrNotFound")


def test_list_queues_pages(admin: oci.queue.QueueAdminClient) -> None:
    prefix = unique("page")
    made = sorted(create_queue(admin, display_name=f"{prefix}-{i}") for i in range(3))
    first = admin.list_queues(compartment_id=COMPARTMENT, display_name=f"{prefix}-1")
    assert [q.id for q in first.data.items] == [made[1]]
    listed = oci.pagination.list_call_get_all_results(
        admin.list_queues, compartment_id=COMPARTMENT, limit=2
    )
    ids = [q.id for q in listed.data]
    assert all(m in ids for m in made) and len(ids) == len(set(ids))
    one_page = admin.list_queues(compartment_id=COMPARTMENT, limit=1)
    assert len(one_page.data.items) == 1 and one_page.headers.get("opc-next-page")


def test_purge(admin: oci.queue.QueueAdminClient, messages: oci.queue.QueueClient) -> None:
    queue_id = create_queue(admin)
    put(messages, queue_id, "a", "b")
    composite = oci.queue.QueueAdminClientCompositeOperations(admin)
    composite.purge_queue_and_wait_for_state(
        queue_id, PurgeQueueDetails(purge_type="BOTH"), wait_for_states=["SUCCEEDED"]
    )
    assert messages.get_stats(queue_id).data.queue.visible_messages == 0


def test_a_queue_made_over_grpc_is_an_oci_queue(grpc_client, admin, messages) -> None:
    name = unique("grpc_Made")
    grpc_client.create_queue(name)
    grpc_client.send(name, b"from grpc", channel="eu", attributes={"k": "v"})
    queue_id = f"ocid1.queue.oc1.leaseq.{name}"
    assert admin.get_queue(queue_id).data.display_name == name
    [m] = messages.get_messages(queue_id, timeout_in_seconds=0).data.messages
    assert (m.content, m.metadata.channel_id, m.metadata.custom_properties) == (
        "from grpc",
        "eu",
        {"k": "v"},
    )
    messages.delete_message(queue_id, m.receipt)
    # And back: an OCI message reaches a gRPC consumer with its channel and properties.
    put(messages, queue_id, "from oci", channel="us", kind="x")
    [back] = grpc_client.receive(name, wait_time=0)
    assert (back.body, back.channel, back.attributes) == (b"from oci", "us", {"kind": "x"})


def test_update_adds_a_dead_letter_queue_and_compartments_move(
    admin: oci.queue.QueueAdminClient, messages: oci.queue.QueueClient
) -> None:
    queue_id = create_queue(admin)
    assert admin.get_queue(queue_id).data.dead_letter_queue_delivery_count == 0
    admin.update_queue(
        queue_id, UpdateQueueDetails(dead_letter_queue_delivery_count=1, visibility_in_seconds=0)
    )
    assert admin.get_queue(queue_id).data.dead_letter_queue_delivery_count == 1
    put(messages, queue_id, "once")
    # A delivery without a lease (visibility 0) still counts: the next receive dead-letters it.
    assert len(messages.get_messages(queue_id, timeout_in_seconds=0).data.messages) == 1
    assert messages.get_messages(queue_id, timeout_in_seconds=0).data.messages == []
    assert messages.get_stats(queue_id).data.dlq.visible_messages == 1
    admin.purge_queue(queue_id, PurgeQueueDetails(purge_type="DLQ"))
    assert messages.get_stats(queue_id).data.dlq.visible_messages == 0

    moved = admin.change_queue_compartment(
        queue_id,
        oci.queue.models.ChangeQueueCompartmentDetails(
            compartment_id="ocid1.compartment.oc1..other"
        ),
    )
    assert admin.get_work_request(moved.headers["opc-work-request-id"]).data.status == "SUCCEEDED"
    assert admin.get_queue(queue_id).data.compartment_id == "ocid1.compartment.oc1..other"


def test_get_messages_defaults_to_one_message(
    messages: oci.queue.QueueClient, queue_id: str
) -> None:
    put(messages, queue_id, "a", "b", "c")
    assert len(messages.get_messages(queue_id, timeout_in_seconds=0).data.messages) == 1


def test_create_of_an_existing_name_is_a_conflict_and_changes_nothing(
    admin: oci.queue.QueueAdminClient, grpc_client
) -> None:
    name = unique("taken")
    grpc_client.create_queue(f"{name}-dlq")
    grpc_client.create_queue(name)
    details = oci.queue.models.CreateQueueDetails(
        display_name=name, compartment_id=COMPARTMENT, dead_letter_queue_delivery_count=2
    )
    with pytest.raises(oci.exceptions.ServiceError) as refused:
        admin.create_queue(details)
    assert (refused.value.status, refused.value.code) == (409, "Conflict")
    assert grpc_client.get_queue(name).config.dead_letter_queue is None
