"""The Python client with message groups: create_queue(ordering=...), send(group=...),
send_batch and send_arrow with groups (both Arrow paths), and what receive, peek and stats
show of them."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from leaseq.client import QueueClient, SendEntry
from leaseq.client.errors import InvalidArgument


def test_a_fifo_queue_through_the_client(client: QueueClient, queue_name: str) -> None:
    client.create_queue(queue_name, ordering="fifo", content_based_dedup=True)
    config = client.get_queue(queue_name).config
    assert (config.ordering, config.content_based_dedup, config.dedup_scope) == (
        "fifo",
        True,
        "queue",
    )
    # The configuration copies, ordering and all.
    client.create_queue(queue_name + "-copy", **dataclasses.asdict(config))
    client.send(queue_name, "a1", group="a")
    results = client.send_batch(
        queue_name,
        [SendEntry("b1", group="b"), SendEntry("a2", group="a"), SendEntry("a1", group="a")],
    )
    assert [r.duplicate for r in results] == [False, False, True]  # content-based dedup
    with pytest.raises(InvalidArgument, match="group"):
        client.send(queue_name, "no group")
    got = client.receive(queue_name, max_messages=10, wait_time=0)
    assert [(m.text, m.group) for m in got] == [("a1", "a"), ("a2", "a"), ("b1", "b")]
    assert got[0].sequence < got[1].sequence
    stats = client.stats(queue_name)
    assert (stats.groups, stats.blocked_groups) == (2, 2)
    peeked = client.peek(queue_name, include_leased=True)
    assert sorted(m.group for m in peeked) == ["a", "a", "b"]
    with pytest.raises(ValueError, match="ordering"):
        client.create_queue(queue_name + "-bad", ordering="lifo")


@pytest.mark.parametrize("with_attributes", [False, True], ids=["columnar", "per-row"])
def test_send_arrow_with_a_group_column(
    client: QueueClient, queue_name: str, with_attributes: bool
) -> None:
    client.create_queue(queue_name, ordering="fifo")
    columns: dict[str, object] = {
        "body": [b"x1", b"y1", b"x2"],
        "group": ["x", "y", "x"],
    }
    if with_attributes:
        columns["attributes"] = [{"k": "v"}] * 3
    results = client.send_arrow(queue_name, pa.table(columns))
    assert results["error_code"].null_count == 3
    got = client.receive(queue_name, max_messages=10, wait_time=0)
    assert [(m.body, m.group) for m in got] == [(b"x1", "x"), (b"x2", "x"), (b"y1", "y")]


def test_the_consumer_handles_a_groups_messages_in_order_one_at_a_time(
    client: QueueClient, queue_name: str
) -> None:
    import threading
    import time

    from leaseq.client import Consumer

    client.create_queue(queue_name, ordering="fifo")
    groups = [f"g{g}" for g in range(4)]
    for i in range(10):
        client.send_batch(queue_name, [SendEntry(f"{g}:{i}", group=g) for g in groups])
    lock = threading.Lock()
    running: dict[str, int] = dict.fromkeys(groups, 0)
    overlaps: list[str] = []
    seen: dict[str, list[int]] = {g: [] for g in groups}
    failed = threading.Event()
    done = threading.Event()

    def handle(message) -> None:  # type: ignore[no-untyped-def]
        group, index = message.text.split(":")
        with lock:
            running[group] += 1
            if running[group] > 1:
                overlaps.append(group)
        time.sleep(0.002)
        with lock:
            running[group] -= 1
            if group == "g1" and index == "3" and not failed.is_set():
                failed.set()
                raise RuntimeError("once")  # released with the rest of its run: back in order
            seen[group].append(int(index))
            if sum(map(len, seen.values())) == 40:
                done.set()

    with Consumer(client, queue_name, handle, concurrency=4) as consumer:
        assert done.wait(20)
        assert consumer.close(timeout=10)
    assert overlaps == []
    assert seen == {g: list(range(10)) for g in groups}
