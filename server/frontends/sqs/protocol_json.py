"""The AWS JSON 1.0 protocol: `POST /` with `X-Amz-Target: AmazonSQS.<Action>` and a JSON object
body; answers `application/x-amz-json-1.0`. Errors: `{"__type": "com.amazonaws.sqs#<Shape>",
"message": ...}` plus `x-amzn-query-error: <query code>;Sender|Receiver` (errors.py)."""

from __future__ import annotations

import json
from typing import Any

from .errors import MALFORMED_JSON, SqsError

CONTENT_TYPE = "application/x-amz-json-1.0"
TARGET_PREFIX = "AmazonSQS."


def action_of(target: str) -> str:
    return target[len(TARGET_PREFIX) :] if target.startswith(TARGET_PREFIX) else ""


def parse(body: bytes) -> dict[str, Any]:
    """The request's parameters; an empty body means none."""
    if not body.strip():
        return {}
    try:
        params = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise SqsError(MALFORMED_JSON, "The request body is not valid UTF-8.") from None
    except (ValueError, RecursionError):
        raise SqsError(MALFORMED_JSON, "The request body is not valid JSON.") from None
    if not isinstance(params, dict):
        raise SqsError(MALFORMED_JSON, "The request body must be a JSON object.")
    return params


def render(result: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    # ASCII with \u escapes: nothing a client sent (a lone surrogate in a JSON string) can make
    # the answer fail to encode.
    return json.dumps(result).encode("ascii"), {"Content-Type": CONTENT_TYPE}


def render_error(error: SqsError) -> tuple[bytes, dict[str, str]]:
    kind = error.kind
    body = json.dumps({"__type": f"{kind.namespace}#{kind.shape}", "message": error.message})
    headers = {
        "Content-Type": CONTENT_TYPE,
        "x-amzn-query-error": f"{kind.code};{'Sender' if kind.sender else 'Receiver'}",
    }
    return body.encode("utf-8"), headers
