"""The `leaseq` command line (see `leaseq.cli.main`)."""

import os

# gRPC's C core logs to stderr on its own (a TLS handshake with a plaintext server, an empty
# target, ...), around the one line the command prints about the same failure. It reads this
# variable once, when grpc is first imported, which is why it is set here, before any import of
# grpc by the CLI. Set GRPC_VERBOSITY=INFO (or DEBUG) in the environment to see those logs.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
