"""Latency percentiles from the samples the workers collected (seconds in, milliseconds out)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .settings import Latency


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of an ascending, non-empty sequence."""
    rank = max(1, -(-len(ordered) * fraction // 1))  # ceil(n * fraction), at least 1
    return ordered[int(min(rank, len(ordered))) - 1]


def summarize(samples: Iterable[float]) -> Latency:
    """count, p50, p90, p99 and max of the samples (seconds), in ms; None figures when empty."""
    ordered = sorted(samples)
    if not ordered:
        return Latency()
    return Latency(
        count=len(ordered),
        p50_ms=round(percentile(ordered, 0.50) * 1000, 3),
        p90_ms=round(percentile(ordered, 0.90) * 1000, 3),
        p99_ms=round(percentile(ordered, 0.99) * 1000, 3),
        max_ms=round(ordered[-1] * 1000, 3),
    )
