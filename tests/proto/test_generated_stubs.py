"""The checked-in stubs must be what scripts/gen_protos.py makes of the .proto today."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "proto" / "leaseq" / "v1"


def test_stubs_are_not_stale(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    fresh = tmp_path / "leaseq" / "v1"
    names = sorted(p.name for p in fresh.iterdir())
    assert names == [
        "queue_service_pb2.py",
        "queue_service_pb2.pyi",
        "queue_service_pb2_grpc.py",
        "queue_service_pb2_grpc.pyi",
    ]
    _, mismatch, missing = filecmp.cmpfiles(fresh, GENERATED, names, shallow=False)
    assert not mismatch and not missing, (
        f"stale generated stubs {mismatch + missing}: run python scripts/gen_protos.py"
    )


def _buf() -> str:
    found = shutil.which("buf") or shutil.which("buf", path=str(Path(sys.executable).parent))
    assert found, "buf not installed: pip install -e '.[dev]' installs buf-bin"
    return found


def test_buf_lint_standard_passes() -> None:
    result = subprocess.run([_buf(), "lint"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_lint_would_catch_a_violation(tmp_path: Path) -> None:
    # Guard against a lint run that checks nothing: a field in camelCase must fail STANDARD.
    (tmp_path / "buf.yaml").write_text((ROOT / "buf.yaml").read_text())
    bad = tmp_path / "proto" / "leaseq" / "v1"
    bad.mkdir(parents=True)
    (bad / "bad.proto").write_text(
        'syntax = "proto3";\npackage leaseq.v1;\nmessage Bad { string badName = 1; }\n'
    )
    result = subprocess.run([_buf(), "lint"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0
