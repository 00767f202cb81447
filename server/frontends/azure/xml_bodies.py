"""The XML bodies of Azure's Queue REST reference: what Put Message and Update Message send, and
what List Queues, Put/Get/Peek Messages and errors answer.

Answers are written with `saxutils.escape` (element order and names exactly as the reference
gives them; ElementTree's writer would not escape a carriage return, which an XML parser then
reads back as a line feed). Requests are untrusted XML, read with defusedxml (expat, refusing
any document type declaration as the parser meets it, whatever the document's encoding: Azure's
bodies have none, and without a DTD there is no entity to expand); an encoding expat cannot
read (EBCDIC, UTF-7, a made-up name) is an invalid document too."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from xml.sax.saxutils import escape, quoteattr

import defusedxml
import defusedxml.ElementTree

from ...domain import rules
from ...domain.types import DeliveredMessage, PeekedMessage
from .errors import INVALID_XML, AzureError
from .times import rfc1123

DECLARATION = '<?xml version="1.0" encoding="utf-8"?>'
_ENTITIES = {"\r": "&#13;", '"': "&quot;", "'": "&apos;"}
# Characters XML 1.0 cannot carry at all (not even as references): a body sent through another
# dialect may hold them; Azure clients see U+FFFD in their place.
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def text(value: str) -> str:
    return escape(_NOT_XML.sub("\ufffd", value), _ENTITIES)


def element(name: str, value: object) -> str:
    return f"<{name}>{text(str(value))}</{name}>"


def document(body: str) -> bytes:
    return (DECLARATION + body).encode("utf-8")


# --- requests -----------------------------------------------------------------------------------


def invalid_xml(reason: str) -> AzureError:
    return AzureError(INVALID_XML, "XML specified is not syntactically valid.", {"Reason": reason})


def parse(body: bytes) -> ET.Element:
    """The root of an untrusted request document (module docstring); InvalidXmlDocument when
    it is not one."""
    try:
        root: ET.Element = defusedxml.ElementTree.fromstring(body, forbid_dtd=True)
    except defusedxml.DefusedXmlException:
        raise invalid_xml("XML document type declarations are not accepted") from None
    except ET.ParseError as error:
        raise invalid_xml(str(error)) from None
    except (LookupError, ValueError) as error:  # an encoding expat cannot read
        raise invalid_xml(f"its encoding: {str(error)[:100]}") from None
    return root


def parse_message_text(body: bytes) -> str:
    """MessageText of `<QueueMessage><MessageText>...</MessageText></QueueMessage>`."""
    root = parse(body)
    children = list(root)
    if root.tag != "QueueMessage" or [c.tag for c in children] != ["MessageText"]:
        raise invalid_xml(
            "The XML must be <QueueMessage><MessageText>...</MessageText></QueueMessage>"
        )
    if len(children[0]):
        raise invalid_xml("MessageText holds text, not elements")
    return children[0].text or ""


# --- answers ------------------------------------------------------------------------------------


NEVER = "Fri, 31 Dec 9999 23:59:59 GMT"  # Azure's ExpirationTime of a message that never expires


def azure_message_id(message_id: str) -> str:
    """leaseq's 32 hex digits as Azure writes a message id, a GUID (8-4-4-4-12), as SQS shows
    them too; routing.py reads either form back."""
    if len(message_id) != 32:
        return message_id
    m = message_id
    return f"{m[:8]}-{m[8:12]}-{m[12:16]}-{m[16:20]}-{m[20:]}"


def expiration(enqueued_at: float, expires_at: float) -> str:
    return NEVER if rules.never_expires(enqueued_at, expires_at) else rfc1123(expires_at)


def sent_message(
    message_id: str, inserted: float, expires: float, pop_receipt: str, visible: float
) -> bytes:
    return document(
        "<QueueMessagesList><QueueMessage>"
        + element("MessageId", azure_message_id(message_id))
        + element("InsertionTime", rfc1123(inserted))
        + element("ExpirationTime", expiration(inserted, expires))
        + element("PopReceipt", pop_receipt)
        + element("TimeNextVisible", rfc1123(visible))
        + "</QueueMessage></QueueMessagesList>"
    )


def _message(message: DeliveredMessage | PeekedMessage, pop_receipt: str | None) -> list[str]:
    """One <QueueMessage> of Get Messages (with its pop receipt) or Peek Messages (without)."""
    parts = [
        "<QueueMessage>",
        element("MessageId", azure_message_id(message.message_id)),
        element("InsertionTime", rfc1123(message.enqueued_at)),
        element("ExpirationTime", expiration(message.enqueued_at, message.expires_at)),
    ]
    if pop_receipt is not None:
        parts += [
            element("PopReceipt", pop_receipt),
            element("TimeNextVisible", rfc1123(message.visible_at)),
        ]
    return parts + [
        element("DequeueCount", message.delivery_count),
        element("MessageText", message.body.decode("utf-8", "replace")),
        "</QueueMessage>",
    ]


def received_messages(messages: Iterable[tuple[DeliveredMessage, str]]) -> bytes:
    """Get Messages: each delivered message with its Azure pop receipt."""
    rows = [part for message, pop_receipt in messages for part in _message(message, pop_receipt)]
    return document("<QueueMessagesList>" + "".join(rows) + "</QueueMessagesList>")


def peeked_messages(messages: Iterable[PeekedMessage]) -> bytes:
    rows = [part for message in messages for part in _message(message, None)]
    return document("<QueueMessagesList>" + "".join(rows) + "</QueueMessagesList>")


def queue_list(
    service_endpoint: str,
    queues: Iterable[tuple[str, Mapping[str, str] | None]],
    *,
    prefix: str | None,
    marker: str | None,
    max_results: int | None,
    next_marker: str,
) -> bytes:
    """List Queues; a queue's metadata is None unless include=metadata."""
    parts = [f"<EnumerationResults ServiceEndpoint={quoteattr(service_endpoint)}>"]
    if prefix is not None:
        parts.append(element("Prefix", prefix))
    if marker is not None:
        parts.append(element("Marker", marker))
    if max_results is not None:
        parts.append(element("MaxResults", max_results))
    parts.append("<Queues>")
    for name, metadata in queues:
        parts += ["<Queue>", element("Name", name)]
        if metadata is not None:
            parts.append("<Metadata>")
            parts += [element(key, value) for key, value in metadata.items()]
            parts.append("</Metadata>")
        parts.append("</Queue>")
    parts.append("</Queues>")
    parts.append(element("NextMarker", next_marker) if next_marker else "<NextMarker />")
    parts.append("</EnumerationResults>")
    return document("".join(parts))


def error(code: str, message: str, details: Mapping[str, str]) -> bytes:
    return document(
        "<Error>"
        + element("Code", code)
        + element("Message", message)
        + "".join(element(name, value) for name, value in details.items())
        + "</Error>"
    )
