"""The consumer against a real server: leases extended while handlers run, failures released
with their reason and dead-lettered, a clean close, batches, and a fatal error.

Waiting is on events: handlers report what they saw, a logging handler reports the leaser's
extensions (as tests/client/test_retry.py does with retries), and a long-poll receive waits for
a message to reach a dead letter queue. The only time that passes on purpose is the work of the
handlers that must outlive their visibility timeout (1 s here, the shortest lease that leaves a
loaded machine's round trip a comfortable margin).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest

from leaseq.client import (
    Backoff,
    Consumer,
    Message,
    QueueClient,
    QueueNotFound,
    SendEntry,
)

LEASE = 1.0
WAIT = 20.0  # an upper bound for events that come within a second or two


class Recorder:
    """What a handler saw, with an event per count reached."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[Message] = []
        self._waiters: list[tuple[Callable[[list[Message]], bool], threading.Event]] = []

    def add(self, *messages: Message) -> None:
        with self.lock:
            self.seen.extend(messages)
            for predicate, event in self._waiters:
                if predicate(self.seen):
                    event.set()

    def when(self, predicate: Callable[[list[Message]], bool]) -> threading.Event:
        event = threading.Event()
        with self.lock:
            self._waiters.append((predicate, event))
            if predicate(self.seen):
                event.set()
        return event


