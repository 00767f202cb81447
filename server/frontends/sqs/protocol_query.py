"""The query protocol of older SDKs: `Action=<Action>&...` form-encoded in a POST body (or the
query string of a GET), answers in XML.

Form parameters are converted to the JSON protocol's shape, so the actions see one shape:

    Attribute.1.Name=X & Attribute.1.Value=Y         -> Attributes {X: Y}
    AttributeName.1=All                              -> AttributeNames [All]
    MessageAttributeName.N, MessageSystemAttributeName.N  -> ...Names lists
    MessageAttribute.1.Name=n & MessageAttribute.1.Value.DataType=String & ...StringValue=v
                                                     -> MessageAttributes {n: {DataType, StringValue}}
    SendMessageBatchRequestEntry.1.Id=... (and the Delete/ChangeMessageVisibility ones)
                                                     -> Entries [{Id, ...}]
    Tag.N.Key/Value                                  -> tags (CreateQueue, TagQueue)
    TagKey.N, AWSAccountId.N, ActionName.N           -> TagKeys, AWSAccountIds, Actions

The queue may also be named by the request path (`POST /<account>/<queue>`), as the query API
allows. Answers: `<ActionResponse><ActionResult>...</ActionResult><ResponseMetadata>`, lists
flattened (`<QueueUrl>` repeated, `<Message>`, `<Attribute><Name/><Value/></Attribute>`, ...).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from .errors import MALFORMED_QUERY, SqsError
from .message_attributes import xml_safe

CONTENT_TYPE = "text/xml"
NAMESPACE = "http://queue.amazonaws.com/doc/2012-11-05/"
MAX_PARAMETERS = 1000  # form fields of one request: far above any valid request
# Dotted segments of one parameter name: the deepest valid one has 6
# (SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue).
MAX_NAME_SEGMENTS = 10

_LISTS = {
    "AttributeName": "AttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "SendMessageBatchRequestEntry": "Entries",
    "DeleteMessageBatchRequestEntry": "Entries",
    "ChangeMessageVisibilityBatchRequestEntry": "Entries",
    "TagKey": "TagKeys",
    "AWSAccountId": "AWSAccountIds",
    "ActionName": "Actions",
}
_NAMESPACES = {"GetCallerIdentity": "https://sts.amazonaws.com/doc/2011-06-15/"}
_ENTRY_NAMES = {
    "Successful": {
        "SendMessageBatch": "SendMessageBatchResultEntry",
        "DeleteMessageBatch": "DeleteMessageBatchResultEntry",
        "ChangeMessageVisibilityBatch": "ChangeMessageVisibilityBatchResultEntry",
    },
}
_FLATTENED = {
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",
    "Messages": "Message",
    "Failed": "BatchResultErrorEntry",
    "Results": "ListMessageMoveTasksResultEntry",
}


def _malformed(reason: str) -> SqsError:
    return SqsError(MALFORMED_QUERY, f"The query string is malformed: {reason}")


def parse_form(text: str) -> list[tuple[str, str]]:
    try:
        pairs = parse_qsl(
            text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=MAX_PARAMETERS
        )
    except ValueError as error:
        raise _malformed(str(error)) from None
    return pairs


def decode(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed("not valid UTF-8") from None


def _tree(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Dotted keys as nested dicts; numbered segments become lists (in number order)."""
    root: dict[str, Any] = {}
    for key, value in pairs:
        node = root
        parts = key.split(".", MAX_NAME_SEGMENTS)
        if len(parts) > MAX_NAME_SEGMENTS:
            raise _malformed(f"parameter {key[:100]} has more than {MAX_NAME_SEGMENTS} parts")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise _malformed(f"parameter {key[:100]} conflicts with another")
            node = child
        if parts[-1] in node:
            # Given twice, or both as a value and as a prefix: which one was meant is unknown.
            raise _malformed(f"parameter {key[:100]} is repeated or conflicts with another")
        node[parts[-1]] = value
    tree = _lists(root)
    if not isinstance(tree, dict):  # every name a number: a list, no named parameters
        raise _malformed("the parameter names are numbers")
    return tree


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    converted = {k: _lists(v) for k, v in node.items()}
    if converted and all(k.isdigit() for k in converted):
        return [converted[k] for k in sorted(converted, key=int)]
    return converted


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _name_value_map(items: Any, value_key: str = "Value") -> dict[str, Any]:
    result: dict[str, Any] = {}
    for item in _as_list(items):
        if not isinstance(item, dict) or not isinstance(item.get("Name"), str):
            raise _malformed("an attribute needs a Name (one value)")
        result[item["Name"]] = item.get(value_key, "")
    return result


