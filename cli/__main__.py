"""``python -m leaseq.cli``: the same as the ``leaseq`` command."""

from .main import cli

cli(prog_name="leaseq")
