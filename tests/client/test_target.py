"""parse_target: leaseq's rules for HOST:PORT before gRPC sees a target (gRPC's own: no port
means 443, a port above 65535 wraps around, an empty target logs from its C core)."""

from __future__ import annotations

import pytest

from leaseq.client import QueueClient
from leaseq.client.target import InvalidTarget, parse_target


@pytest.mark.parametrize(
    "target, expected",
    [
        ("localhost", "localhost:50051"),
        ("queue.internal:6000", "queue.internal:6000"),
        ("127.0.0.1:1", "127.0.0.1:1"),
        ("127.0.0.1:65535", "127.0.0.1:65535"),
        ("[::1]", "[::1]:50051"),
        ("[::1]:7000", "[::1]:7000"),
        ("dns:///queue.internal:7000", "dns:///queue.internal:7000"),
        ("unix:/run/leaseq.sock", "unix:/run/leaseq.sock"),
        ("ipv4:127.0.0.1:7000", "ipv4:127.0.0.1:7000"),
    ],
)
def test_valid_targets(target: str, expected: str) -> None:
    assert parse_target(target) == expected


@pytest.mark.parametrize(
    "target, problem",
    [
        ("", "it is empty: give HOST:PORT, e.g. 127.0.0.1:50051"),
        ("   ", "it is empty: give HOST:PORT, e.g. 127.0.0.1:50051"),
        ("127.0.0.1:99999", "port 99999 is outside 1..65535"),
        ("127.0.0.1:0", "port 0 is outside 1..65535"),
        ("127.0.0.1:http", "the port 'http' is not a number"),
        ("127.0.0.1:", "the port '' is not a number"),
        (":50051", "no host: give HOST:PORT, e.g. 127.0.0.1:50051"),
        ("::1", "put an IPv6 address in brackets, e.g. [::1]:50051"),
        ("[::1", "no ']' after the IPv6 address"),
        ("host name:1", "it contains white space"),
    ],
)
def test_invalid_targets(target: str, problem: str) -> None:
    with pytest.raises(InvalidTarget) as caught:
        parse_target(target)
    assert caught.value.problem == problem
    assert str(caught.value) == f"target {target!r}: {problem}"


def test_the_client_applies_the_rules() -> None:
    with QueueClient("localhost") as client:
        assert client.target == "localhost:50051"
    with pytest.raises(ValueError, match="outside 1..65535"):
        QueueClient("localhost:99999")
