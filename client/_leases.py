"""What a consumer decides, without doing any I/O: the lease table, release delays, reasons.

``Consumer`` (threads) and ``AsyncConsumer`` (asyncio) drive the same bookkeeping, as the
clients drive the same plans: only the waiting and the calls differ between them. Times are
seconds on a local monotonic clock, passed in by the caller, so the rules can be tested with
plain numbers.

When to extend (the Pub/Sub leaser's habit): a lease of length L is renewed at a jittered 0.85
to 0.9 of L after it (re)started, but never later than ``RENEW_MARGIN`` seconds before its end
(short leases would otherwise leave a round trip no room). When the earliest lease is due, every
lease due within the next half lease is extended with it, so the leases of a busy consumer
converge on one ChangeVisibility call per period instead of one per message.

The local end of a lease is an upper bound of the server's: a delivered message's lease ends
``visible_at - server_time`` after the server sent it, which is before it arrived here; an
extension ends ``seconds`` after the server handled it, which is after the request left here.
So extensions are scheduled from the conservative side: the delivery's arrival is taken as its
start (the margin covers the transit), and an extension's start is when its request was sent.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ._wire import seconds
from .types import DurationLike, LeaseStatus, Message

RENEW_LOW, RENEW_HIGH = 0.85, 0.9
"""A lease is renewed after a random fraction in [RENEW_LOW, RENEW_HIGH] of its length."""

RENEW_MARGIN = 0.5
"""...but at least this many seconds before it ends (or half the lease, if that is less)."""

MIN_EXTENSION = 0.1
"""An extension shorter than this (the end of max_lease_time) is not worth a call: the lease is
left to run out instead."""

MAX_VISIBILITY = 7 * 86400.0
"""The longest lease or release delay the server accepts (API.md)."""

MAX_REASON = 1024
"""The longest release reason the server accepts (characters)."""

ReleaseDelay = DurationLike | Callable[[Message, BaseException], DurationLike]
"""A consumer's delay before a failed message is visible again: fixed, or computed from the
message and the handler's exception (e.g. a ``Backoff``)."""


def reason_of(error: BaseException) -> str:
    """The release reason for a handler's exception: ``"ValueError: bad input"``, cut to the
    server's limit."""
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