class LogEvents(logging.Handler):
    """Sets an event for every consumer log record containing a word."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: dict[str, threading.Event] = {}

    def expect(self, word: str) -> threading.Event:
        event = self.events[word] = threading.Event()
        return event

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        for word, event in list(self.events.items()):
            if word in text:
                event.set()


@pytest.fixture
def log_events() -> Iterator[LogEvents]:
    logger = logging.getLogger("leaseq.client.consumer")
    handler = LogEvents()
    old = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old)


def test_a_handler_three_times_longer_than_the_lease_runs_once(
    client: QueueClient, queue_name: str
) -> None:
    client.create_queue(queue_name, visibility_timeout=LEASE)
    message_id = client.send(queue_name, "slow work")
    seen = Recorder()
    done = seen.when(lambda s: len(s) >= 1)

    def handle(msg: Message) -> None:
        seen.add(msg)
        threading.Event().wait(3 * LEASE)  # the work: three leases long

    with Consumer(client, queue_name, handle, concurrency=2) as consumer:
        assert done.wait(WAIT)
        assert consumer.close(timeout=WAIT)
        stats = consumer.stats()

    assert [(m.message_id, m.delivery_count) for m in seen.seen] == [(message_id, 1)]
    assert stats.succeeded == 1 and stats.lost_leases == 0 and stats.ack_failures == 0
    assert stats.extensions >= 3  # renewed at least every ~0.5 s of the 3 s
    queue = client.stats(queue_name)
    assert (queue.total, queue.deleted_total) == (0, 1)


def test_a_failing_handler_releases_with_the_reason_then_dead_letters(
    client: QueueClient, queue_name: str
) -> None:
    dlq = queue_name + "-dlq"
    client.create_queue(dlq)
    client.create_queue(
        queue_name, visibility_timeout=30, dead_letter_queue=dlq, max_delivery_count=2
    )
    message_id = client.send(queue_name, "poison")
    seen = Recorder()

    def handle(msg: Message) -> None:
        seen.add(msg)
        raise ValueError(f"cannot parse delivery {msg.delivery_count}")

    with Consumer(client, queue_name, handle) as consumer:
        # The third delivery attempt moves the message instead: wait for it there.
        [dead] = client.receive(dlq, wait_time=WAIT, visibility_timeout=0)
        assert consumer.close(timeout=WAIT)
        stats = consumer.stats()

    assert [(m.delivery_count, m.last_error) for m in seen.seen] == [
        (1, ""),
        (2, "ValueError: cannot parse delivery 1"),  # redelivered at once, with the reason
    ]
    assert dead.message_id == message_id
    assert dead.last_error == "ValueError: cannot parse delivery 2"
    assert stats.failed == 2 and stats.succeeded == 0
    assert client.stats(queue_name).dead_lettered_total == 1


def test_a_release_delay_keeps_a_failed_message_away(client: QueueClient, queue: str) -> None:
    client.send(queue, "retry later")
    seen = Recorder()
    first = seen.when(lambda s: len(s) >= 1)

    def handle(msg: Message) -> None:
        seen.add(msg)
        raise RuntimeError("downstream is down")

    delay = Backoff(initial=600, maximum=600, jitter=0)
    with Consumer(client, queue, handle, release_delay=delay) as consumer:
        assert first.wait(WAIT)
        assert consumer.close(timeout=WAIT)
    [held] = client.peek(queue, include_leased=True)
    assert held.delivery_count == 1 and held.last_error == "RuntimeError: downstream is down"
    assert held.state.name == "LEASED"  # a delayed release stays invisible until its end
    assert (held.visible_at - held.enqueued_at).total_seconds() > 590


def test_close_with_handlers_running_loses_nothing_and_leaves_nothing_leased(
    client: QueueClient, queue_name: str, log_events: LogEvents
) -> None:
    client.create_queue(queue_name, visibility_timeout=LEASE)
    client.send_batch(queue_name, [f"m{i}" for i in range(10)])
    seen = Recorder()
    two_running = seen.when(lambda s: len(s) >= 2)
    gate = threading.Event()

    def handle(msg: Message) -> None:
        seen.add(msg)
        gate.wait(WAIT)

    # The stream delivers 4 (max_outstanding) and pauses: 2 run, 2 wait for a worker.
    consumer = Consumer(
        client, queue_name, handle, concurrency=2, max_outstanding=4, batch_size=4
    ).start()
    assert two_running.wait(WAIT)
    extended_while_closing = log_events.expect("extended")
    result: list[bool] = []
    closer = threading.Thread(target=lambda: result.append(consumer.close(timeout=WAIT)))
    closer.start()
    # The running handlers outlive their first lease while close() waits for them.
    assert extended_while_closing.wait(WAIT)
    gate.set()
    closer.join(WAIT)

    assert result == [True]
    stats = consumer.stats()
    assert (stats.succeeded, stats.unstarted_released, stats.held, stats.lost_leases) == (
        2,
        2,
        0,
        0,
    )
    queue = client.stats(queue_name)
    assert (queue.leased, queue.visible, queue.deleted_total, queue.total) == (0, 8, 2, 8)
    handled = {m.text for m in seen.seen}
    remaining = {m.text for m in client.peek(queue_name, 20)}
    assert len(handled) == 2 and handled | remaining == {f"m{i}" for i in range(10)}


def test_batches(client: QueueClient, queue: str) -> None:
    client.send_batch(queue, [SendEntry(f"m{i}") for i in range(12)])
    seen = Recorder()
    failed_batch: list[str] = []
    # One worker takes the batches in order: the failed one comes back after the others, maybe
    # cut in two batches; close() would put back any of it not yet started, so wait for all.
    all_seen = seen.when(
        lambda s: (
            bool(failed_batch) and {m.text for m in s if m.delivery_count == 2} >= set(failed_batch)
        )
    )
    sizes: list[int] = []

    def handle(batch: list[Message]) -> None:
        sizes.append(len(batch))
        if any(m.text == "m0" and m.delivery_count == 1 for m in batch):
            failed_batch.extend(m.text for m in batch)
            seen.add(*batch)
            raise KeyError("m0")  # the whole batch is released and comes back
        seen.add(*batch)

    with Consumer(client, queue, handle, batch=True, batch_size=5) as consumer:
        assert all_seen.wait(WAIT)
        assert consumer.close(timeout=WAIT)
    assert max(sizes) <= 5
    assert client.stats(queue).total == 0
    failed = [m for m in seen.seen if m.delivery_count == 2]
    assert failed and all(m.last_error == "KeyError: 'm0'" for m in failed)


def test_a_deleted_queue_stops_the_consumer(client: QueueClient, queue: str) -> None:
    consumer = Consumer(client, queue, lambda msg: None).start()
    client.delete_queue(queue)
    with pytest.raises(QueueNotFound):
        consumer.wait(WAIT)
    assert isinstance(consumer.error, QueueNotFound)
    assert consumer.close(timeout=WAIT)


def test_a_missing_queue_fails_at_start(client: QueueClient, queue_name: str) -> None:
    with pytest.raises(QueueNotFound):
        Consumer(client, queue_name, lambda msg: None).start()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"concurrency": 0},
        {"max_outstanding": 0},
        {"batch_size": 10_001},
        {"visibility_timeout": 0},
        {"max_lease_time": 0},
    ],
)
def test_settings_are_checked(client: QueueClient, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Consumer(client, "q", lambda msg: None, **kwargs)  # type: ignore[arg-type]
