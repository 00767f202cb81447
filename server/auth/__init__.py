"""Who may do what, in three parts:

- `policy`: principals, their grants and credentials (token hashes, certificate names, SQS access
  keys, Azure account keys), parsed from the policy file and reloaded when it changes; every front
  end asks it (`Principal.allows`);
- `interceptor`: the gRPC interceptor that authenticates each QueueService call and checks what
  it needs (`RULES`) before the handler runs;
- `security`: the server's settings (`Security`: the policy and the TLS files of `..tls`).

The names below are this package's public ones; `TLSFiles` lives in `leaseq.server.tls` and is
named here too for the callers that build a `Security`.
"""

from ..tls import TLSFiles
from .interceptor import RULES, SERVICE_PREFIX, AuthInterceptor, certificate_names
from .policy import (
    ACTIONS,
    ANY,
    EVERYTHING,
    HASH_PREFIX,
    MAX_TOKEN_CHARS,
    FixedPolicy,
    Grant,
    Policy,
    PolicyError,
    PolicyFile,
    Principal,
    hash_token,
    load_policy,
    new_token,
    parse_policy,
    policy_from_data,
)
from .security import Security

__all__ = [
    "ACTIONS",
    "ANY",
    "EVERYTHING",
    "HASH_PREFIX",
    "MAX_TOKEN_CHARS",
    "RULES",
    "SERVICE_PREFIX",
    "AuthInterceptor",
    "FixedPolicy",
    "Grant",
    "Policy",
    "PolicyError",
    "PolicyFile",
    "Principal",
    "Security",
    "TLSFiles",
    "certificate_names",
    "hash_token",
    "load_policy",
    "new_token",
    "parse_policy",
    "policy_from_data",
]