class Reject(Exception):
    """Raised by a consumer's handler: give up on the message now. It moves to the queue's dead
    letter queue at once (``dead_letter``, with ``reason`` as its ``last_error``) instead of
    being released for another try; the queue needs a dead letter queue (else the message is
    retried when its lease ends, and a warning is logged).

    A batch handler names the messages it rejects with ``messages`` (None: the whole batch);
    the other messages of its batch count as handled and are deleted.

    Example::

        def handle(msg):
            if not msg.body.startswith(b"{"):
                raise Reject("not JSON")
            ...
    """

    def __init__(self, reason: str = "", messages: Iterable[Message] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."
        self.messages = None if messages is None else list(messages)


REJECT = -1.0
"""The delay of a release that is a dead-lettering (a ``Reject``): no real delay is negative."""


@dataclass(frozen=True)
class Backoff:
    """A release delay that grows with each delivery of the message: attempt n (its
    ``delivery_count``) waits ``initial * multiplier**(n-1)`` seconds, capped at ``maximum``,
    spread by +-``jitter`` (a fraction).

    Example::

        Consumer(client, "jobs", handle, release_delay=Backoff(initial=1, maximum=300))
    """

    initial: float = 1.0
    maximum: float = 300.0
    multiplier: float = 2.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0:
            raise ValueError("delays must not be negative")
        if self.multiplier < 1:
            raise ValueError("multiplier must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def __call__(self, message: Message, error: BaseException) -> float:
        exponent = min(max(message.delivery_count, 1) - 1, 64)
        base = min(self.initial * self.multiplier**exponent, self.maximum)
        return base * random.uniform(1.0 - self.jitter, 1.0 + self.jitter)


def release_seconds(delay: ReleaseDelay, message: Message, error: BaseException) -> float:
    """The delay for one failed message, in seconds within the server's range."""
    value = delay(message, error) if callable(delay) else delay
    return min(max(seconds(value), 0.0), MAX_VISIBILITY)


@dataclass(eq=False)
class Lease:
    """One held message: delivered to this consumer and not settled yet.

    Attributes:
        message: the delivery (its receipt is the lease's name).
        received: local time of the delivery.
        ends: local time by which the lease ends at the latest.
        renew_at: local time of the next extension.
        renewing: False once the lease was lost, reached the consumer's max lease time, or is
            being released.
        started: the handler has begun with this message.
        settling: the handler is done; a delete or release is on its way. A message being
            deleted is still extended (a delete that has to wait for a restarting server must
            not find the message delivered again meanwhile); an extension's refusal then only
            means the delete landed first.
    """

    message: Message
    received: float
    ends: float
    renew_at: float
    renewing: bool = True
    started: bool = False
    settling: bool = False

    @property
    def receipt(self) -> str:
        return self.message.receipt


@dataclass(frozen=True)
class Extension:
    """One entry of the next ChangeVisibility call: extend ``lease`` by ``seconds``."""

    lease: Lease
    seconds: float


def renew_offset(length: float) -> float:
    """Seconds after a lease of ``length`` seconds started at which to renew it."""
    jittered = length * random.uniform(RENEW_LOW, RENEW_HIGH)
    return max(0.0, min(jittered, length - min(RENEW_MARGIN, length / 2)))


class LeaseTable:
    """The leases a consumer holds, and when and by how much to extend them.

    Args:
        lease_length: seconds each extension asks for (the consumer's visibility timeout).
        max_lease: seconds after delivery past which a lease is no longer extended (None:
            never stop).
    """

    def __init__(self, lease_length: float, max_lease: float | None) -> None:
        if lease_length <= 0:
            raise ValueError("the lease length must be positive")
        self.lease_length = lease_length
        self.max_lease = max_lease
        self._leases: dict[str, Lease] = {}

    def __len__(self) -> int:
        return len(self._leases)

    def __contains__(self, lease: object) -> bool:
        return isinstance(lease, Lease) and self._leases.get(lease.receipt) is lease

    def add(self, message: Message, now: float) -> Lease:
        """Hold a new delivery. Its lease length is the server's ``visible_at - server_time``
        (the consumer's own length when the server sent no time)."""
        length = self.lease_length
        if message.server_time is not None:
            length = (message.visible_at - message.server_time).total_seconds()
        lease = Lease(message, now, now + length, now + renew_offset(length))
        self._leases[message.receipt] = lease
        return lease

    def remove(self, lease: Lease) -> bool:
        """Forget a settled lease; False if it was not held (already removed)."""
        if self._leases.get(lease.receipt) is lease:
            del self._leases[lease.receipt]
            return True
        return False

    def leases(self) -> list[Lease]:
        return list(self._leases.values())

    def next_renewal(self) -> float | None:
        """When the earliest extension is due (None: nothing to extend)."""
        return min((x.renew_at for x in self._leases.values() if x.renewing), default=None)

    def due(self, now: float) -> tuple[list[Extension], list[Lease]]:
        """The extensions to send now, and the leases that reached the max lease time (no
        longer renewed from now on). Both empty when nothing is due yet."""
        earliest = self.next_renewal()
        if earliest is None or earliest > now:
            return [], []
        horizon = now + self.lease_length / 2
        extensions: list[Extension] = []
        gave_up: list[Lease] = []
        for lease in self._leases.values():
            if not lease.renewing or lease.renew_at > horizon:
                continue
            seconds = self.lease_length
            if self.max_lease is not None:
                seconds = min(seconds, lease.received + self.max_lease - now)
            if seconds < MIN_EXTENSION:
                lease.renewing = False
                gave_up.append(lease)
                continue
            extensions.append(Extension(lease, min(seconds, MAX_VISIBILITY)))
        return extensions, gave_up

    def extended(self, extension: Extension, status: LeaseStatus, sent_at: float) -> bool:
        """Record one entry's outcome; returns False when the lease was lost: the server no
        longer holds it for us (it expired, was superseded, or the message is gone) although
        the message is not being settled (a settle that landed first explains a refusal)."""
        lease = extension.lease
        if status is LeaseStatus.OK:
            lease.ends = sent_at + extension.seconds
            lease.renew_at = sent_at + renew_offset(extension.seconds)
            return True
        lease.renewing = False
        return lease.settling

    def settling(self, leases: Iterable[Lease], *, renew: bool) -> None:
        """The handler is done with these: a delete (``renew``: keep extending until it lands)
        or a release (stop extending: an extension landing after a delayed release would
        undo its delay) is on its way."""
        for lease in leases:
            lease.settling = True
            if not renew:
                lease.renewing = False

    def postpone(self, extensions: Iterable[Extension], until: float) -> None:
        """The call failed as a whole: try these again at ``until``."""
        for extension in extensions:
            if extension.lease.renewing:
                extension.lease.renew_at = until
