"""A front end's own name -> value pairs (Store.queue_state, Store.settings): rows of
queue_state (delete_queue removes a queue's with its other rows) and of settings."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from ...errors import QueueNotFound
from .transaction import _Tx

T = TypeVar("T")
Run = Callable[..., Awaitable[Any]]

_QUEUE = "queue = %(queue)s AND namespace = %(namespace)s"


class DialectState:
    """The four operations, each one transaction of the store's `_run`."""

    def __init__(self, run: Run) -> None:
        self._run = run

    async def queue_state(self, name: str, namespace: str) -> dict[str, str]:
        async def op(tx: _Tx) -> dict[str, str]:
            queue = await _queue_id(tx, name)
            return await _read(tx, "queue_state", _QUEUE, {"queue": queue, "namespace": namespace})

        result: dict[str, str] = await self._run(op)
        return result

    async def update_queue_state(
        self, name: str, namespace: str, changes: Mapping[str, str | None], replace: bool
    ) -> dict[str, str]:
        async def op(tx: _Tx) -> dict[str, str]:
            queue = await _queue_id(tx, name)
            params = {"queue": queue, "namespace": namespace}
            return await _update(tx, "queue_state", _QUEUE, params, changes, replace)

        result: dict[str, str] = await self._run(op)
        return result

    async def settings(self, namespace: str) -> dict[str, str]:
        async def op(tx: _Tx) -> dict[str, str]:
            return await _read(
                tx, "settings", "namespace = %(namespace)s", {"namespace": namespace}
            )

        result: dict[str, str] = await self._run(op, one_read=True)
        return result

    async def update_settings(
        self, namespace: str, changes: Mapping[str, str | None], replace: bool
    ) -> dict[str, str]:
        async def op(tx: _Tx) -> dict[str, str]:
            where, params = "namespace = %(namespace)s", {"namespace": namespace}
            return await _update(tx, "settings", where, params, changes, replace)

        result: dict[str, str] = await self._run(op)
        return result


async def _queue_id(tx: _Tx, name: str) -> int:
    # FOR KEY SHARE: a delete_queue running meanwhile waits for this transaction (and then
    # removes what it wrote), as for sends.
    found = await tx.find_queue(name, "FOR KEY SHARE")
    if found is None:
        raise QueueNotFound(name)
    return found.id


async def _read(tx: _Tx, table: str, where: str, params: dict[str, Any]) -> dict[str, str]:
    rows = await tx.conn.execute(f"SELECT name, value FROM {table} WHERE {where}", params)
    return {name: value for name, value in await rows.fetchall()}


async def _update(
    tx: _Tx,
    table: str,
    where: str,
    params: dict[str, Any],
    changes: Mapping[str, str | None],
    replace: bool,
) -> dict[str, str]:
    if replace:
        await tx.conn.execute(f"DELETE FROM {table} WHERE {where}", params)
    owners = [key for key in params]
    for key, value in changes.items():
        pair = {**params, "name": key, "value": value}
        if value is None:
            await tx.conn.execute(f"DELETE FROM {table} WHERE {where} AND name = %(name)s", pair)
        else:
            await tx.conn.execute(
                f"INSERT INTO {table} ({', '.join(owners)}, name, value)"
                f" VALUES ({', '.join(f'%({k})s' for k in owners)}, %(name)s, %(value)s)"
                f" ON CONFLICT ({', '.join(owners)}, name) DO UPDATE SET value = EXCLUDED.value",
                pair,
            )
    return await _read(tx, table, where, params)
