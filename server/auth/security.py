"""The server's security settings: what `app.build` needs to secure the gRPC port."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import grpc.aio

from ..tls import TLSFiles, server_credentials
from .interceptor import AuthInterceptor
from .policy import FixedPolicy, PolicyFile


@dataclass
class Security:
    """TLS files and the policy (either may be None).

    Authentication is on when there is a policy, or client certificates are required."""

    policy: PolicyFile | FixedPolicy | None = None
    tls: TLSFiles | None = None

    @property
    def authenticates(self) -> bool:
        return self.policy is not None or (self.tls is not None and self.tls.client_ca is not None)

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        if not self.authenticates:
            return []
        mutual = self.tls is not None and self.tls.client_ca is not None
        return [AuthInterceptor(self.policy, certificates=mutual)]

    def credentials(self) -> grpc.ServerCredentials | None:
        if self.tls is None:
            return None
        return server_credentials(self.tls)
