"""Queue metadata: the x-ms-meta-<name> headers of Create Queue and Set Queue Metadata.

leaseq's stores keep no free-form data per queue, so the Azure front end keeps metadata in the
server's memory (README's differences: lost on restart, not shared between replicas). Each entry
remembers the create_time of the queue it belongs to, so a queue deleted and created again (by
any dialect) starts without metadata."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .errors import INVALID_METADATA, METADATA_TOO_LARGE, AzureError

PREFIX = "x-ms-meta-"
MAX_BYTES = 8 * 1024  # names plus values (Azure's limit)
MAX_QUEUES = 100_000  # entries kept; the oldest go first beyond (bounded memory)
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
                "The metadata specified is invalid. It has characters that are not permitted "
                "(names are C# identifiers).",
            )
        if any(known.lower() == name.lower() for known in metadata):
            raise AzureError(INVALID_METADATA, f"The metadata name {name} is given twice.")
        size += len(name.encode()) + len(value.encode())
        metadata[name] = value
    if size > MAX_BYTES:
        raise AzureError(
            METADATA_TOO_LARGE,
            f"The size of the specified metadata exceeds the maximum size permitted ({MAX_BYTES} bytes).",
        )
    return metadata


def to_headers(metadata: Mapping[str, str]) -> dict[str, str]:
    return {PREFIX + name: value for name, value in metadata.items()}


class MetadataTable:
    """Queue name -> (the queue's create_time, metadata)."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, dict[str, str]]] = {}

    def get(self, name: str, create_time: float) -> dict[str, str]:
        entry = self._entries.get(name)
        if entry is None or entry[0] != create_time:
            return {}
        return dict(entry[1])

    def set(self, name: str, create_time: float, metadata: Mapping[str, str]) -> None:
        self._entries.pop(name, None)
        if metadata:
            if len(self._entries) >= MAX_QUEUES:
                self._entries.pop(next(iter(self._entries)))
            self._entries[name] = (create_time, dict(metadata))

    def forget(self, name: str) -> None:
        self._entries.pop(name, None)
