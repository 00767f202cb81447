"""The policy file: formats, the checks that keep a typo from opening or closing the door, token
hashing, and reloading on change without a restart (a running follow stream included)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from google.protobuf import duration_pb2

from leaseq.cli.main import cli
from leaseq.server.auth import (
    ACTIONS,
    PolicyError,
    PolicyFile,
    Security,
    hash_token,
    load_policy,
    parse_policy,
)
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc
from tests.support.server import running_server

TOKEN = "s3cret-token-for-tests"
TOML = f"""
[[principals]]
name = "app"
tokens = ["{hash_token(TOKEN)}"]
certificates = ["app.internal"]

[[principals.grants]]
queues = ["jobs-*"]
actions = ["send", "receive"]

[[principals.grants]]
queues = ["audit"]
actions = ["*"]
"""


def test_toml_yaml_and_json_say_the_same() -> None:
    data = {
        "principals": [
            {
                "name": "app",
                "tokens": [hash_token(TOKEN)],
                "certificates": ["app.internal"],
                "grants": [
                    {"queues": ["jobs-*"], "actions": ["send", "receive"]},
                    {"queues": ["audit"], "actions": ["*"]},
                ],
            }
        ]
    }
    import yaml

    policies = [
        parse_policy(TOML, ".toml"),
        parse_policy(yaml.safe_dump(data), ".yaml"),
        parse_policy(json.dumps(data), ".json"),
    ]
    for policy in policies:
        app = policy.by_token(TOKEN)
        assert app is not None and app.name == "app"
        assert policy.by_certificate(["other", "app.internal"]) is app
        assert app.allows(frozenset({"send"}), "jobs-1")
        assert not app.allows(frozenset({"peek"}), "jobs-1")
        assert not app.allows(frozenset({"send"}), "jobs")  # the pattern needs the dash
        assert all(app.allows(frozenset({a}), "audit") for a in ACTIONS)
        assert policy.by_token(TOKEN + "x") is None
        assert policy.by_token(hash_token(TOKEN)) is None  # the hash is not a token


def test_token_hash_is_sha256_hex_and_the_cli_makes_it() -> None:
    assert hash_token("hello") == (
        "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    )
    runner = CliRunner()
    by_stdin = runner.invoke(cli, ["auth", "hash-token"], input="hello\n")
    assert by_stdin.exit_code == 0 and by_stdin.output.strip() == hash_token("hello")
    fresh = runner.invoke(cli, ["auth", "new-token"])
    token, digest = fresh.output.split()
    assert len(token) >= 43 and digest == hash_token(token)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[principals]]\nname = "a"\ntokens = ["plain-token-pasted-here"]', "not a token hash"),
        (
            '[[principals]]\nname = "a"\n[[principals.grants]]\nqueues=["*"]\nactions=["sned"]',
            "unknown action(s) sned",
        ),
        (
            '[[principals]]\nname = "a"\n[[principals.grants]]\nqueue=["*"]\nactions=["send"]',
            "unknown key(s) queue",
        ),
        ('[[principals]]\nname = "a"\n[[principals.grants]]\nactions=["send"]', "queues"),
        ("[[principals]]\ntokens = []", "name: required"),
        ('[[principals]]\nname = "a"\n[[principals]]\nname = "a"', "named twice"),
        (
            f'[[principals]]\nname = "a"\ntokens = ["{hash_token("t")}"]\n'
            f'[[principals]]\nname = "b"\ntokens = ["{hash_token("t")}"]',
            "listed twice",
        ),
        ("principals = 3", "principals"),
        ("[[principals]\nname=", "cannot parse"),
    ],
)
def test_malformed_policies_are_refused_without_quoting_secrets(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as error:
        parse_policy(text)
    assert message in str(error.value)
    assert "plain-token-pasted-here" not in str(error.value)
    assert hash_token("t") not in str(error.value)


def test_an_empty_policy_denies_everything() -> None:
    policy = parse_policy("")
    assert policy.principals == () and policy.by_token("anything") is None


class Ticks:
    """A monotonic clock the test moves by hand (the reload check interval)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str) -> None:
    """Replace the file as editors and Kubernetes do: a new file renamed over the old one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_the_file_is_reread_when_it_changes_and_a_broken_one_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    write(path, TOML)
    ticks = Ticks()
    source = PolicyFile(path, check_interval=1.0, monotonic=ticks)
    first = source.current()
    assert first.by_token(TOKEN) is not None

    write(path, TOML.replace(hash_token(TOKEN), hash_token("rotated")))
    assert source.current() is first  # not looked at again within the interval
    ticks.now = 1.0
    second = source.current()
    assert second.by_token(TOKEN) is None and second.by_token("rotated") is not None

    write(path, "this is [ not toml")
    ticks.now = 2.0
    assert source.current() is second  # the previous policy stays in force
    assert source.reloads == 1

    write(path, TOML)
    source.request_reload()  # SIGHUP: at once, whatever the interval
    assert source.current().by_token(TOKEN) is not None and source.reloads == 2
    with pytest.raises(PolicyError):
        load_policy(tmp_path / "missing.toml")


def test_a_file_rewritten_in_place_never_locks_everyone_out(tmp_path: Path) -> None:
    # `cat new > policy.toml` (and Path.write_text) truncates the file before writing it: a
    # check that falls between the two must keep the policy in force, then load the new one.
    path = tmp_path / "policy.toml"
    write(path, TOML)
    ticks = Ticks()
    source = PolicyFile(path, check_interval=1.0, monotonic=ticks)
    first = source.current()

    with open(path, "w"):  # truncated, not yet written
        ticks.now = 1.0
        assert source.current() is first and source.reloads == 0
    assert source.current().by_token(TOKEN) is not None

    path.write_text(TOML.replace(hash_token(TOKEN), hash_token("rotated")))
    ticks.now = 2.0
    rotated = source.current()
    assert rotated.by_token("rotated") is not None and rotated.by_token(TOKEN) is None
    assert source.reloads == 1


def test_a_follow_stream_ends_when_its_grant_is_revoked(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    write(path, TOML)
    security = Security(PolicyFile(path, check_interval=0.0))
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    with running_server(security=security) as server, grpc.insecure_channel(server.target) as ch:
        stub = pb_grpc.QueueServiceStub(ch)
        admin = '[[principals.grants]]\nqueues = ["jobs-1"]\nactions = ["admin"]\n'
        write(path, TOML + admin)
        stub.CreateQueue(pb.CreateQueueRequest(name="jobs-1"), metadata=metadata)

        def send() -> None:
            stub.SendMessages(
                pb.SendMessagesRequest(queue="jobs-1", entries=[pb.SendEntry(body=b"m")]),
                metadata=metadata,
            )

        send()
        stream = stub.GetMessages(
            pb.GetMessagesRequest(
                queue="jobs-1",
                max_messages=1,
                follow=True,
                visibility_timeout=duration_pb2.Duration(seconds=60),
            ),
            metadata=metadata,
            timeout=10,
        )
        assert len(next(stream).messages) == 1
        # Revoke receive on jobs-*: the stream's next batch is refused, and so are new calls.
        write(path, TOML.replace('"send", "receive"', '"send"') + admin)
        send()
        with pytest.raises(grpc.RpcError) as revoked:
            next(stream)
        assert revoked.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as denied:
            list(
                stub.GetMessages(
                    pb.GetMessagesRequest(queue="jobs-1", max_messages=1), metadata=metadata
                )
            )
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
