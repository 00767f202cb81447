"""Bad input over raw HTTP: malformed XML, wrong signatures, bad dates, out-of-range and
non-integer values on every parameter, odd URLs. Every answer is Azure's <Error> with the right
status and code (never a 500), and the data is unchanged."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from azure.storage.queue import QueueClient

from .conftest import DEV_ACCOUNT, connection_string, http_date, raw, unique

PUT_BODY = b"<QueueMessage><MessageText>kept</MessageText></QueueMessage>"


def assert_error(reply, status: int, code: str, **details: str) -> dict[str, str]:
    assert reply.status_code == status, reply.text
    assert reply.headers["x-ms-error-code"] == code
    assert reply.headers["Content-Type"] == "application/xml"
    assert reply.headers["x-ms-request-id"]
    root = ET.fromstring(reply.content)
    fields = {child.tag: child.text or "" for child in root}
    assert root.tag == "Error" and fields["Code"] == code
    assert f"RequestId:{reply.headers['x-ms-request-id']}" in fields["Message"]
    for name, value in details.items():
        assert fields[name] == value, fields
    return fields


@pytest.fixture
def loaded(azure_server):
    """A queue holding one visible and one leased message, and what it looks like."""
    name = unique()
    client = QueueClient.from_connection_string(
        connection_string(azure_server), name, retry_total=0
    )
    client.create_queue(metadata={"m": "1"})
    client.send_message("first")
    leased = client.receive_message(visibility_timeout=3600)
    client.send_message("second")
    before = _snapshot(client)
    yield client, f"{azure_server.endpoint}/{DEV_ACCOUNT}/{name}", leased
    assert _snapshot(client) == before  # bad input changed nothing


def _snapshot(client: QueueClient):
    props = client.get_queue_properties()
    return (
        props.approximate_message_count,
        props.metadata,
        [(m.id, m.content, m.dequeue_count) for m in client.peek_messages(max_messages=32)],
    )


OUT_OF_RANGE = [
    ("GET", "/messages?numofmessages=0", "numofmessages", "0", "1", "32"),
    ("GET", "/messages?numofmessages=33", "numofmessages", "33", "1", "32"),
    ("GET", "/messages?peekonly=true&numofmessages=0", "numofmessages", "0", "1", "32"),
    ("GET", "/messages?peekonly=true&numofmessages=33", "numofmessages", "33", "1", "32"),
    ("GET", "/messages?visibilitytimeout=0", "visibilitytimeout", "0", "1", "604800"),
    ("GET", "/messages?visibilitytimeout=604801", "visibilitytimeout", "604801", "1", "604800"),
    ("POST", "/messages?visibilitytimeout=-1", "visibilitytimeout", "-1", "0", "604800"),
    ("POST", "/messages?visibilitytimeout=604801", "visibilitytimeout", "604801", "0", "604800"),
    ("POST", "/messages?messagettl=1209601", "messagettl", "1209601", "1", "1209600"),
    ("GET", "?comp=metadata&timeout=-1", "timeout", "-1", "0", "2147483647"),
]


@pytest.mark.parametrize("method, suffix, name, value, low, high", OUT_OF_RANGE)
def test_out_of_range_query_parameters(loaded, method, suffix, name, value, low, high):
    _, url, _ = loaded
    body = PUT_BODY if method == "POST" else b""
    reply = raw(method, url + suffix, body)
    assert_error(
        reply,
        400,
        "OutOfRangeQueryParameterValue",
        QueryParameterName=name,
        QueryParameterValue=value,
        MinimumAllowed=low,
        MaximumAllowed=high,
    )


def test_out_of_range_update_visibility_and_list_maxresults(loaded, azure_server):
    _, url, leased = loaded
    receipt = leased.pop_receipt
    for value in ("-1", "604801"):
        reply = raw(
            "PUT", f"{url}/messages/{leased.id}?popreceipt={receipt}&visibilitytimeout={value}"
        )
        assert_error(
            reply,
            400,
            "OutOfRangeQueryParameterValue",
            QueryParameterName="visibilitytimeout",
            MinimumAllowed="0",
            MaximumAllowed="604800",
        )
    for value in ("0", "5001"):
        reply = raw("GET", f"{azure_server.endpoint}/{DEV_ACCOUNT}?comp=list&maxresults={value}")
        assert_error(
            reply,
            400,
            "OutOfRangeQueryParameterValue",
            QueryParameterName="maxresults",
            MinimumAllowed="1",
            MaximumAllowed="5000",
        )


@pytest.mark.parametrize(
    "method, suffix, name",
    [
        ("GET", "/messages?numofmessages=abc", "numofmessages"),
        ("GET", "/messages?visibilitytimeout=1.5", "visibilitytimeout"),
        ("POST", "/messages?messagettl=99999999999999999999999", "messagettl"),
        ("GET", "/messages?numofmessages=1&numofmessages=2", "numofmessages"),
        ("GET", "/messages?peekonly=true&timeout=soon", "timeout"),
    ],
)
def test_values_that_are_not_integers(loaded, method, suffix, name):
    _, url, _ = loaded
    reply = raw(method, url + suffix, PUT_BODY if method == "POST" else b"")
    assert_error(reply, 400, "InvalidQueryParameterValue", QueryParameterName=name)


@pytest.mark.parametrize(
    "body",
    [
        b"<QueueMessage><MessageText>unclosed</QueueMessage>",
        b"not xml at all",
        b"",
        b"<Other><MessageText>x</MessageText></Other>",
        b"<QueueMessage><MessageText>x</MessageText><Extra/></QueueMessage>",
        b"<QueueMessage><MessageText><b>x</b></MessageText></QueueMessage>",
        b'<!DOCTYPE q [<!ENTITY a "aaaaaaaaaa">]><QueueMessage><MessageText>&a;</MessageText></QueueMessage>',
        b"<QueueMessage><MessageText>\xff\xfe</MessageText></QueueMessage>",
    ],
)
def test_malformed_xml(loaded, body):
    _, url, _ = loaded
    assert_error(raw("POST", f"{url}/messages", body), 400, "InvalidXmlDocument")


def test_malformed_xml_on_update_keeps_the_lease(loaded):
    _, url, leased = loaded
    reply = raw(
        "PUT",
        f"{url}/messages/{leased.id}?popreceipt={leased.pop_receipt}&visibilitytimeout=0",
        b"<QueueMessage>",
    )
    assert_error(reply, 400, "InvalidXmlDocument")


def test_bodies_over_the_limits(loaded):
    client, url, _ = loaded
    big = b"<QueueMessage><MessageText>" + b"x" * (64 * 1024 + 1) + b"</MessageText></QueueMessage>"
    assert_error(
        raw("POST", f"{url}/messages", big), 413, "RequestBodyTooLarge", MaxLimit=str(64 * 1024)
    )
    huge = b"x" * (12 * 1024 * 1024 + 1)
    assert_error(raw("POST", f"{url}/messages", huge), 413, "RequestBodyTooLarge")
    # Authentication comes first: an unsigned caller learns nothing of the limits.
    assert_error(raw("POST", f"{url}/messages", huge, signed=False), 403, "AuthenticationFailed")


@pytest.mark.parametrize(
    "headers, detail",
    [
        (
            {
                "Authorization": "SharedKey devstoreaccount1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
            },
            "signature",
        ),
        ({"Authorization": "SharedKey devstoreaccount1"}, "not 'SharedKey"),
        ({"Authorization": "Bearer abc"}, "not 'SharedKey"),
        ({"Authorization": "SharedKey otheraccount:AAAA"}, "signature"),
        ({"x-ms-date": "yesterday-ish"}, "RFC 1123"),
        ({"x-ms-date": http_date(-3600)}, "too old"),
        ({"x-ms-date": http_date(+3600)}, "too old"),
    ],
)
def test_wrong_signatures_and_bad_dates(loaded, headers, detail):
    _, url, _ = loaded
    fields = assert_error(
        raw("GET", f"{url}/messages", headers=headers), 403, "AuthenticationFailed"
    )
    assert detail in fields["AuthenticationErrorDetail"]


def test_unsigned_and_undated_requests(loaded):
    _, url, _ = loaded
    assert_error(raw("GET", f"{url}/messages", signed=False), 403, "AuthenticationFailed")
    reply = raw("GET", f"{url}/messages", headers={"x-ms-date": ""})
    assert_error(reply, 403, "AuthenticationFailed")


def test_a_signature_for_another_request_is_refused(loaded):
    _, url, _ = loaded
    signed_for_peek = raw("GET", f"{url}/messages?peekonly=true").request.headers["Authorization"]
    reply = raw("DELETE", f"{url}/messages", headers={"Authorization": signed_for_peek})
    assert_error(reply, 403, "AuthenticationFailed")


def test_the_url_account_must_be_the_signing_account(loaded, azure_server):
    _, url, _ = loaded
    other = url.replace(f"/{DEV_ACCOUNT}/", "/someoneelse/")
    assert_error(raw("GET", other + "/messages"), 403, "AuthenticationFailed")


def test_pop_receipts_missing_malformed_and_of_other_messages(loaded):
    _, url, leased = loaded
    assert_error(
        raw("DELETE", f"{url}/messages/{leased.id}"),
        400,
        "MissingRequiredQueryParameter",
        QueryParameterName="popreceipt",
    )
    assert_error(
        raw("DELETE", f"{url}/messages/{leased.id}?popreceipt=garbage"),
        400,
        "InvalidQueryParameterValue",
        QueryParameterName="popreceipt",
    )
    assert_error(
        raw("DELETE", f"{url}/messages/{'0' * 32}?popreceipt={leased.pop_receipt}"),
        400,
        "PopReceiptMismatch",
    )
    forged = "A" * 39 + "." + leased.id
    assert_error(
        raw("DELETE", f"{url}/messages/{leased.id}?popreceipt={forged}"), 400, "PopReceiptMismatch"
    )
    assert_error(
        raw("PUT", f"{url}/messages/{leased.id}?popreceipt={leased.pop_receipt}"),
        400,
        "MissingRequiredQueryParameter",
        QueryParameterName="visibilitytimeout",
    )


def test_metadata_that_azure_refuses(loaded):
    _, url, _ = loaded
    assert_error(
        raw("PUT", f"{url}?comp=metadata", headers={"x-ms-meta-1bad": "x"}), 400, "InvalidMetadata"
    )
    big = {f"x-ms-meta-k{i}": "v" * 1000 for i in range(9)}
    assert_error(raw("PUT", f"{url}?comp=metadata", headers=big), 400, "MetadataTooLarge")


def test_odd_urls_and_verbs(loaded, azure_server):
    _, url, leased = loaded
    base = f"{azure_server.endpoint}/{DEV_ACCOUNT}"
    assert_error(raw("GET", f"{url}/notmessages"), 400, "InvalidUri")
    assert_error(raw("GET", f"{url}/messages/{leased.id}/more"), 400, "InvalidUri")
    assert_error(raw("GET", f"{azure_server.endpoint}/"), 400, "InvalidUri")
    assert_error(raw("PATCH", f"{url}/messages"), 405, "UnsupportedHttpVerb")
    assert_error(raw("POST", url), 405, "UnsupportedHttpVerb")
    # OAuth's user delegation key is the one operation leaseq does not serve.
    assert_error(
        raw("POST", f"{base}?restype=service&comp=userdelegationkey"), 501, "NotImplemented"
    )
    assert_error(raw("GET", f"{base}/bad%20name/messages"), 400, "InvalidResourceName")
    assert_error(raw("GET", f"{base}/{'x' * 81}/messages"), 400, "OutOfRangeInput")
    assert_error(
        raw("GET", f"{base}?comp=list&include=everything"), 400, "InvalidQueryParameterValue"
    )
    assert_error(
        raw("GET", f"{base}?comp=list&marker=forged"),
        400,
        "InvalidQueryParameterValue",
        QueryParameterName="marker",
    )
