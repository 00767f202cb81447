"""Queue administration: create, get, list, update, delete, purge."""

from __future__ import annotations

import pytest

from leaseq.server.domain.types import LeaseStatus, QueueConfig
from leaseq.server.errors import InvalidArgument, QueueAlreadyExists, QueueInUse, QueueNotFound
from leaseq.server.store.base import Store

from .conftest import DLQ, Q, at, delete_status, make_queue, receive, send


async def test_store_implements_the_protocol(store: Store) -> None:
    assert isinstance(store, Store)


async def test_create_returns_the_queue_and_get_finds_it(store: Store, clock) -> None:
    config = QueueConfig(visibility_timeout=12.0, max_in_flight=7)
    created = await store.create_queue(Q, config)
    assert (created.name, created.config, created.create_time) == (Q, config, at(clock.now()))
    clock.advance(5)
    got = await store.get_queue(Q)
    assert (got.name, got.config, got.create_time) == (Q, config, at(created.create_time))


async def test_create_again_with_the_same_config_is_a_no_op(store: Store, clock) -> None:
    first = await store.create_queue(Q, QueueConfig(dedup_window=10.0))
    await send(store, Q, "kept")
    clock.advance(60)
    again = await store.create_queue(Q, QueueConfig(dedup_window=10.0))
    assert again.create_time == at(first.create_time)
    assert (await store.stats(Q)).total == 1


async def test_create_with_another_config_is_already_exists(store: Store) -> None:
    await store.create_queue(Q, QueueConfig())
    with pytest.raises(QueueAlreadyExists):
        await store.create_queue(Q, QueueConfig(visibility_timeout=1.0))
    assert (await store.get_queue(Q)).config == QueueConfig()


async def test_missing_queue_is_not_found_everywhere(store: Store) -> None:
    calls = [
        store.get_queue("nope"),
        store.update_queue("nope", QueueConfig()),
        store.delete_queue("nope"),
        store.purge_queue("nope"),
        store.stats("nope"),
        send(store, "nope", "x"),
        store.receive("nope", 1),
        store.peek("nope", 1),
        store.change_visibility("nope", []),
        store.delete("nope", []),
        store.redrive("nope"),
    ]
    for call in calls:
        with pytest.raises(QueueNotFound):
            await call


async def test_dead_letter_queue_must_exist(store: Store) -> None:
    with pytest.raises(InvalidArgument) as raised:
        await make_queue(store, Q, dead_letter_queue="missing", max_delivery_count=3)
    assert raised.value.field == "config.dead_letter_queue"
    with pytest.raises(QueueNotFound):
        await store.get_queue(Q)


async def test_dead_letter_queue_must_not_be_the_queue_itself(store: Store) -> None:
    with pytest.raises(InvalidArgument) as raised:
        await make_queue(store, Q, dead_letter_queue=Q, max_delivery_count=3)
    assert raised.value.field == "config.dead_letter_queue"


async def test_update_replaces_the_config_with_the_same_rules(store: Store) -> None:
    created = await make_queue(store, Q)
    await make_queue(store, DLQ)
    for bad in ("missing", Q):
        with pytest.raises(InvalidArgument) as raised:
            bad_config = QueueConfig(dead_letter_queue=bad, max_delivery_count=2)
            await store.update_queue(created, bad_config)
        assert raised.value.field == "config.dead_letter_queue"
    assert (await store.get_queue(Q)).config == QueueConfig()

    new = QueueConfig(visibility_timeout=5.0, dead_letter_queue=DLQ, max_delivery_count=2)
    updated = await store.update_queue(Q, new)
    assert updated.config == new
    assert (await store.get_queue(Q)).config == new


async def test_update_applies_to_later_operations(store: Store, clock) -> None:
    await make_queue(store, Q)
    await store.update_queue(Q, QueueConfig(visibility_timeout=7.0))
    await send(store, Q, "a")
    [message] = await receive(store, Q, vt=None)
    assert message.visible_at == at(clock.now() + 7.0)


async def test_delete_removes_queue_and_messages(store: Store) -> None:
    await make_queue(store, Q)
    await send(store, Q, "a")
    await store.delete_queue(Q)
    with pytest.raises(QueueNotFound):
        await store.get_queue(Q)
    await make_queue(store, Q)
    assert (await store.stats(Q)).total == 0


async def test_a_dead_letter_queue_in_use_cannot_be_deleted(store: Store) -> None:
    await make_queue(store, DLQ)
    await make_queue(store, Q, dead_letter_queue=DLQ, max_delivery_count=2)
    with pytest.raises(QueueInUse) as raised:
        await store.delete_queue(DLQ)
    assert (raised.value.name, raised.value.used_by) == (DLQ, Q)
    await store.get_queue(DLQ)

    await store.update_queue(Q, QueueConfig())
    await store.delete_queue(DLQ)
    with pytest.raises(QueueNotFound):
        await store.get_queue(DLQ)


async def test_list_queues_by_prefix_after_and_limit(store: Store) -> None:
    for name in ("b-2", "a-1", "b-1", "b-3", "c"):
        await make_queue(store, name)

    async def names(prefix: str, after: str | None, limit: int) -> list[str]:
        return [q.name for q in await store.list_queues(prefix, after, limit)]

    assert await names("", None, 100) == ["a-1", "b-1", "b-2", "b-3", "c"]
    assert await names("b-", None, 100) == ["b-1", "b-2", "b-3"]
    assert await names("b-", None, 2) == ["b-1", "b-2"]
    assert await names("b-", "b-2", 2) == ["b-3"]
    assert await names("", "b-3", 100) == ["c"]
    assert await names("z", None, 100) == []


