"""The Azure endpoint against hostile clients, over a real `leaseq serve --azure-listen` (SQLite
and PostgreSQL): bodies whose Content-Encoding does not decode, header bytes that are not UTF-8,
XML in encodings expat cannot read or with a DTD (whatever its encoding: no entity expansion),
a Content-MD5 that does not match, and a pop receipt sent with another message's id. Each is a
4xx Azure <Error>, nothing changes, and no request is a server fault (the fixture checks the log
for it at the end)."""

from __future__ import annotations

import base64
import hashlib
import http.client

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueClient

from tests.support.http_frontend import FrontendServer

from .conftest import DEV_ACCOUNT, http_date, raw
from .test_bad_input import assert_error

MESSAGE = "<QueueMessage><MessageText>{}</MessageText></QueueMessage>"


def url_of(server: FrontendServer, queue: QueueClient) -> str:
    return f"{server.endpoint}/{DEV_ACCOUNT}/{queue.queue_name}"


def count(queue: QueueClient) -> int:
    return queue.get_queue_properties().approximate_message_count


def md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()


# --- item: bodies and headers that do not decode ------------------------------------------------


@pytest.mark.parametrize(
    "encoding, garbage", [("gzip", b"not gzip at all"), ("deflate", b"\xff" * 64)]
)
def test_a_body_that_does_not_decode_is_invalid_input(azure_server, queue, encoding, garbage):
    reply = raw(
        "POST", url_of(azure_server, queue) + "/messages", garbage, {"Content-Encoding": encoding}
    )
    assert_error(reply, 400, "InvalidInput")
    assert reply.headers.get("Connection", "").lower() == "close"
    assert count(queue) == 0
    queue.send_message("after")  # the server goes on serving
    assert count(queue) == 1


def test_header_bytes_that_are_not_utf8_are_invalid_header_value(azure_server, queue):
    for header in ("x-ms-meta-name", "x-ms-date", "Content-Type", "x-ms-client-request-id"):
        connection = http.client.HTTPConnection("127.0.0.1", azure_server.port, timeout=30)
        try:
            connection.putrequest("PUT", f"/{DEV_ACCOUNT}/{queue.queue_name}?comp=metadata")
            connection.putheader(header, b"caf\xe9 \xff\xfe")  # Latin-1, then no encoding at all
            if header != "x-ms-date":  # a fresh date: the signature is what is checked next
                connection.putheader("x-ms-date", http_date())
            connection.putheader("Authorization", f"SharedKey {DEV_ACCOUNT}:c2lnbmF0dXJl")
            connection.putheader("Content-Length", "0")
            connection.endheaders()
            reply = connection.getresponse()
            body = reply.read()
        finally:
            connection.close()
        assert reply.status == 400, body
        assert reply.getheader("x-ms-error-code") == "InvalidHeaderValue"
        assert b"<Code>InvalidHeaderValue</Code>" in body and b"<HeaderName>" in body
    assert queue.get_queue_properties().metadata == {}


# --- XML: encodings and DTDs ---------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["ebcdic", "utf-7", "cp500", "no-such-encoding"])
def test_xml_in_an_encoding_expat_cannot_read_is_invalid(azure_server, queue, encoding):
    body = f"<?xml version='1.0' encoding='{encoding}'?>{MESSAGE.format('x')}".encode()
    assert_error(
        raw("POST", url_of(azure_server, queue) + "/messages", body), 400, "InvalidXmlDocument"
    )
    assert count(queue) == 0


LAUGHS = (
    '<!DOCTYPE QueueMessage [<!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">'
    '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">'
    '<!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]>' + MESSAGE.format("&d;")
)


@pytest.mark.parametrize(
    "declared, codec",
    [
        ("utf-8", "utf-8"),
        ("utf-16", "utf-16"),  # with a byte order mark
        ("utf-16", "utf-16-le"),
        ("utf-16", "utf-16-be"),
        ("iso-8859-1", "latin-1"),
    ],
)
def test_a_dtd_is_refused_whatever_the_encoding(azure_server, queue, declared, codec):
    body = (f'<?xml version="1.0" encoding="{declared}"?>' + LAUGHS).encode(codec)
    if codec.startswith("utf-16-"):
        body = ("\ufeff" + f'<?xml version="1.0" encoding="{declared}"?>' + LAUGHS).encode(codec)
    reply = raw("POST", url_of(azure_server, queue) + "/messages", body)
    assert_error(reply, 400, "InvalidXmlDocument")
    assert count(queue) == 0
    # Update Message reads the same XML.
    queue.send_message("kept")
    got = queue.receive_message(visibility_timeout=60)
    reply = raw(
        "PUT",
        url_of(azure_server, queue)
        + f"/messages/{got.id}?popreceipt={got.pop_receipt}&visibilitytimeout=0",
        body,
    )
    assert_error(reply, 400, "InvalidXmlDocument")
    assert count(queue) == 1 and queue.peek_messages() == []  # unchanged, still leased


