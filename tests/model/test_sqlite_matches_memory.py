"""Random operation sequences against the SQLite store and the memory reference, one fake clock.

Both stores see the same calls at the same instants; every answer must be the same once the
store-specific parts are normalized: message ids and receipts are random per store, so messages
are named by their (unique) bodies and receipts by the pair (memory receipt, sqlite receipt)
that the same delivery produced.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import asdict
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import (
    BodyBatch,
    NewMessage,
    Ordering,
    QueueConfig,
    RetryPolicy,
    VisibilityChange,
)
from leaseq.server.errors import LeaseqError, LeaseRejected
from leaseq.server.store.memory import MemoryStore
from leaseq.server.store.sqlite import SqliteStore

QUEUE, DLQ, OTHER = "work", "dead", "other"
# Grouped queues: a FIFO one with a FIFO dead letter queue, and a FAIR one.
FIFO, FIFO_DLQ, FAIR = "fifo", "fifo-dead", "fair"
GROUPED = (FIFO, FAIR)
GROUPS = st.sampled_from(["g1", "g2", "g3"])
CHANNELS = st.sampled_from(["", "a", "b"])
FILTERS = st.sampled_from(["", "a", "b", "a*", "*"])
ATTEMPTS = st.sampled_from(["", "x", "y"])


def _outcome(call):
    """Run a call against a store; an error becomes a comparable value."""
    try:
        return ("ok", call())
    except LeaseqError as err:
        status = err.status if isinstance(err, LeaseRejected) else None
        return ("error", type(err).__name__, status)


class StoresAgree(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory()
        self.clock = FakeClock()
        self.memory = MemoryStore(clock=self.clock)
        self.sqlite = SqliteStore(Path(self.tmp.name) / "model.db", clock=self.clock)
        self.run(self.memory.open())
        self.run(self.sqlite.open())
        self.next_body = 0
        # Receipts of the same delivery in each store: (memory receipt, sqlite receipt).
        self.receipts: list[tuple[str, str]] = []
        # Per store: message_id -> body, to compare duplicates by what they name.
        self.bodies: list[dict[str, bytes]] = [{}, {}]
        # Receipts of grouped queues' deliveries: (queue, memory receipt, other store's receipt).
        self.grouped_receipts: list[tuple[str, str, str]] = []

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def teardown(self) -> None:
        self.run(self.memory.close())
        self.run(self.sqlite.close())
        self.loop.close()
        self.tmp.cleanup()

    def both(self, method: str, *args, **kwargs):
        """Call method on both stores, return (memory answer, sqlite answer)."""
        answers = []
        for store in (self.memory, self.sqlite):
            answers.append(_outcome(lambda s=store: self.run(getattr(s, method)(*args, **kwargs))))
        return answers

    def pick_receipts(self, data, allow_garbage: bool = True) -> tuple[str, str]:
        choices = len(self.receipts) + (1 if allow_garbage else 0)
        index = data.draw(st.integers(0, max(choices - 1, 0)))
        if index >= len(self.receipts):
            return ("not-a-receipt", "not-a-receipt")
        return self.receipts[index]

    # --- set-up ---------------------------------------------------------------------------

    @initialize()
    def create_queues(self) -> None:
        dead = QueueConfig(message_retention=600.0)
        work = QueueConfig(
            visibility_timeout=30.0,
            message_retention=120.0,
            dead_letter_queue=DLQ,
            max_delivery_count=2,
            max_in_flight=6,
            dedup_window=20.0,
            retry_policy=RetryPolicy(minimum_backoff=2.0, maximum_backoff=8.0),
        )
        fifo_dead = QueueConfig(ordering=Ordering.FIFO, message_retention=600.0)
        fifo = QueueConfig(
            ordering=Ordering.FIFO,
            message_retention=120.0,
            dead_letter_queue=FIFO_DLQ,
            max_delivery_count=2,
            max_in_flight=5,
        )
        fair = QueueConfig(ordering=Ordering.FAIR, message_retention=120.0)
        for name, config in (
            (DLQ, dead),
            (QUEUE, work),
            (OTHER, QueueConfig()),
            (FIFO_DLQ, fifo_dead),
            (FIFO, fifo),
            (FAIR, fair),
        ):
            mem, sql = self.both("create_queue", name, config)
            assert mem[0] == sql[0] == "ok"

    # --- rules ----------------------------------------------------------------------------

    @rule(
        queue=st.sampled_from([QUEUE, QUEUE, OTHER]),
        entries=st.lists(
            st.tuples(
                CHANNELS,
                st.sampled_from([None, 0.0, 5.0]),
                st.sampled_from([None, 30.0, 90.0]),
                st.sampled_from(["", "", "d1", "d2"]),
            ),
            min_size=1,
            max_size=4,
        ),
    )
    def send(self, queue, entries) -> None:
        messages = []
        for channel, delay, ttl, dedup in entries:
            self.next_body += 1
            messages.append(
                NewMessage(
                    body=b"m%d" % self.next_body,
                    attributes={"n": str(self.next_body)},
                    channel=channel,
                    delay=delay,
                    ttl=ttl,
                    dedup_id=dedup,
                )
            )
        mem, sql = self.both("send", queue, messages)
        assert mem[0] == sql[0] == "ok"
        named = []
        for index, answers in enumerate((mem[1], sql[1])):
            names = []
            for message, outcome in zip(messages, answers):
                if not outcome.duplicate:
                    self.bodies[index][outcome.message_id] = message.body
                names.append((self.bodies[index][outcome.message_id], outcome.duplicate))
            named.append(names)
        assert named[0] == named[1]

    @rule(
        queue=st.sampled_from([QUEUE, QUEUE, OTHER]),
        dedup_ids=st.lists(st.sampled_from(["", "d1", "d2", "d3"]), min_size=1, max_size=5),
    )
    def send_keyed(self, queue, dedup_ids) -> None:
        """Store.send_batch of bodies and dedup ids (write_queue's sends; SqliteStore looks the
        dedup ids up and records them as a set per batch) answers as the reference's send does."""
        bodies = []
        for _ in dedup_ids:
            self.next_body += 1
            bodies.append(b"m%d" % self.next_body)
        mem = self.run(
            self.memory.send(queue, [NewMessage(b, dedup_id=d) for b, d in zip(bodies, dedup_ids)])
        )
        sent = self.run(self.sqlite.send_batch(queue, BodyBatch(bodies, dedup_ids)))
        message_ids, duplicates = sent.message_ids, sent.duplicates
        answers = (
            [(o.message_id, o.duplicate) for o in mem],
            [(m, i in duplicates) for i, m in enumerate(message_ids)],
        )
        named = []
        for index, answer in enumerate(answers):
            names = []
            for body, (message_id, duplicate) in zip(bodies, answer):
                if not duplicate:
                    self.bodies[index][message_id] = body
                names.append((self.bodies[index][message_id], duplicate))
            named.append(names)
        assert named[0] == named[1]

    @rule(
        queue=st.sampled_from([QUEUE, QUEUE, OTHER, DLQ]),
        max_messages=st.integers(1, 5),
        visibility=st.sampled_from([None, 0.0, 10.0, 45.0]),
        channel_filter=FILTERS,
        attempt=ATTEMPTS,
    )
    def receive(self, queue, max_messages, visibility, channel_filter, attempt) -> None:
        mem, sql = self.both("receive", queue, max_messages, visibility, channel_filter, attempt)
        if mem[0] == "error" or sql[0] == "error":
            assert mem == sql
            return
        assert [_delivered(m) for m in mem[1].messages] == [_delivered(m) for m in sql[1].messages]
        assert mem[1].next_visible_at == sql[1].next_visible_at
        for a, b in zip(mem[1].messages, sql[1].messages):
            self.receipts.append((a.receipt, b.receipt))

    @precondition(lambda self: self.receipts)
    @rule(
        data=st.data(),
        visibility=st.sampled_from([0.0, 5.0, 20.0]),
        reason=st.sampled_from(["", "boom"]),
    )
    def change_visibility(self, data, visibility, reason) -> None:
        pair = self.pick_receipts(data)
        mem, sql = (
            _outcome(
                lambda s=store, r=receipt: self.run(
                    s.change_visibility(QUEUE, [VisibilityChange(r, visibility, reason)])
                )
            )
            for store, receipt in zip((self.memory, self.sqlite), pair)
        )
        assert _lease_results(mem) == _lease_results(sql)

    @rule(data=st.data(), attempts=st.lists(ATTEMPTS.filter(bool), max_size=2, unique=True))
    def delete(self, data, attempts) -> None:
        pairs = [self.pick_receipts(data) for _ in range(data.draw(st.integers(0, 3)))]
        if not pairs and not attempts:
            return
        answers = []
        for index, store in enumerate((self.memory, self.sqlite)):
            receipts = [pair[index] for pair in pairs]
            answers.append(
                _outcome(lambda s=store, r=receipts: self.run(s.delete(QUEUE, r, attempts)))
            )
        mem, sql = answers
        assert mem[0] == sql[0]
        if mem[0] == "ok":
            assert [r.status for r in mem[1].results] == [r.status for r in sql[1].results]
            assert mem[1].attempt_counts == sql[1].attempt_counts

    @rule(data=st.data(), reason=st.sampled_from(["", "gave up"]))
    def dead_letter(self, data, reason) -> None:
        pairs = [self.pick_receipts(data) for _ in range(data.draw(st.integers(1, 3)))]
        answers = []
        for index, store in enumerate((self.memory, self.sqlite)):
            receipts = [pair[index] for pair in pairs]
            answers.append(
                _outcome(lambda s=store, r=receipts: self.run(s.dead_letter(QUEUE, r, reason)))
            )
        mem, sql = answers
        assert mem[0] == sql[0]
        if mem[0] == "ok":
            assert [r.status for r in mem[1].results] == [r.status for r in sql[1].results]

    @precondition(lambda self: self.receipts)
    @rule(
        data=st.data(),
        body=st.sampled_from([None, b"changed"]),
        visibility=st.sampled_from([None, 0.0, 15.0]),
    )
    def update_message(self, data, body, visibility) -> None:
        pair = self.pick_receipts(data)
        answers = []
        for store, receipt in zip((self.memory, self.sqlite), pair):
            answers.append(
                _outcome(
                    lambda s=store, r=receipt: self.run(
                        s.update_message(QUEUE, r, body=body, visibility_timeout=visibility)
                    )
                )
            )
        mem, sql = answers
        assert mem[0] == sql[0]
        if mem[0] == "ok":
            assert mem[1].visible_at == sql[1].visible_at
            self.receipts.append((mem[1].receipt, sql[1].receipt))
        else:
            assert mem == sql

    @rule(
        queue=st.sampled_from([QUEUE, DLQ]),
        include_leased=st.booleans(),
        include_delayed=st.booleans(),
        channel_filter=FILTERS,
    )
    def peek(self, queue, include_leased, include_delayed, channel_filter) -> None:
        mem, sql = self.both("peek", queue, 50, channel_filter, include_leased, include_delayed)
        assert mem[0] == sql[0] == "ok"
        assert [_peeked(m) for m in mem[1].messages] == [_peeked(m) for m in sql[1].messages]

    # --- message groups ---------------------------------------------------------------------

    @rule(
        queue=st.sampled_from(GROUPED),
        entries=st.lists(
            st.tuples(
                GROUPS, CHANNELS, st.sampled_from([None, None, 5.0]), st.sampled_from([None, 40.0])
            ),
            min_size=1,
            max_size=5,
        ),
    )
    def send_grouped(self, queue, entries) -> None:
        messages = []
        for group, channel, delay, ttl in entries:
            self.next_body += 1
            messages.append(
                NewMessage(
                    body=b"m%d" % self.next_body, channel=channel, delay=delay, ttl=ttl, group=group
                )
            )
        if queue == FAIR and len(messages) > 1:
            messages[-1] = NewMessage(body=messages[-1].body)  # no group: the group ""
        mem, sql = self.both("send", queue, messages)
        assert mem[0] == sql[0] == "ok"

    @rule(
        queue=st.sampled_from([FIFO, FIFO, FAIR, FIFO_DLQ]),
        max_messages=st.integers(1, 6),
        visibility=st.sampled_from([None, 0.0, 10.0]),
        channel_filter=st.sampled_from(["", "", "a"]),
    )
    def receive_grouped(self, queue, max_messages, visibility, channel_filter) -> None:
        mem, sql = self.both("receive", queue, max_messages, visibility, channel_filter)
        if mem[0] == "error" or sql[0] == "error":
            assert mem == sql
            return
        assert [_grouped(m) for m in mem[1].messages] == [_grouped(m) for m in sql[1].messages]
        for a, b in zip(mem[1].messages, sql[1].messages):
            self.grouped_receipts.append((queue, a.receipt, b.receipt))

    @precondition(lambda self: self.grouped_receipts)
    @rule(data=st.data(), release=st.booleans())
    def settle_grouped(self, data, release) -> None:
        """Ack or release (visibility 0) one delivery of a grouped queue."""
        index = data.draw(st.integers(0, len(self.grouped_receipts) - 1))
        queue, *pair = self.grouped_receipts[index]
        answers = []
        for store, receipt in zip((self.memory, self.sqlite), pair):
            if release:
                call = store.change_visibility(queue, [VisibilityChange(receipt, 0.0)])
                answers.append([r.status for r in self.run(call)])
            else:
                answers.append([r.status for r in self.run(store.delete(queue, [receipt])).results])
        assert answers[0] == answers[1]

    @rule(max_messages=st.sampled_from([0, 2]))
    def redrive_grouped(self, max_messages) -> None:
        mem, sql = self.both("redrive", FIFO_DLQ, None, max_messages, "")
        assert mem == sql

    @rule(max_messages=st.sampled_from([0, 1, 3]), channel_filter=FILTERS)
    def redrive(self, max_messages, channel_filter) -> None:
        mem, sql = self.both("redrive", DLQ, None, max_messages, channel_filter)
        assert mem == sql

    @rule(queue=st.sampled_from([QUEUE, OTHER]))
    def purge(self, queue) -> None:
        # Rare enough through the sampled weights of the other rules.
        mem, sql = self.both("purge_queue", queue)
        assert mem == sql

    @rule(seconds=st.sampled_from([0.5, 4.0, 11.0, 31.0, 61.0]))
    def advance(self, seconds) -> None:
        self.clock.advance(seconds)

    @invariant()
    def stats_agree(self) -> None:
        for queue in (QUEUE, DLQ, OTHER, *GROUPED, FIFO_DLQ):
            mem, sql = self.both("stats", queue)
            assert mem[0] == sql[0] == "ok"
            assert asdict(mem[1]) == asdict(sql[1])


def _delivered(message):
    return (
        message.body,
        message.attributes,
        message.channel,
        message.enqueued_at,
        message.expires_at,
        message.visible_at,
        message.delivery_count,
        message.last_error,
    )


def _grouped(message):
    """A delivery of a grouped queue: what _delivered compares, and its group."""
    return (*_delivered(message), message.group)


def _peeked(message):
    return (
        message.body,
        message.attributes,
        message.channel,
        message.enqueued_at,
        message.expires_at,
        message.visible_at,
        message.delivery_count,
        message.last_error,
        message.state,
    )


def _lease_results(outcome):
    if outcome[0] == "error":
        return outcome
    return [(r.status, r.visible_at) for r in outcome[1]]


StoresAgree.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_sqlite_matches_memory = StoresAgree.TestCase