def _shape(params: dict[str, Any]) -> dict[str, Any]:
    shaped: dict[str, Any] = {}
    for key, value in params.items():
        if key == "Attribute":
            shaped["Attributes"] = _name_value_map(value)
        elif key == "MessageAttribute":
            shaped["MessageAttributes"] = _name_value_map(value)
        elif key == "MessageSystemAttribute":
            shaped["MessageSystemAttributes"] = _name_value_map(value)
        elif key == "Tag":
            shaped["tags"] = {
                t["Key"]: t.get("Value", "")
                for t in _as_list(value)
                if isinstance(t, dict) and isinstance(t.get("Key"), str)
            }
        elif key in _LISTS:
            items = _as_list(value)
            if _LISTS[key] == "Entries":
                items = [_shape(i) if isinstance(i, dict) else i for i in items]
            shaped[_LISTS[key]] = items
        else:
            shaped[key] = value
    return shaped


def parse(pairs: list[tuple[str, str]], path: str, base_url: str) -> tuple[str, dict[str, Any]]:
    """(action, parameters in the JSON shape)."""
    tree = _tree(pairs)
    action = tree.pop("Action", "")
    if not isinstance(action, str):
        raise _malformed("Action is a single value")
    tree.pop("Version", None)
    params = _shape(tree)
    segments = [s for s in path.split("/") if s]
    if "QueueUrl" not in params and len(segments) == 2:
        params["QueueUrl"] = f"{base_url}/{segments[0]}/{segments[1]}"
    return action, params


# --- answers -----------------------------------------------------------------------------------


def _text(value: Any) -> str:
    """Element text: escaped, and xml_safe so that no text (a message that came by another
    front end, a client's value echoed in an error) makes the answer ill-formed."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape(xml_safe(str(value)))


def _element(name: str, value: Any, action: str) -> str:
    if isinstance(value, dict):
        return f"<{name}>{_members(value, action)}</{name}>"
    return f"<{name}>{_text(value)}</{name}>"


def _members(result: dict[str, Any], action: str) -> str:
    out: list[str] = []
    for key, value in result.items():
        if key == "Attributes":
            out += [
                f"<Attribute><Name>{_text(k)}</Name><Value>{_text(v)}</Value></Attribute>"
                for k, v in value.items()
            ]
        elif key == "MessageAttributes":
            out += [
                f"<MessageAttribute><Name>{_text(k)}</Name>{_element('Value', v, action)}</MessageAttribute>"
                for k, v in value.items()
            ]
        elif key == "Tags":
            out += [
                f"<Tag><Key>{_text(k)}</Key><Value>{_text(v)}</Value></Tag>"
                for k, v in value.items()
            ]
        elif key in _ENTRY_NAMES:
            element = _ENTRY_NAMES[key].get(action, key)
            out += [_element(element, item, action) for item in value]
        elif key in _FLATTENED:
            out += [_element(_FLATTENED[key], item, action) for item in value]
        else:
            out.append(_element(key, value, action))
    return "".join(out)


def render(action: str, result: dict[str, Any], request_id: str) -> tuple[bytes, dict[str, str]]:
    inner = f"<{action}Result>{_members(result, action)}</{action}Result>" if result else ""
    namespace = _NAMESPACES.get(action, NAMESPACE)
    xml = (
        f'<?xml version="1.0"?><{action}Response xmlns="{namespace}">{inner}'
        f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    )
    return xml.encode("utf-8", "replace"), {"Content-Type": CONTENT_TYPE}


def render_error(error: SqsError, request_id: str) -> tuple[bytes, dict[str, str]]:
    kind = error.kind
    xml = (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{NAMESPACE}"><Error>'
        f"<Type>{'Sender' if kind.sender else 'Receiver'}</Type><Code>{_text(kind.code)}</Code>"
        f"<Message>{_text(error.message)}</Message><Detail/></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return xml.encode("utf-8", "replace"), {"Content-Type": CONTENT_TYPE}
