"""A front end's own name -> value pairs (Store.queue_state, Store.settings): rows of
queue_state (deleted with their queue by ON DELETE CASCADE) and of settings, read and written in
the writer's transaction (`_Tx`)."""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import QueueNotFound
from .transaction import _Tx


def _queue_id(tx: _Tx, name: str) -> int:
    found = tx.find_queue(name)
    if found is None:
        raise QueueNotFound(name)
    return found.id


def queue_state(tx: _Tx, name: str, namespace: str) -> dict[str, str]:
    return _read(tx, "queue_state", "queue = ? AND namespace = ?", (_queue_id(tx, name), namespace))


def update_queue_state(
    tx: _Tx, name: str, namespace: str, changes: Mapping[str, str | None], replace: bool
) -> dict[str, str]:
    where = ("queue = ? AND namespace = ?", (_queue_id(tx, name), namespace))
    return _update(tx, "queue_state", "queue, namespace", where, changes, replace)


def settings(tx: _Tx, namespace: str) -> dict[str, str]:
    return _read(tx, "settings", "namespace = ?", (namespace,))


def update_settings(
    tx: _Tx, namespace: str, changes: Mapping[str, str | None], replace: bool
) -> dict[str, str]:
    return _update(tx, "settings", "namespace", ("namespace = ?", (namespace,)), changes, replace)


def _read(tx: _Tx, table: str, where: str, params: tuple[object, ...]) -> dict[str, str]:
    return dict(tx.conn.execute(f"SELECT name, value FROM {table} WHERE {where}", params))


def _update(
    tx: _Tx,
    table: str,
    owner: str,
    where: tuple[str, tuple[object, ...]],
    changes: Mapping[str, str | None],
    replace: bool,
) -> dict[str, str]:
    clause, params = where
    if replace:
        tx.conn.execute(f"DELETE FROM {table} WHERE {clause}", params)
    for key, value in changes.items():
        if value is None:
            tx.conn.execute(f"DELETE FROM {table} WHERE {clause} AND name = ?", (*params, key))
        else:
            tx.conn.execute(
                f"INSERT OR REPLACE INTO {table} ({owner}, name, value)"
                f" VALUES ({', '.join('?' * (len(params) + 2))})",
                (*params, key, value),
            )
    return _read(tx, table, clause, params)
