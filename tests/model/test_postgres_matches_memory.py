"""The same random operation sequences as test_sqlite_matches_memory, against the PostgreSQL store
(a schema of its own per example, on the same fake clock) and the memory reference.

Fewer examples than the SQLite run: every example creates and drops a schema."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from leaseq.server.clock import FakeClock
from leaseq.server.store.memory import MemoryStore
from leaseq.server.store.postgres import PostgresStore
from tests.support.postgres import drop_schema, new_schema, require_postgres, store_url

from .test_sqlite_matches_memory import StoresAgree


class PostgresAgrees(StoresAgree):
    """StoresAgree with the PostgreSQL store in the place of the SQLite one."""

    def __init__(self) -> None:
        RuleBasedStateMachine.__init__(self)
        self.loop = asyncio.new_event_loop()
        self.schema = new_schema()
        self.clock = FakeClock()
        self.memory = MemoryStore(clock=self.clock)
        self.sqlite = PostgresStore.from_url(  # the name the rules use for "the other store"
            store_url(self.schema, pool_min=1, pool_max=2), clock=self.clock
        )
        self.run(self.memory.open())
        self.run(self.sqlite.open())
        self.next_body = 0
        self.receipts: list[tuple[str, str]] = []
        self.bodies: list[dict[str, bytes]] = [{}, {}]
        self.grouped_receipts: list[tuple[str, str, str]] = []

    def teardown(self) -> None:
        self.run(self.memory.close())
        self.run(self.sqlite.close())
        self.loop.close()
        drop_schema(self.schema)


def test_postgres_matches_memory() -> None:
    require_postgres()
    run_state_machine_as_test(
        PostgresAgrees,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
