"""`python -m leaseq.cli` is the `leaseq` command."""

from .main import cli

cli()
