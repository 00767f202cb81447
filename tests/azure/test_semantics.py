"""Azure's exact semantics through the real SDK: error codes and sentences as Azure writes them
(details only in the extra elements, never inside the sentence), the order in which Azure checks
a request, the 64 KiB message of queues made through Azure, messagettl=-1, and the pop receipt
Put Message answers."""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueClient

from .conftest import DEV_ACCOUNT, connection_string, raw, unique

OUT_OF_RANGE = (
    "One of the query parameters specified in the request URI is outside the permissible range."
)
INVALID_VALUE = "Value for one of the query parameters specified in the request URI is invalid."


def refused(call, status: int, code: str) -> HttpResponseError:
    with pytest.raises(HttpResponseError) as caught:
        call()
    error = caught.value
    assert (error.status_code, error.error_code) == (status, code), str(error)
    return error


def sentence(error: HttpResponseError) -> str:
    """The first line of Azure's <Message> (RequestId and Time follow)."""
    return str(error).splitlines()[0]


def test_out_of_range_sentence_is_azures_and_the_values_are_elements(queue):
    error = refused(
        lambda: queue.receive_message(visibility_timeout=0), 400, "OutOfRangeQueryParameterValue"
    )
    assert sentence(error) == OUT_OF_RANGE
    info = {k.lower(): v for k, v in error.additional_info.items()}
    assert info["queryparametername"] == "visibilitytimeout"
    assert (info["minimumallowed"], info["maximumallowed"]) == ("1", "604800")


def test_visibility_timeout_must_end_before_the_message_expires(queue):
    for ttl in (120, 121):  # equal: the message could never be delivered; later: worse
        error = refused(
            lambda ttl=ttl: queue.send_message("x", visibility_timeout=121, time_to_live=ttl),
            400,
            "InvalidQueryParameterValue",
        )
        assert sentence(error) == INVALID_VALUE
        info = {k.lower(): v for k, v in error.additional_info.items()}
        assert info["queryparametername"] == "visibilitytimeout"
        assert info["reason"] == "messagettl must be greater than visibilitytimeout."
    queue.send_message("x", visibility_timeout=119, time_to_live=120)
    assert queue.get_queue_properties().approximate_message_count == 1


@pytest.mark.parametrize("ttl", [0, -2])
def test_a_ttl_below_one_that_is_not_minus_one(queue, ttl):
    error = refused(
        lambda: queue.send_message("x", time_to_live=ttl), 400, "InvalidQueryParameterValue"
    )
    info = {k.lower(): v for k, v in error.additional_info.items()}
    assert (info["queryparametername"], info["queryparametervalue"]) == ("messagettl", str(ttl))
    assert queue.get_queue_properties().approximate_message_count == 0


def test_update_checks_the_range_before_the_pop_receipt(azure_server, queue):
    sent = queue.send_message("x")
    url = f"{azure_server.endpoint}/{DEV_ACCOUNT}/{queue.queue_name}/messages/{sent.id}"
    reply = raw("PUT", f"{url}?popreceipt=not-a-receipt&visibilitytimeout=604801")
    assert reply.status_code == 400, reply.text
    assert reply.headers["x-ms-error-code"] == "OutOfRangeQueryParameterValue"


def test_queue_not_found_and_message_not_found_sentences(azure_server, queue):
    missing = QueueClient.from_connection_string(
        connection_string(azure_server), unique(), retry_total=0
    )
    error = refused(missing.get_queue_properties, 404, "QueueNotFound")
    assert sentence(error) == "The specified queue does not exist."
    queue.send_message("x")
    got = queue.receive_message(visibility_timeout=60)
    queue.delete_message(got)
    queue.send_message("y")
    queue.receive_message(visibility_timeout=60)
    error = refused(lambda: queue.update_message(got, visibility_timeout=1), 404, "MessageNotFound")
    assert sentence(error) == "The specified message does not exist."


def test_messages_of_azure_queues_hold_64_kib(queue):
    queue.send_message("x" * 64 * 1024)
    error = refused(lambda: queue.send_message("x" * (64 * 1024 + 1)), 413, "RequestBodyTooLarge")
    assert sentence(error) == (
        "The request body is too large and exceeds the maximum permissible limit."
    )
    assert {k.lower(): v for k, v in error.additional_info.items()}["maxlimit"] == "65536"
    assert queue.get_queue_properties().approximate_message_count == 1


def test_queues_made_over_grpc_keep_their_own_limit(azure_server, grpc_client):
    name = unique()
    grpc_client.create_queue(name, max_message_bytes=256 * 1024)
    client = QueueClient.from_connection_string(
        connection_string(azure_server), name, retry_total=0
    )
    client.send_message("x" * 200 * 1024)
    refused(lambda: client.send_message("x" * (256 * 1024 + 1)), 413, "RequestBodyTooLarge")


def test_a_ttl_of_minus_one_never_expires(azure_server, queue, grpc_client):
    sent = queue.send_message("forever", time_to_live=-1)
    assert (sent.expires_on.year, sent.expires_on.month, sent.expires_on.day) == (9999, 12, 31)
    (peeked,) = queue.peek_messages()
    assert peeked.expires_on == sent.expires_on
    got = queue.receive_message(visibility_timeout=1)
    assert (got.id, got.expires_on) == (sent.id, sent.expires_on)
    # Past any retention: gRPC shows an expiry 100 years on (the domain's "never").
    (leased,) = grpc_client.peek(queue.queue_name, include_leased=True)
    assert leased.expires_at.year >= got.inserted_on.year + 99
    # On a queue made over gRPC with a short retention, too; other ttls stay within it.
    name = unique()
    grpc_client.create_queue(name, message_retention=60)
    short = QueueClient.from_connection_string(connection_string(azure_server), name, retry_total=0)
    assert short.send_message("x", time_to_live=-1).expires_on.year == 9999
    error = refused(
        lambda: short.send_message("x", time_to_live=61), 400, "OutOfRangeQueryParameterValue"
    )
    assert {k.lower(): v for k, v in error.additional_info.items()}["maximumallowed"] == "60"


def test_message_ids_are_guids_and_leaseqs_form_names_them_too(queue, grpc_client):
    import uuid

    sent = queue.send_message("guid")
    assert str(uuid.UUID(sent.id)) == sent.id  # 8-4-4-4-12, as Azure writes them
    (over_grpc,) = grpc_client.peek(queue.queue_name)
    assert over_grpc.message_id == sent.id.replace("-", "")
    got = queue.receive_message(visibility_timeout=60)
    queue.delete_message(got.id.replace("-", ""), got.pop_receipt)  # leaseq's own form
    assert queue.get_queue_properties().approximate_message_count == 0
