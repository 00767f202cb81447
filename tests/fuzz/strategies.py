"""Hypothesis strategies for arbitrary protobuf requests, built from the message descriptors, so
every field of every request of the service is generated (and a field added later is too).

Values lean towards what reaches deep into the server: names of queues that exist, receipts
and page tokens the server really issued (and damaged copies), boundary numbers. `Pool` holds
those; the fuzz test refreshes it whenever it reseeds the server, and strategies read it at draw
time.
"""

from __future__ import annotations

import base64
import functools
from typing import Any

from google.protobuf import duration_pb2, field_mask_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)

BOUNDARY_INTS = [
    0,
    1,
    -1,
    2,
    9,
    10,
    60,
    1000,
    1024,
    3600,
    10_000,
    10_001,
    43_200,
    43_201,
    100_000,
    100_001,
    1_209_600,
    8 * 1024 * 1024,
    8 * 1024 * 1024 + 1,
    10_000_000,
    315_576_000_000,
    315_576_000_001,
]
FIELD_PATHS = [
    "visibility_timeout",
    "config.visibility_timeout",
    "receive_wait_time",
    "message_retention",
    "default_delay",
    "max_message_bytes",
    "dead_letter_queue",
    "max_delivery_count",
    "max_in_flight",
    "dedup_window",
    "retry_policy",
    "config.retry_policy",
    "config",
    "*",
    "body",
    "attributes",
    "",
    "config.",
    "nonsense",
    "config.config",
]


class Pool:
    """Strings the server knows (queue names, receipts, page tokens), refreshed by the test."""

    def __init__(self) -> None:
        self.strings: list[str] = ["fz-main"]

    def set(self, strings: list[str]) -> None:
        self.strings = list(dict.fromkeys(s for s in strings if s is not None)) or [""]


POOL = Pool()


_INDEX = st.integers(0, 10**6)
_OPERATION = st.integers(0, 6)
_EXTRA = st.text(max_size=4)
_CHAR = st.characters(codec="ascii")


def damage(draw: Any, text: str) -> str:
    """A truncated, extended, flipped, re-padded or re-encoded copy of text."""
    if not text:
        return text
    op = draw(_OPERATION)
    at = draw(_INDEX) % len(text)
    if op == 0:
        return text[:at]
    if op == 1:
        return text + draw(_EXTRA)
    if op == 2:
        return text[:at] + draw(_CHAR) + text[at + 1 :]
    if op == 3:
        return text + "=" * (-len(text) % 4 or 4)
    if op == 4:
        return text.upper()
    if op == 5:
        return base64.b64encode(text.encode()).decode()
    return text[:at] + text[at + 1 :]


@st.composite
def damaged(draw: Any, text: str) -> str:
    return damage(draw, text)


@st.composite
def pooled(draw: Any, damaged: bool = False) -> str:
    """A string of the pool (read at draw time), maybe damaged."""
    text = POOL.strings[draw(_INDEX) % len(POOL.strings)]
    return damage(draw, text) if damaged else text


@functools.cache
def strings(max_size: int = 40) -> st.SearchStrategy[str]:
    return st.one_of(
        pooled(),
        pooled(damaged=True),
        st.sampled_from(
            [
                "",
                "*",
                "fz-*",
                "a*b",
                "x" * 80,
                "x" * 81,
                "\x00",
                "é",
                "../..",
                "fz main",
                "fz-main\n",
                "🦆",
                "c" * 65,
                "d" * 129,
            ]
        ),
        st.text(max_size=max_size),
        st.text(alphabet="abcfz-_*", max_size=12),
    )


def integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = [v for v in BOUNDARY_INTS + [low, high, low + 1, high - 1] if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high), st.integers(0, 20))


def durations() -> st.SearchStrategy[duration_pb2.Duration]:
    return st.builds(
        duration_pb2.Duration,
        seconds=st.one_of(
            st.sampled_from([0, 1, 5, 30, 59, 60, 300, 3600, 43_200, 43_201, 1_209_600, -1]),
            integers(*INT64),
        ),
        nanos=st.one_of(
            st.just(0), st.sampled_from([1, 500_000_000, 999_999_999, 10**9, -1]), integers(*INT32)
        ),
    )


def field_masks() -> st.SearchStrategy[field_mask_pb2.FieldMask]:
    return st.builds(
        field_mask_pb2.FieldMask,
        paths=st.lists(st.one_of(st.sampled_from(FIELD_PATHS), st.text(max_size=10)), max_size=4),
    )


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return strings()
    if t == FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.just(b"x" * 2000))
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_ENUM:
        return st.integers(-3, 12)
    if t in (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SFIXED32,
    ):
        return integers(*INT32)
    if t in (
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
    ):
        return integers(*INT64)
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return integers(*UINT32)
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return integers(*UINT64)
    if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    raise NotImplementedError(field.full_name)  # pragma: no cover


def _value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is None:
        return _scalar(field)
    name = field.message_type.full_name
    if name == "google.protobuf.Duration":
        return durations()
    if name == "google.protobuf.FieldMask":
        return field_masks()
    return messages(field.message_type, depth + 1)


