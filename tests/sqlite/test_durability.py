"""Durability relaxed: leases and acks commit without an fsync of their own, everything else is
fsync'd as with full; and the setting's ways in (the store URL, `leaseq serve --durability`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner

from leaseq.cli.main import cli
from leaseq.server.clock import FakeClock
from leaseq.server.domain.types import NewMessage, QueueConfig, VisibilityChange
from leaseq.server.store import open_store
from leaseq.server.store.sqlite import SqliteStore


async def _opened(path: Path, durability: str) -> SqliteStore:
    store = SqliteStore(path, clock=FakeClock(), durability=durability)
    await store.open()
    return store


async def test_relaxed_commits_leases_and_acks_without_their_own_fsync(tmp_path: Path) -> None:
    store = await _opened(tmp_path / "q.db", "relaxed")
    try:
        await store.create_queue("q", QueueConfig())
        await store.send("q", [NewMessage(b"a"), NewMessage(b"b"), NewMessage(b"c")])
        assert store.unsynced_commit_count == 0  # queue changes and sends: fsync'd
        first = (await store.receive("q", 2)).messages
        assert store.unsynced_commit_count == 1
        await store.change_visibility("q", [VisibilityChange(first[0].receipt, 0.0)])
        assert store.unsynced_commit_count == 2
        await store.delete("q", [first[1].receipt])
        assert store.unsynced_commit_count == 3
        # A group with a send in it is fsync'd as a whole, the receive beside it included.
        commits = store.commit_count
        await asyncio.gather(store.send("q", [NewMessage(b"d")]), store.receive("q", 1))
        assert store.commit_count - commits == 1
        assert store.unsynced_commit_count == 3
    finally:
        await store.close()


async def test_full_fsyncs_every_commit(tmp_path: Path) -> None:
    store = await _opened(tmp_path / "q.db", "full")
    try:
        await store.create_queue("q", QueueConfig())
        await store.send("q", [NewMessage(b"a")])
        got = (await store.receive("q", 1)).messages
        await store.delete("q", [got[0].receipt])
        assert store.commit_count >= 3 and store.unsynced_commit_count == 0
    finally:
        await store.close()


async def test_what_relaxed_commits_is_there_after_a_reopen(tmp_path: Path) -> None:
    store = await _opened(tmp_path / "q.db", "relaxed")
    await store.create_queue("q", QueueConfig())
    await store.send("q", [NewMessage(b"a"), NewMessage(b"b")])
    got = (await store.receive("q", 1)).messages
    await store.delete("q", [got[0].receipt])
    await store.close()
    again = await _opened(tmp_path / "q.db", "full")
    try:
        stats = await again.stats("q")
        assert (stats.visible, stats.deleted_total) == (1, 1)
    finally:
        await again.close()


def test_the_store_url_takes_durability(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/q.db?durability=relaxed")
    assert isinstance(store, SqliteStore) and store.durability == "relaxed"
    assert store.path == tmp_path / "q.db"
    plain = open_store(f"sqlite:///{tmp_path}/q.db")
    assert isinstance(plain, SqliteStore) and plain.durability == "full"


@pytest.mark.parametrize(
    ("query", "message"),
    [("durability=later", "durability must be full or relaxed"), ("sync=off", "unknown parameter")],
)
def test_a_wrong_store_url_parameter_is_refused(tmp_path: Path, query: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_store(f"sqlite:///{tmp_path}/q.db?{query}")


def test_serve_refuses_relaxed_on_a_store_without_it() -> None:
    result = CliRunner().invoke(cli, ["serve", "--store", "memory://", "--durability", "relaxed"])
    assert result.exit_code == 2
    assert "--durability relaxed applies to the SQLite store, not memory" in result.output
    assert "Traceback" not in result.output


def test_serve_refuses_an_unknown_durability() -> None:
    result = CliRunner().invoke(cli, ["serve", "--durability", "sometimes"])
    assert result.exit_code == 2 and "'sometimes' is not one of" in result.output
