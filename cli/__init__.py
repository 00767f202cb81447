"""The `leaseq` command line (see `leaseq.cli.main`)."""
