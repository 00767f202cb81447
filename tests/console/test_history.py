"""The per-second series behind the console's charts: traffic.py (sent/acked, every front end)
and the console's depth samples, on an injected clock."""

from __future__ import annotations

from leaseq.server.frontends.console.history import DepthHistory
from leaseq.server.traffic import WINDOW_SECONDS, Traffic


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_traffic_counts_per_second_and_leaves_the_current_second_out() -> None:
    clock = Clock()
    traffic = Traffic(clock)
    traffic.sent("q", 3)
    traffic.sent("q", 2)
    traffic.acked("q", 1)
    assert traffic.series("q", 3) == ([0, 0, 0], [0, 0, 0])  # second 1000 is not over
    clock.now = 1001.5
    traffic.sent("q", 7)
    assert traffic.series("q", 3) == ([0, 0, 5], [0, 0, 1])
    clock.now = 1003.0
    assert traffic.series("q", 3) == ([5, 7, 0], [1, 0, 0])
    assert traffic.series("other", 2) == ([0, 0], [0, 0])
    clock.now = 1000.0 + WINDOW_SECONDS + 5
    assert traffic.series("q") == ([0] * WINDOW_SECONDS, [0] * WINDOW_SECONDS)
    traffic.forget("q")
    assert traffic.series("q", 1) == ([0], [0])


def test_traffic_keeps_at_most_one_entry_per_second_and_window() -> None:
    clock = Clock()
    traffic = Traffic(clock)
    for second in range(3 * WINDOW_SECONDS):
        clock.now = 1000.0 + second
        traffic.sent("q", 1)
        traffic.acked("q", 1)
    assert len(traffic._queues["q"]) == WINDOW_SECONDS
    assert traffic.series("q", 10) == ([1] * 10, [1] * 10)


def test_depth_history_has_gaps_where_nobody_looked() -> None:
    clock = Clock()
    depths = DepthHistory(clock)
    depths.record("q", 5)
    clock.now = 1001.2
    depths.record("q", 6)
    depths.record("q", 7)  # the same second: the last read wins
    clock.now = 1003.0
    depths.record("q", 2)
    assert depths.series("q", 5) == [None, 5, 7, None, 2]
    assert depths.series("unseen", 2) == [None, None]
    depths.forget("q")
    assert depths.series("q", 1) == [None]
