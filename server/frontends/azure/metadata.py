"""Queue metadata: the x-ms-meta-<name> headers of Create Queue and Set Queue Metadata.

The store keeps a queue's metadata (Store.queue_metadata / set_queue_metadata): it survives
restarts, every replica sees the same, and it is deleted with its queue, so a queue deleted and
created again (by any dialect) starts without."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .errors import INVALID_METADATA, METADATA_TOO_LARGE, AzureError

PREFIX = "x-ms-meta-"
MAX_BYTES = 8 * 1024  # names plus values (Azure's limit)
_INVALID = "The metadata specified is invalid. It has characters that are not permitted."
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")  # a C# identifier, as Azure requires


def from_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The metadata a request sets; InvalidMetadata / MetadataTooLarge (400) when Azure would
    refuse it."""
    metadata: dict[str, str] = {}
    size = 0
    for header, value in headers.items():
        if not header.lower().startswith(PREFIX):
            continue
        name = header[len(PREFIX) :]
        if not _NAME.fullmatch(name):
            raise AzureError(
                INVALID_METADATA,
                _INVALID,
                {"Reason": f"The name {name[:100]!r} is not a C# identifier."},
            )
        if any(known.lower() == name.lower() for known in metadata):
            raise AzureError(
                INVALID_METADATA, _INVALID, {"Reason": f"The name {name} is given twice."}
            )
        size += len(name.encode()) + len(value.encode())
        metadata[name] = value
    if size > MAX_BYTES:
        raise AzureError(
            METADATA_TOO_LARGE,
            "The size of the specified metadata exceeds the maximum size permitted.",
            {"MaxLimit": str(MAX_BYTES)},
        )
    return metadata


def to_headers(metadata: Mapping[str, str]) -> dict[str, str]:
    return {PREFIX + name: value for name, value in metadata.items()}
