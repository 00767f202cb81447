"""Reading an OCI request's inputs: query integers in OCI's ranges, the JSON body and its fields,
each failure an InvalidParameter (400) that names the parameter, as OCI's messages do."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .errors import MISSING_PARAMETER, OciError, invalid


def query_int(query: Mapping[str, str], name: str, minimum: int, maximum: int) -> int | None:
    text = query.get(name)
    if text is None:
        return None
    if not (text.isascii() and text.lstrip("-").isdigit()) or len(text) > 20:
        raise invalid(f"{name} must be an integer, not {text[:40]!r}.")
    value = int(text)
    if not minimum <= value <= maximum:
        raise invalid(f"{name} must be between {minimum} and {maximum}, not {value}.")
    return value


def json_object(body: bytes) -> dict[str, Any]:
    if not body:
        raise OciError(MISSING_PARAMETER, "The request needs a JSON body.")
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise invalid(f"The body is not valid JSON: {str(error)[:100]}") from None
    if not isinstance(value, dict):
        raise invalid("The body must be a JSON object.")
    return value


def integer(
    data: Mapping[str, Any], name: str, minimum: int, maximum: int, where: str = ""
) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{where}{name} must be an integer.")
    if not minimum <= value <= maximum:
        raise invalid(f"{where}{name} must be between {minimum} and {maximum}, not {value}.")
    return value


def text(data: Mapping[str, Any], name: str, max_chars: int, where: str = "") -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(f"{where}{name} must be a string.")
    if len(value) > max_chars:
        raise invalid(f"{where}{name} is longer than {max_chars} characters.")
    return value


def required(value: Any, name: str) -> Any:
    if value is None:
        raise OciError(MISSING_PARAMETER, f"{name} is required.")
    return value


def entries(data: Mapping[str, Any], name: str, maximum: int) -> list[dict[str, Any]]:
    value = data.get(name)
    if not isinstance(value, list) or not value:
        raise OciError(MISSING_PARAMETER, f"{name} is required: a list of 1 to {maximum} objects.")
    if len(value) > maximum:
        raise OciError(
            invalid("").kind, f"{name} holds at most {maximum} entries, not {len(value)}."
        )
    if not all(isinstance(entry, dict) for entry in value):
        raise invalid(f"Each of {name} must be a JSON object.")
    return value


def string_map(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise invalid(f"{name} must be an object of strings.")
    return value
