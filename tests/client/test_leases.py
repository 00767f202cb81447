"""The consumer's bookkeeping, with plain numbers for times: when leases are extended, by how
much, what a refusal means, release delays and reasons; and the retry policy's arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leaseq.client import Backoff, DeadlineExceeded, InvalidArgument, RetryPolicy, Unavailable
from leaseq.client._leases import (
    MAX_REASON,
    MAX_VISIBILITY,
    Lease,
    LeaseTable,
    reason_of,
    release_seconds,
    renew_offset,
)
from leaseq.client.types import LeaseStatus, Message

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def message(receipt: str, lease: float = 10.0, delivery_count: int = 1) -> Message:
    return Message(
        message_id=f"id-{receipt}",
        receipt=receipt,
        body=b"",
        attributes={},
        channel="",
        enqueued_at=T0,
        expires_at=T0 + timedelta(days=1),
        visible_at=T0 + timedelta(seconds=lease),
        delivery_count=delivery_count,
        last_error="",
        server_time=T0,
    )


@pytest.mark.parametrize("length", [0.2, 1.0, 2.0, 10.0, 30.0, 3600.0])
def test_renewal_comes_at_about_nine_tenths_and_leaves_a_margin(length: float) -> None:
    for _ in range(200):
        offset = renew_offset(length)
        assert 0 < offset < length
        assert offset <= 0.9 * length
        assert length - offset >= min(0.5, length / 2) - 1e-9  # room for the round trip
        if length >= 5:
            assert offset >= 0.85 * length


def test_the_lease_length_is_the_servers() -> None:
    table = LeaseTable(lease_length=30, max_lease=None)
    lease = table.add(message("a", lease=10), now=100.0)  # the server leased for 10 s
    assert lease.ends == 110.0
    assert 108.5 <= lease.renew_at <= 109.0


def test_nothing_is_due_before_the_earliest_renewal() -> None:
    table = LeaseTable(lease_length=10, max_lease=None)
    table.add(message("a"), now=0.0)
    assert table.due(5.0) == ([], [])
    extensions, gave_up = table.due(9.0)
    assert [x.lease.receipt for x in extensions] == ["a"] and gave_up == []
    assert extensions[0].seconds == 10


def test_leases_due_within_half_a_lease_join_the_same_call() -> None:
    table = LeaseTable(lease_length=10, max_lease=None)
    table.add(message("a"), now=0.0)
    table.add(message("b"), now=3.0)  # due ~3 s after a: joins a's call
    table.add(message("c"), now=8.9)  # just delivered: waits for the next call
    extensions, _ = table.due(9.0)
    assert sorted(x.lease.receipt for x in extensions) == ["a", "b"]


def test_an_extension_moves_the_lease_end_from_when_it_was_sent() -> None:
    table = LeaseTable(lease_length=10, max_lease=None)
    table.add(message("a"), now=0.0)
    [extension], _ = table.due(9.0)
    assert table.extended(extension, LeaseStatus.OK, sent_at=9.0)
    assert extension.lease.ends == 19.0
    assert 17.5 <= extension.lease.renew_at <= 18.0
    assert table.next_renewal() == extension.lease.renew_at


@pytest.mark.parametrize(
    "status",
    [LeaseStatus.LEASE_EXPIRED, LeaseStatus.RECEIPT_SUPERSEDED, LeaseStatus.MESSAGE_NOT_FOUND],
)
def test_a_refused_extension_is_a_lost_lease_unless_a_settle_explains_it(
    status: LeaseStatus,
) -> None:
    table = LeaseTable(lease_length=10, max_lease=None)
    lost = table.add(message("lost"), now=0.0)
    deleting = table.add(message("deleting"), now=0.0)
    extensions, _ = table.due(9.0)
    table.settling([deleting], renew=True)  # the handler finished meanwhile
    outcome = {x.lease.receipt: table.extended(x, status, sent_at=9.0) for x in extensions}
    assert outcome == {"lost": False, "deleting": True}
    assert not lost.renewing and table.next_renewal() is None


def test_a_message_being_deleted_is_still_extended_one_being_released_is_not() -> None:
    table = LeaseTable(lease_length=10, max_lease=None)
    deleting = table.add(message("d"), now=0.0)
    releasing = table.add(message("r"), now=0.0)
    table.settling([deleting], renew=True)
    table.settling([releasing], renew=False)
    extensions, _ = table.due(9.5)
    assert [x.lease for x in extensions] == [deleting]


def test_extensions_stop_at_the_max_lease_time() -> None:
    table = LeaseTable(lease_length=10, max_lease=25)
    lease = table.add(message("a"), now=0.0)
    [x], _ = table.due(9.0)
    table.extended(x, LeaseStatus.OK, 9.0)
    [x], _ = table.due(lease.renew_at)
    assert x.seconds == pytest.approx(25 - lease.renew_at)  # only up to the max lease time
    table.extended(x, LeaseStatus.OK, lease.renew_at)
    extensions, gave_up = table.due(24.95)
    assert extensions == [] and gave_up == [lease]
    assert not lease.renewing and table.next_renewal() is None


def test_a_failed_call_is_tried_again_later() -> None:
    table = LeaseTable(lease_length=10, max_lease=None)
    table.add(message("a"), now=0.0)
    extensions, _ = table.due(9.0)
    table.postpone(extensions, until=9.2)
    assert table.due(9.1) == ([], [])
    assert len(table.due(9.2)[0]) == 1


def test_remove_forgets_only_the_same_delivery() -> None:
    table = LeaseTable(lease_length=10, max_lease=None)
    first = table.add(message("a"), now=0.0)
    stale = Lease(message("a"), 0.0, 10.0, 9.0)
    assert not table.remove(stale)
    assert first in table and table.remove(first) and len(table) == 0


def test_reasons_name_the_exception_and_fit_the_server_limit() -> None:
    assert reason_of(ValueError("bad input")) == "ValueError: bad input"
    assert reason_of(KeyError()) == "KeyError"
    long = reason_of(RuntimeError("x" * 5000))
    assert len(long) == MAX_REASON and long.startswith("RuntimeError: xxx")


def test_release_delays() -> None:
    error = ValueError("boom")
    assert release_seconds(0, message("a"), error) == 0.0
    assert release_seconds(timedelta(minutes=2), message("a"), error) == 120.0
    assert release_seconds(10**9, message("a"), error) == MAX_VISIBILITY
    backoff = Backoff(initial=1, maximum=30, multiplier=2, jitter=0)
    delays = [release_seconds(backoff, message("a", delivery_count=n), error) for n in (1, 2, 3, 9)]
    assert delays == [1, 2, 4, 30]
    with pytest.raises(ValueError):
        Backoff(multiplier=0.5)


# --- RetryPolicy: DEADLINE_EXCEEDED and the never-give-up backoff ----------------------------


def test_deadline_exceeded_is_retried_unless_turned_off() -> None:
    assert RetryPolicy().delay(1, DeadlineExceeded("slow")) is not None
    assert RetryPolicy(retry_deadline_exceeded=False).delay(1, DeadlineExceeded("slow")) is None
    assert RetryPolicy().delay(1, InvalidArgument("bad")) is None


def test_backoff_ignores_max_attempts_and_honours_retry_info() -> None:
    policy = RetryPolicy(max_attempts=1, initial_backoff=0.1, max_backoff=2, jitter=0)
    assert [policy.backoff(n) for n in (1, 2, 3, 10, 10_000)] == [0.1, 0.2, 0.4, 2, 2]
    assert policy.backoff(5, Unavailable("draining", retry_after=0.5)) == 0.5
    assert policy.backoff(5, Unavailable("draining", retry_after=60)) == 2
