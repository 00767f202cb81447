"""Typed SQS message attributes <-> leaseq's string attributes.

SQS attributes have a DataType (String, Number or Binary, each with an optional ".custom"
suffix); leaseq's are strings. Stored form, chosen so that gRPC consumers read the values as they
are and SQS consumers get back exactly what was sent (same DataType, same value, so the same
MD5OfMessageAttributes):

- each attribute under its own name: String and Number types as their text, Binary types as
  standard base64;
- one extra attribute `sqs:types` (':' cannot occur in an SQS attribute name, so it never
  collides) holding a JSON object {name: DataType} for every attribute whose type is not plain
  "String"; absent when all are plain strings.

Names starting with `sqs:` are reserved to this dialect: the core refuses them from every other
front end (domain.rules.RESERVED_ATTRIBUTE_PREFIXES), so a message sent over gRPC or the console
reaches SQS consumers with every attribute as a String. A `sqs:types` stored before that rule
is read defensively: one that is not a small flat object of valid DataTypes is ignored (the
message is delivered with String attributes), so no stored message can fail a receive.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from .errors import INVALID_PARAMETER_VALUE, SqsError, invalid_value

RESERVED_PREFIX = "sqs:"  # domain.rules.RESERVED_ATTRIBUTE_PREFIXES: only this dialect writes it
TYPES_KEY = RESERVED_PREFIX + "types"
# Above what to_leaseq writes: MAX_ATTRIBUTES names and types of 256 characters, \u-escaped.
_MAX_TYPES_TEXT = 32_768
MAX_ATTRIBUTES = 10  # SQS's limit per message
MAX_NAME = 256

_NAME = re.compile(r"[A-Za-z0-9_\-.]{1,256}")
_DATA_TYPE = re.compile(r"(String|Number|Binary)(\.[^\x00-\x1f]{1,250})?")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
# The characters SQS accepts in a body or a string value (XML 1.0's Char production).
_INVALID_CHARS = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True)
class AttributeValue:
    data_type: str
    string: str | None = None
    binary: bytes | None = None

    def to_wire(self) -> dict[str, Any]:
        """The JSON-protocol shape (binary as base64 text)."""
        if self.binary is not None:
            return {
                "DataType": self.data_type,
                "BinaryValue": base64.b64encode(self.binary).decode(),
            }
        return {"DataType": self.data_type, "StringValue": self.string or ""}


def has_invalid_characters(text: str) -> bool:
    return _INVALID_CHARS.search(text) is not None


def xml_safe(text: str) -> str:
    """text with every character XML 1.0 cannot carry (not even as a character reference:
    U+0000..U+001F but tab, LF, CR; U+FFFE, U+FFFF; lone surrogates) as U+FFFD. SQS refuses
    them at send; a message that came by another front end may hold them."""
    return _INVALID_CHARS.sub("\ufffd", text) if _INVALID_CHARS.search(text) else text


def xml_safe_attributes(attributes: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
    """The attributes as a query-protocol answer carries them (xml_safe names, types, text)."""
    return {
        xml_safe(name): AttributeValue(
            xml_safe(value.data_type),
            string=xml_safe(value.string) if value.string is not None else None,
            binary=value.binary,
        )
        for name, value in attributes.items()
    }


def check_name(name: object, parameter: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise invalid_value(
            parameter, name, "Message attribute names are 1-256 of A-Z a-z 0-9 _ - ."
        )
    lowered = name.lower()
    if (
        lowered.startswith(("aws.", "amazon."))
        or name.startswith(".")
        or name.endswith(".")
        or ".." in name
    ):
        raise invalid_value(
            parameter,
            name,
            "Message attribute names must not start with AWS. or Amazon., start or end with "
            "a period, or hold two periods in a row.",
        )
    return name


def parse(raw: object, parameter: str = "MessageAttributes") -> dict[str, AttributeValue]:
    """The request's MessageAttributes (the JSON shape; the query protocol is converted to it)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise invalid_value(
            parameter, "(not a map)", "MessageAttributes is a map of name to value."
        )
    if len(raw) > MAX_ATTRIBUTES:
        raise SqsError(
            INVALID_PARAMETER_VALUE,
            f"Number of message attributes [{len(raw)}] exceeds the allowed maximum "
            f"[{MAX_ATTRIBUTES}].",
        )
    parsed: dict[str, AttributeValue] = {}
    for name, value in raw.items():
        check_name(name, f"{parameter}.{name}")
        if not isinstance(value, dict):
            raise invalid_value(
                f"{parameter}.{name}", "(not a structure)", "a value needs a DataType."
            )
        data_type = value.get("DataType")
        if not isinstance(data_type, str) or not data_type:
            raise SqsError(
                INVALID_PARAMETER_VALUE,
                f"The message attribute '{name}' must contain non-empty message attribute type.",
            )
        if not _DATA_TYPE.fullmatch(data_type):
            raise SqsError(
                INVALID_PARAMETER_VALUE,
                f"The type of message (user) attribute '{name}' is invalid. You must use only "
                "the following supported type prefixes: Binary, Number, String.",
            )
        if value.get("StringListValues") or value.get("BinaryListValues"):
            raise SqsError(
                INVALID_PARAMETER_VALUE,
                f"Message attribute '{name}': list values are reserved by SQS and not supported.",
            )
        base_type = data_type.split(".", 1)[0]
        if base_type == "Binary":
            encoded = value.get("BinaryValue")
            if not isinstance(encoded, str) or not encoded:
                raise SqsError(
                    INVALID_PARAMETER_VALUE,
                    f"The message attribute '{name}' with type 'Binary' must use field 'Binary'.",
                )
            try:
                data = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise invalid_value(
                    f"{parameter}.{name}.BinaryValue", "(not base64)", "not valid base64."
                ) from None
            parsed[name] = AttributeValue(data_type, binary=data)
            continue
        text = value.get("StringValue")
        if not isinstance(text, str) or not text:
            raise SqsError(
                INVALID_PARAMETER_VALUE,
                f"The message attribute '{name}' must contain non-empty message attribute value "
                f"for message attribute type '{base_type}'.",
            )
        if has_invalid_characters(text):
            raise SqsError(
                INVALID_PARAMETER_VALUE,
                f"The message attribute '{name}' contains characters outside the allowed set.",
            )
        if base_type == "Number" and not _NUMBER.fullmatch(text):
            raise SqsError(
                INVALID_PARAMETER_VALUE,
                f"Can't cast the value of message (user) attribute '{name}' to a number.",
            )
        parsed[name] = AttributeValue(data_type, string=text)
    return parsed