async def test_purge_deletes_every_state_and_counts(store: Store, clock) -> None:
    await make_queue(store, Q)
    await send(store, Q, "visible-1", "visible-2", "leased")
    await send(store, Q, "delayed", delay=100.0)
    [leased] = await receive(store, Q, 1)
    # An expired message is swept (counted as expired), not purged.
    await send(store, Q, "short", ttl=1.0)
    clock.advance(1)

    assert await store.purge_queue(Q) == 4

    stats = await store.stats(Q)
    assert (stats.total, stats.visible, stats.leased, stats.delayed) == (0, 0, 0, 0)
    assert (stats.deleted_total, stats.expired_total) == (0, 1)
    # No tombstone: the purged message is simply gone.
    assert await delete_status(store, Q, leased.receipt) is LeaseStatus.MESSAGE_NOT_FOUND
    assert await store.purge_queue(Q) == 0
    await send(store, Q, "after")
    assert len(await receive(store, Q, 10)) == 1


# --- queue metadata (Azure's x-ms-meta-* pairs) -------------------------------------------------


async def test_queue_metadata_is_set_replaced_and_cleared(store: Store) -> None:
    await make_queue(store)
    await make_queue(store, "other")
    assert await store.queue_metadata([Q, "other", "missing"]) == {}
    await store.set_queue_metadata(Q, {"owner": "ada", "Team_2": "é ü"})
    assert await store.queue_metadata([Q, "other", "missing"]) == {
        Q: {"owner": "ada", "Team_2": "é ü"}
    }
    await store.set_queue_metadata(Q, {"owner": "grace"})  # a set replaces the whole map
    assert await store.queue_metadata([Q]) == {Q: {"owner": "grace"}}
    await store.set_queue_metadata(Q, {})
    assert await store.queue_metadata([Q]) == {}


async def test_queue_metadata_of_a_missing_queue_is_queue_not_found(store: Store) -> None:
    with pytest.raises(QueueNotFound):
        await store.set_queue_metadata("missing", {"a": "b"})


async def test_a_queue_created_again_starts_without_metadata(store: Store) -> None:
    await make_queue(store)
    await store.set_queue_metadata(Q, {"owner": "ada"})
    await store.delete_queue(Q)
    assert await store.queue_metadata([Q]) == {}
    await make_queue(store)
    assert await store.queue_metadata([Q]) == {}


# --- a front end's own pairs (queue_state, settings) --------------------------------------------


async def test_queue_state_is_merged_replaced_and_kept_per_namespace(store: Store) -> None:
    await make_queue(store)
    await make_queue(store, "other")
    assert await store.queue_state(Q, "sqs.tags") == {}
    after = await store.update_queue_state(Q, "sqs.tags", {"env": "prod", "Team 2": "é ü"})
    assert after == {"env": "prod", "Team 2": "é ü"}
    await store.update_queue_state(Q, "sqs.attributes", {"Policy": '{"Version": "2012-10-17"}'})
    await store.update_queue_state("other", "sqs.tags", {"env": "dev"})
    # A merge: names not named stay, None removes one, a missing name's None is no error.
    after = await store.update_queue_state(
        Q, "sqs.tags", {"env": "test", "Team 2": None, "x": None}
    )
    assert after == {"env": "test"}
    assert await store.queue_state(Q, "sqs.tags") == {"env": "test"}
    assert await store.queue_state(Q, "sqs.attributes") == {"Policy": '{"Version": "2012-10-17"}'}
    assert await store.queue_state("other", "sqs.tags") == {"env": "dev"}
    # replace: the namespace holds exactly the changes' values afterwards.
    after = await store.update_queue_state(Q, "sqs.tags", {"a": "1", "b": None}, replace=True)
    assert after == {"a": "1"} == await store.queue_state(Q, "sqs.tags")
    assert await store.update_queue_state(Q, "sqs.tags", {}, replace=True) == {}
    assert await store.queue_state(Q, "sqs.attributes") != {}


async def test_queue_state_lives_and_dies_with_the_queue(store: Store) -> None:
    await make_queue(store)
    await store.update_queue_state(Q, "sqs.tags", {"env": "prod"})
    await store.delete_queue(Q)
    with pytest.raises(QueueNotFound):
        await store.queue_state(Q, "sqs.tags")
    with pytest.raises(QueueNotFound):
        await store.update_queue_state(Q, "sqs.tags", {"env": "prod"})
    await make_queue(store)
    assert await store.queue_state(Q, "sqs.tags") == {}


async def test_settings_are_server_wide_pairs_per_namespace(store: Store) -> None:
    assert await store.settings("azure.service") == {}
    assert await store.update_settings("azure.service", {"cors": "[]", "logging": "off"}) == {
        "cors": "[]",
        "logging": "off",
    }
    await store.update_settings("sqs.account", {"id": "000000000000"})
    assert await store.update_settings("azure.service", {"logging": None, "cors": "[1]"}) == {
        "cors": "[1]"
    }
    assert await store.settings("azure.service") == {"cors": "[1]"}
    assert await store.settings("sqs.account") == {"id": "000000000000"}
    assert await store.update_settings("azure.service", {"x": "y"}, replace=True) == {"x": "y"}
    await make_queue(store)
    await store.delete_queue(Q)  # settings belong to no queue
    assert await store.settings("azure.service") == {"x": "y"}
