"""A queue's configuration as the SQL stores keep it: one column per QueueConfig field, the
retry policy as two (NULL when the queue has none)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..domain.types import QueueConfig, RetryPolicy

_PLAIN = tuple(f.name for f in dataclasses.fields(QueueConfig) if f.name != "retry_policy")

CONFIG_COLUMNS = (*_PLAIN, "retry_minimum_backoff", "retry_maximum_backoff")
"""The queues table's configuration columns, in the order of config_values."""


def config_values(config: QueueConfig) -> tuple[Any, ...]:
    """The column values of a configuration, in CONFIG_COLUMNS' order."""
    policy = config.retry_policy
    backoffs = (None, None) if policy is None else (policy.minimum_backoff, policy.maximum_backoff)
    return (*(getattr(config, name) for name in _PLAIN), *backoffs)


def config_from_values(values: Sequence[Any]) -> QueueConfig:
    """The configuration from its column values (CONFIG_COLUMNS' order)."""
    plain = dict(zip(_PLAIN, values[: len(_PLAIN)]))
    minimum, maximum = values[len(_PLAIN) : len(_PLAIN) + 2]
    policy = None if minimum is None else RetryPolicy(float(minimum), float(maximum))
    return QueueConfig(**plain, retry_policy=policy)
