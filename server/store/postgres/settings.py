"""The PostgreSQL store's tunables (constants) and its URL: libpq's conninfo plus this store's own
parameters."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..config_rows import CONFIG_COLUMNS

DEFAULT_SCHEMA = "leaseq"
DEFAULT_POOL_MIN = 2
DEFAULT_POOL_MAX = 10
# How long an operation waits for a pooled connection before answering UNAVAILABLE.
POOL_TIMEOUT = 5.0
# How long open() waits for the first connections.
OPEN_TIMEOUT = 15.0

# Expired messages one operation removes at most (reads filter expires_at anyway).
SWEEP_LIMIT = 10_000
# Rows of queue_counters per queue (see the module docstring).
COUNTER_SLOTS = 64
# Candidates read per statement by a receive on a queue with a dead letter queue.
PICK_READ_AHEAD = 64
# An ack notifies other replicas (a receiver there may wait for room under max_in_flight) only
# while the queue's in-flight ceiling is within this many leases of the limit (see the package
# docstring, Notifications).
IN_FLIGHT_NOTIFY_MARGIN = 10_000
# Retries of an operation that lost its connection before COMMIT, or hit a deadlock.
RETRIES = 3

# Background work (real seconds).
HOUSEKEEPING_SECONDS = 60.0
HOUSEKEEPING_ROWS = 5_000
CLOCK_SYNC_SECONDS = 60.0
FALLBACK_WAKE_SECONDS = 10.0
# The oldest get_queue answer a replica gives from memory, however quiet its listener has been
# (queue_infos.py: a change is heard within milliseconds; this bounds a listener stuck unnoticed).
QUEUE_INFO_SECONDS = 2.0
# How often the store compares messages' statistics with its live rows (refresh_statistics).
STATS_CHECK_SECONDS = 5.0
# ANALYZE when the statistics count under a tenth of the live rows, and these are at least this.
STALE_STATS_ROWS = 10_000
LISTEN_BACKOFF_MAX = 5.0
# The least time between two NOTIFY statements of one server (notifications.py): changes made
# meanwhile wait for the next, one statement for all. Each NOTIFY is a round trip on a pooled
# connection, and every replica's LISTEN connection (this one's too) reads it: with this gap a
# send costs the server what it costs with no NOTIFY at all, and a fifth less than with a NOTIFY
# after every send (`leaseq bench send --store postgres --batch 100 --producers 2`, the figures
# in docs/performance.md). A receiver waiting on
# another replica hears of a send at most this much later than it would have.
NOTIFY_GAP_SECONDS = 0.005

# Session settings of every store connection: index plans whatever the statistics say (see the
# package docstring, Indexes). The user's own `options` in the URL come first and cannot undo them.
# jit off: a path the enable_* settings disable still costs 10^10 when it is the only one (the
# byte-limited receive sorts its few candidates), far above jit_above_cost, and PostgreSQL then
# JIT-compiled that statement on every execution: about a second of the database's CPU for a
# receive that executes in under a millisecond (EXPLAIN ANALYZE shows both). No statement here is
# long enough for JIT to pay.
PLANNER_SETTINGS = {
    "plan_cache_mode": "force_custom_plan",
    "enable_seqscan": "off",
    "enable_sort": "off",
    "jit": "off",
}

# Autovacuum for the tables that churn: vacuum after this many dead rows, whatever the size.
AUTOVACUUM_THRESHOLD = 5_000

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

_CONFIG_FIELDS = CONFIG_COLUMNS  # a column per QueueConfig field, the retry policy as two

# --- URL and settings -------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresSettings:
    conninfo: str  # what libpq gets: the URL without this store's own parameters
    schema: str = DEFAULT_SCHEMA
    pool_min: int = DEFAULT_POOL_MIN
    pool_max: int = DEFAULT_POOL_MAX
    pool_timeout: float = POOL_TIMEOUT


_OWN_PARAMS = ("schema", "pool_min", "pool_max", "pool_timeout")


def parse_url(url: str) -> PostgresSettings:
    """Split a store URL into libpq's conninfo and this store's parameters (ValueError if bad)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {url!r}")
    own: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        (own.__setitem__(name, value) if name in _OWN_PARAMS else rest.append((name, value)))
    schema = own.get("schema", DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.match(schema):
        raise ValueError(
            f"bad schema name {schema!r} in the store URL: use lowercase letters, digits and _"
            " (at most 63, not starting with a digit)"
        )
    try:
        pool_min = int(own.get("pool_min", DEFAULT_POOL_MIN))
        pool_max = int(own.get("pool_max", max(DEFAULT_POOL_MAX, pool_min)))
        pool_timeout = float(own.get("pool_timeout", POOL_TIMEOUT))
    except ValueError:
        raise ValueError(f"pool_min, pool_max, pool_timeout must be numbers in {url!r}") from None
    if pool_min < 0 or pool_max < 1 or pool_max < pool_min or not pool_timeout > 0:
        raise ValueError(
            f"need 0 <= pool_min <= pool_max, pool_max >= 1, pool_timeout > 0 (in {url!r})"
        )
    conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, _query(rest), parts.fragment))
    return PostgresSettings(conninfo, schema, pool_min, pool_max, pool_timeout)


def with_pool_size(url: str, pool_min: int | None, pool_max: int | None) -> str:
    """The URL with pool_min/pool_max set (None: as it was)."""
    parts = urlsplit(url)
    params = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if not (k == "pool_min" and pool_min is not None)
        and not (k == "pool_max" and pool_max is not None)
    ]
    if pool_min is not None:
        params.append(("pool_min", str(pool_min)))
    if pool_max is not None:
        params.append(("pool_max", str(pool_max)))
    return urlunsplit(parts._replace(query=_query(params)))


def _query(params: list[tuple[str, str]]) -> str:
    """A URL query as libpq reads it: percent-encoded, a space as %20. (urlencode's default
    writes a space as '+', which libpq keeps as a '+': `options=-c%20statement_timeout=5s`
    reached the server as `-c+statement_timeout=5s` and the connection was refused.)"""
    return urlencode(params, quote_via=quote)


@dataclass(frozen=True)
class Tuning:
    """What a PostgresStore may be given instead of the module's constants (tests shorten
    them): the migrations to apply (None: schema.MIGRATIONS, all of them), the most expired
    messages one sweep removes, and how often the planner statistics are checked."""

    migrations: tuple[tuple[int, list[str]], ...] | None = None
    sweep_limit: int = SWEEP_LIMIT
    stats_check_seconds: float = STATS_CHECK_SECONDS


DEFAULT_TUNING = Tuning()
