"""Regenerate the checked-in Python stubs of proto/leaseq/v1 (messages, gRPC, and .pyi for both).

Usage: python scripts/gen_protos.py [--out DIR]

With --out the stubs are written below DIR instead of proto/ (tests/test_generated_stubs.py uses
that to check that the committed stubs are not stale). The generator versions are pinned in
pyproject.toml's dev extra so that the output is reproducible.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO_FILES = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in PROTO_ROOT.rglob("*.proto"))


def generate(out: Path) -> None:
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_grpc_out={out}",
        *PROTO_FILES,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=PROTO_ROOT)
    generate(parser.parse_args().out)


if __name__ == "__main__":
    sys.exit(main())