def to_leaseq(attributes: dict[str, AttributeValue]) -> dict[str, str]:
    """The stored form (module docstring)."""
    stored: dict[str, str] = {}
    types: dict[str, str] = {}
    for name, value in attributes.items():
        if value.binary is not None:
            stored[name] = base64.b64encode(value.binary).decode("ascii")
        else:
            stored[name] = value.string or ""
        if value.data_type != "String":
            types[name] = value.data_type
    if types:
        stored[TYPES_KEY] = json.dumps(types, separators=(",", ":"), sort_keys=True)
    return stored


def _stored_types(raw: str | None) -> dict[str, str]:
    """The {name: DataType} of a stored `sqs:types`; {} for anything this dialect would not
    have written (module docstring): never an exception, whatever the text."""
    if not raw or len(raw) > _MAX_TYPES_TEXT or not raw.startswith("{"):
        return {}
    try:
        loaded = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(loaded, dict) or not all(
        isinstance(v, str) and _DATA_TYPE.fullmatch(v) for v in loaded.values()
    ):
        return {}
    return loaded


def from_leaseq(stored: dict[str, str]) -> dict[str, AttributeValue]:
    """The SQS attributes of a stored message (module docstring); a value that does not fit its
    recorded type is given back as a String. Attributes under the reserved prefix are not
    shown."""
    if not stored:
        return {}
    types = _stored_types(stored.get(TYPES_KEY))
    result: dict[str, AttributeValue] = {}
    for name, text in stored.items():
        if name.startswith(RESERVED_PREFIX):
            continue
        data_type = types.get(name, "String")
        if data_type.startswith("Binary"):
            try:
                result[name] = AttributeValue(
                    data_type, binary=base64.b64decode(text, validate=True)
                )
                continue
            except (binascii.Error, ValueError):
                data_type = "String"
        elif data_type.startswith("Number") and not _NUMBER.fullmatch(text):
            data_type = "String"
        result[name] = AttributeValue(data_type, string=text)
    return result


def select(attributes: dict[str, AttributeValue], names: list[str]) -> dict[str, AttributeValue]:
    """ReceiveMessage's MessageAttributeNames: "All" or ".*", exact names, and prefixes "x.*"."""
    if not names or not attributes:
        return {}
    if "All" in names or ".*" in names:
        return attributes
    exact = {n for n in names if not n.endswith(".*")}
    prefixes = tuple(n[:-1] for n in names if n.endswith(".*"))  # keeps the '.'
    return {
        name: value
        for name, value in attributes.items()
        if name in exact or (prefixes and name.startswith(prefixes))
    }
