"""Fixtures for the security tests: a test PKI (made with `cryptography`), a policy file, and
servers with TLS, mutual TLS and the policy in force."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from leaseq.server.auth import PolicyFile, Security, TLSFiles, hash_token
from tests.security.certs import CA, Pem
from tests.support.server import RunningServer, running_server


@dataclass(frozen=True)
class PKI:
    directory: Path
    ca: CA
    ca_path: Path
    server: Pem
    server_cert: Path
    server_key: Path
    worker: Pem  # CN worker.internal: a principal of the policy by certificate
    stranger: Pem  # signed by the CA, named by no principal
    rogue: Pem  # signed by another CA
    rogue_ca: CA

    def tls_files(self, *, mutual: bool) -> TLSFiles:
        return TLSFiles(self.server_cert, self.server_key, self.ca_path if mutual else None)

    def channel_credentials(self, client: Pem | None = None) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.pem,
            private_key=client.key if client else None,
            certificate_chain=client.cert if client else None,
        )


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    directory = tmp_path_factory.mktemp("pki")
    ca = CA("leaseq test CA")
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca.pem)
    server = ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",), server=True)
    server_cert, server_key = server.write(directory, "server")
    rogue_ca = CA("someone else's CA")
    return PKI(
        directory=directory,
        ca=ca,
        ca_path=ca_path,
        server=server,
        server_cert=server_cert,
        server_key=server_key,
        worker=ca.issue("worker.internal", dns=("worker.internal",)),
        stranger=ca.issue("stranger.internal", dns=("stranger.internal",)),
        rogue=rogue_ca.issue("worker.internal", dns=("worker.internal",)),
        rogue_ca=rogue_ca,
    )


# --- the policy of the matrix -----------------------------------------------------------------

ALL = frozenset({"send", "receive", "ack", "peek", "admin", "redrive"})

# principal -> (token, [(queue patterns, actions)]); "cert-worker" has no token: it is named by
# the worker.internal client certificate.
PRINCIPALS: dict[str, tuple[str | None, list[tuple[list[str], frozenset[str]]]]] = {
    "root": ("tok-root-5d1c", [(["*"], ALL)]),
    "sender": ("tok-sender-77af", [(["orders-*"], frozenset({"send"}))]),
    "worker": ("tok-worker-0b3e", [(["orders-*"], frozenset({"receive", "ack"}))]),
    "auditor": ("tok-auditor-e2a9", [(["*"], frozenset({"peek"}))]),
    "operator": ("tok-operator-91c4", [(["orders-*", "bill[ai]ng"], frozenset({"admin"}))]),
    "redriver": ("tok-redriver-4f60", [(["orders-dlq", "orders-e?"], frozenset({"redrive"}))]),
    "mixed": (
        "tok-mixed-c8d2",
        [(["billing"], frozenset({"send"})), (["orders-eu"], frozenset({"peek"}))],
    ),
    "nobody": ("tok-nobody-13b7", []),
    "cert-worker": (None, [(["orders-us"], frozenset({"receive", "ack"}))]),
}
CERT_PRINCIPAL = "cert-worker"


def policy_toml() -> str:
    lines = ["# the matrix's policy: tokens are stored as their sha256 only", ""]
    for name, (token, grants) in PRINCIPALS.items():
        lines += ["[[principals]]", f'name = "{name}"']
        if token:
            lines.append(f'tokens = ["{hash_token(token)}"]')
        if name == CERT_PRINCIPAL:
            lines.append('certificates = ["worker.internal"]')
        for patterns, actions in grants:
            lines += [
                "[[principals.grants]]",
                "queues = [" + ", ".join(f'"{p}"' for p in patterns) + "]",
                "actions = [" + ", ".join(f'"{a}"' for a in sorted(actions)) + "]",
            ]
        lines.append("")
    return "\n".join(lines)


@pytest.fixture
def policy_path(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(policy_toml())
    return path


@pytest.fixture
def mtls_server(pki: PKI, policy_path: Path) -> Iterator[RunningServer]:
    """Mutual TLS and the matrix's policy, over the memory store."""
    security = Security(PolicyFile(policy_path), pki.tls_files(mutual=True))
    with running_server(security=security) as server:
        yield server
