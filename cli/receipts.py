"""The receipts ``leaseq ack|release|extend`` act on: from the arguments, or from standard input
as plain text (white-space separated) or as the ``--json`` output of ``receive`` (so
``leaseq receive jobs --json | leaseq ack jobs`` finishes what receive started).

JSON input is one or more documents in a row; receipts are taken, in order, from each
document's ``messages`` and ``results`` lists (objects with a ``receipt``, as ``receive``,
``ack``, ``release`` and ``extend`` print them), or from a plain list of strings or such objects.
"""

from __future__ import annotations

import json
from typing import IO, Any

from .common import InputError

_INPUT_HELP = (
    "no receipts: give RECEIPT... or pipe them in, e.g. "
    "leaseq receive QUEUE --json | leaseq {command} QUEUE"
)


def receipts_from(arguments: tuple[str, ...], stdin: IO[str], command: str) -> list[str]:
    """The receipts given as arguments, else read from ``stdin`` ('-' as the only argument reads
    it too). A usage error (one line, status 2) when there are none, or stdin is a terminal nobody pipes into."""
    if arguments and arguments != ("-",):
        return list(arguments)
    if not arguments and stdin.isatty():
        raise InputError(_INPUT_HELP.format(command=command))
    receipts = parse(stdin.read())
    if not receipts:
        raise InputError(_INPUT_HELP.format(command=command))
    return receipts


def parse(text: str) -> list[str]:
    """Receipts in ``text``: JSON documents when it starts with '{' or '[', else words."""
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return text.split()
    decoder = json.JSONDecoder()
    receipts: list[str] = []
    position = 0
    while position < len(stripped):
        try:
            document, end = decoder.raw_decode(stripped, position)
        except json.JSONDecodeError as e:
            raise InputError(f"standard input is not valid JSON: {e}") from e
        receipts.extend(_from_document(document))
        position = end
        while position < len(stripped) and stripped[position].isspace():
            position += 1
    return receipts


def _from_document(document: Any) -> list[str]:
    if isinstance(document, dict):
        items = [*document.get("messages", ()), *document.get("results", ())]
    elif isinstance(document, list):
        items = document
    else:
        raise InputError("JSON input holds no receipts (expected receive --json output)")
    receipts = []
    for item in items:
        receipt = item.get("receipt") if isinstance(item, dict) else item
        if not isinstance(receipt, str) or not receipt:
            raise InputError(f"JSON input: {json.dumps(item)[:80]} has no receipt")
        receipts.append(receipt)
    return receipts
