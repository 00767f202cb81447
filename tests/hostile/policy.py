"""A small auth policy for the hostile-client tests: `root` may do everything, `alice` only
holds the queues `a-*`."""

from __future__ import annotations

from leaseq.server.auth import FixedPolicy, Security, hash_token, parse_policy

ROOT_TOKEN = "root-token-hostile"
ALICE_TOKEN = "alice-token-hostile"

POLICY_TOML = f"""
[[principals]]
name = "root"
tokens = ["{hash_token(ROOT_TOKEN)}"]
[[principals.grants]]
queues = ["*"]
actions = ["*"]

[[principals]]
name = "alice"
tokens = ["{hash_token(ALICE_TOKEN)}"]
[[principals.grants]]
queues = ["a-*"]
actions = ["*"]
"""

ROOT = (("authorization", f"Bearer {ROOT_TOKEN}"),)
ALICE = (("authorization", f"Bearer {ALICE_TOKEN}"),)


def security() -> Security:
    return Security(FixedPolicy(parse_policy(POLICY_TOML)))
