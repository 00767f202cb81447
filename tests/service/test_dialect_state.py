"""QueueCore's queue_state / settings: the grants and the bounds of a change, over the memory
store (the stores' own semantics are the contract suite's)."""

from __future__ import annotations

import pytest

from leaseq.server.auth.policy import ACTIONS, Grant, Principal
from leaseq.server.core import PermissionDenied, QueueCore
from leaseq.server.domain import limits
from leaseq.server.domain.types import QueueConfig
from leaseq.server.errors import InvalidArgument
from leaseq.server.store.memory import MemoryStore

ADMIN = Principal("admin", (Grant(("*",), ACTIONS),))
ONE_QUEUE = Principal("owner", (Grant(("jobs",), ACTIONS),))
READER = Principal("reader", (Grant(("*",), frozenset({"receive"})),))


@pytest.fixture
async def core() -> QueueCore:
    core = QueueCore.serving(MemoryStore())
    await core.create_queue(None, "jobs", QueueConfig())
    return core


async def test_queue_state_needs_admin_on_the_queue_to_change(core: QueueCore) -> None:
    assert await core.update_queue_state(ONE_QUEUE, "jobs", "sqs.tags", {"a": "1"}) == {"a": "1"}
    assert await core.queue_state(READER, "jobs", "sqs.tags") == {"a": "1"}
    with pytest.raises(PermissionDenied):
        await core.update_queue_state(READER, "jobs", "sqs.tags", {"a": "2"})
    assert await core.queue_state(None, "jobs", "sqs.tags") == {"a": "1"}


async def test_settings_need_a_grant_on_every_queue(core: QueueCore) -> None:
    assert await core.update_settings(ADMIN, "azure.service", {"cors": "[]"}) == {"cors": "[]"}
    assert await core.settings(READER, "azure.service") == {"cors": "[]"}
    with pytest.raises(PermissionDenied):
        await core.settings(ONE_QUEUE, "azure.service")
    with pytest.raises(PermissionDenied):
        await core.update_settings(READER, "azure.service", {"cors": "x"})


@pytest.mark.parametrize(
    ("namespace", "changes"),
    [
        ("", {"a": "1"}),
        ("ns", {"": "1"}),
        ("ns", {"n" * (limits.MAX_STATE_NAME + 1): "1"}),
        ("ns", {"a": "v" * (limits.MAX_STATE_VALUE + 1)}),
        ("ns", {f"k{i}": "v" for i in range(limits.MAX_STATE_CHANGES + 1)}),
        ("ns", {"a": "nul\x00"}),
    ],
)
async def test_a_change_out_of_bounds_is_invalid(
    core: QueueCore, namespace: str, changes: dict[str, str | None]
) -> None:
    with pytest.raises(InvalidArgument):
        await core.update_queue_state(None, "jobs", namespace, changes)
    with pytest.raises(InvalidArgument):
        await core.update_settings(None, namespace, changes)
    assert await core.queue_state(None, "jobs", namespace or "ns") == {}