def test_xml_without_a_dtd_is_read_in_utf16_too(azure_server, queue):
    text = "h\u00e9llo \U0001f600"
    body = ('<?xml version="1.0" encoding="utf-16"?>' + MESSAGE.format(text)).encode("utf-16")
    reply = raw("POST", url_of(azure_server, queue) + "/messages", body)
    assert reply.status_code == 201, reply.text
    assert [m.content for m in queue.peek_messages()] == [text]


# --- Content-MD5 ---------------------------------------------------------------------------------


def test_the_sdk_content_md5_is_checked(azure_server, queue):
    queue.send_message("checked", validate_content=True)  # the SDK sends Content-MD5

    def tamper(request) -> None:  # after the SDK computed the MD5 of the original body
        request.http_request.data = request.http_request.data.replace(b"original", b"tampered")

    with pytest.raises(HttpResponseError) as caught:
        queue.send_message("original", validate_content=True, raw_request_hook=tamper)
    assert caught.value.status_code == 400 and caught.value.error_code == "Md5Mismatch"
    assert [m.content for m in queue.peek_messages(max_messages=32)] == ["checked"]


def test_a_content_md5_that_does_not_match_is_md5_mismatch(azure_server, queue):
    url = url_of(azure_server, queue)
    body = MESSAGE.format("sent").encode()
    fields = assert_error(
        raw("POST", url + "/messages", body, {"Content-MD5": md5(b"another body")}),
        400,
        "Md5Mismatch",
    )
    assert fields["UserSpecifiedMd5"] == md5(b"another body") and fields[
        "ServerCalculatedMd5"
    ] == md5(body)
    for bad in ("!!!", base64.b64encode(b"short").decode(), "AAAA" * 8):
        assert_error(raw("POST", url + "/messages", body, {"Content-MD5": bad}), 400, "InvalidMd5")
    assert count(queue) == 0
    reply = raw("POST", url + "/messages", body, {"Content-MD5": md5(body)})
    assert reply.status_code == 201
    # Update Message too: the message keeps its text and its lease.
    got = queue.receive_message(visibility_timeout=60)
    update = MESSAGE.format("changed").encode()
    target = f"{url}/messages/{got.id}?popreceipt={got.pop_receipt}&visibilitytimeout=0"
    assert_error(raw("PUT", target, update, {"Content-MD5": md5(body)}), 400, "Md5Mismatch")
    assert queue.peek_messages() == []  # still leased: the update did not run
    assert raw("PUT", target, update, {"Content-MD5": md5(update)}).status_code == 204
    assert [m.content for m in queue.peek_messages()] == ["changed"]


# --- a pop receipt names its own message only ----------------------------------------------------


def test_a_pop_receipt_acts_only_on_the_message_it_was_issued_for(azure_server, queue):
    queue.send_message("a")
    queue.send_message("b")
    a, b = queue.receive_messages(messages_per_page=2, max_messages=2, visibility_timeout=600)
    receipt_of_a = a.pop_receipt.rpartition(".")[0]  # the leaseq receipt inside it
    for forged in (
        a.pop_receipt,
        f"{receipt_of_a}.{b.id}",
        f"{receipt_of_a}.{b.pop_receipt.rpartition('.')[2]}",
    ):
        with pytest.raises(HttpResponseError) as caught:
            queue.delete_message(b.id, forged)
        assert caught.value.status_code == 400 and caught.value.error_code == "PopReceiptMismatch"
        with pytest.raises(HttpResponseError) as caught:
            queue.update_message(b.id, forged, content="forged", visibility_timeout=0)
        assert caught.value.status_code == 400 and caught.value.error_code == "PopReceiptMismatch"
    assert count(queue) == 2 and queue.peek_messages() == []  # both still there, still leased
    queue.update_message(a.id, a.pop_receipt, content="a2", visibility_timeout=600)
    queue.delete_message(b.id, b.pop_receipt)
    assert count(queue) == 1