@functools.cache
def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Any message of this type: each field set or left unset, maps and repeated fields of a few
    entries (receipt lists sometimes many)."""
    cls = GetMessageClass(descriptor)
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key = field.message_type.fields_by_name["key"]
            value = field.message_type.fields_by_name["value"]
            strategy: st.SearchStrategy[Any] = st.one_of(
                st.dictionaries(_scalar(key), _value(value, depth), max_size=4),
                st.dictionaries(st.text(max_size=3), st.text(max_size=3), min_size=17, max_size=18),
            )
        elif field.is_repeated:
            if depth > 2:
                continue
            item = _value(field, depth)
            strategy = st.one_of(st.lists(item, max_size=4), st.lists(item, max_size=12))
        else:
            if depth > 2 and field.message_type is not None:
                continue
            strategy = _value(field, depth)
        parts[field.name] = st.one_of(st.none(), strategy)

    def build(values: dict[str, Any]) -> Message:
        return cls(**{k: v for k, v in values.items() if v is not None})

    return st.fixed_dictionaries(parts).map(build)


def raw_bytes(valid: st.SearchStrategy[Message]) -> st.SearchStrategy[bytes]:
    """Bytes that are not a valid encoding, or barely are: random, truncated or bit-flipped
    serializations of real requests, and protobuf-looking junk (deep nesting, huge lengths)."""

    def flip(data: bytes, positions: list[int]) -> bytes:
        out = bytearray(data)
        for p in positions:
            if out:
                out[p % len(out)] ^= 1 << (p % 8)
        return bytes(out)

    serialized = valid.map(lambda m: m.SerializeToString())
    return st.one_of(
        st.binary(max_size=300),
        st.tuples(serialized, st.integers(0, 400)).map(lambda t: t[0][: t[1]]),
        st.tuples(serialized, st.lists(st.integers(0, 10_000), min_size=1, max_size=4)).map(
            lambda t: flip(*t)
        ),
        st.tuples(serialized, st.binary(max_size=20)).map(lambda t: t[0] + t[1]),
        st.integers(1, 200).map(lambda n: b"\x12\x7f" * n),  # nested length prefixes
        st.sampled_from(
            [
                b"\x0a\xff\xff\xff\xff\x0f",  # a length of 4 GiB
                b"\x0a\x02\xc3\x28",  # invalid UTF-8 in a string field
                b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a 10-byte varint
                b"\x0b\x0c",  # group start/end markers
                b"\xf8\xff\xff\xff\x0f\x01",  # the largest field number
            ]
        ),
    )


def _templates() -> dict[str, Any]:
    """A plausible, mostly valid request per RPC, from pool strings (drawn by `near_valid`)."""
    from leaseq.v1 import queue_service_pb2 as pb

    d = duration_pb2.Duration
    return {
        "CreateQueue": lambda s: pb.CreateQueueRequest(name=s()),
        "GetQueue": lambda s: pb.GetQueueRequest(name=s()),
        "ListQueues": lambda s: pb.ListQueuesRequest(page_size=2, page_token=s()),
        "UpdateQueue": lambda s: pb.UpdateQueueRequest(
            name=s(), config=pb.QueueConfig(visibility_timeout=d(seconds=60))
        ),
        "DeleteQueue": lambda s: pb.DeleteQueueRequest(name=s()),
        "PurgeQueue": lambda s: pb.PurgeQueueRequest(name=s()),
        "GetQueueStats": lambda s: pb.GetQueueStatsRequest(name=s()),
        "SendMessages": lambda s: pb.SendMessagesRequest(
            queue=s(), entries=[pb.SendEntry(id="1", body=b"fuzz", channel=s())]
        ),
        "GetMessages": lambda s: pb.GetMessagesRequest(
            queue=s(), max_messages=2, wait_time=d(seconds=0), visibility_timeout=d(seconds=300)
        ),
        "PeekMessages": lambda s: pb.PeekMessagesRequest(
            queue=s(), max_messages=2, include_leased=True, page_token=s()
        ),
        "ChangeVisibility": lambda s: pb.ChangeVisibilityRequest(
            queue=s(),
            entries=[pb.ChangeVisibilityEntry(receipt=s(), visibility_timeout=d(seconds=60))],
        ),
        "DeleteMessages": lambda s: pb.DeleteMessagesRequest(queue=s(), receipts=[s()]),
        "UpdateMessage": lambda s: pb.UpdateMessageRequest(queue=s(), receipt=s(), body=b"u"),
        "RedriveMessages": lambda s: pb.RedriveMessagesRequest(queue=s(), destination=s()),
        "DeadLetterMessages": lambda s: pb.DeadLetterMessagesRequest(
            queue=s(), receipts=[s()], reason=s()
        ),
    }


_TEMPLATES: dict[str, Any] = {}
_KEEP = st.integers(0, 2**16)


@st.composite
def near_valid(draw: Any, descriptor: Descriptor, rpc: str) -> Message:
    """A plausible request of rpc with a few of its fields replaced by arbitrary values: valid
    often enough to reach the store, odd enough to probe every check on the way."""
    if not _TEMPLATES:
        _TEMPLATES.update(_templates())
    base = _TEMPLATES[rpc](lambda: draw(pooled()))
    fuzzed = draw(messages(descriptor))
    keep = draw(_KEEP)
    for index, field in enumerate(descriptor.fields):
        if not keep & (1 << index):
            fuzzed.ClearField(field.name)
    for field, _ in fuzzed.ListFields():
        base.ClearField(field.name)
    base.MergeFrom(fuzzed)
    return base
