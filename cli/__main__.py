"""``python -m leaseq.cli``: the same as the ``leaseq`` command."""

from .main import cli

# Guarded: `serve --workers N` starts its workers by multiprocessing's spawn, which imports the
# main module again (as __mp_main__) in every worker.
if __name__ == "__main__":
    cli(prog_name="leaseq")
