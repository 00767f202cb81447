"""The distribution installs only under `leaseq/`: the repository's folders keep their design-card
names (server/, client/, ...) but must never land as top-level modules in site-packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_holds_only_the_leaseq_package(tmp_path: Path) -> None:
    # Build from a clean copy: a build/ folder left in the work tree would hand setuptools stale
    # files (a module that no longer exists would still be in the wheel).
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", "*.egg-info", "node_modules", "__pycache__", "leaseq-data"
        ),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("leaseq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_levels = {name.split("/")[0] for name in names}
    assert {t for t in top_levels if not t.endswith(".dist-info")} == {"leaseq"}
    for expected in (
        "leaseq/v1/queue_service_pb2.py",
        "leaseq/v1/queue_service_pb2_grpc.pyi",
        "leaseq/v1/queue_service.proto",
        "leaseq/server/store/sqlite/store.py",
        "leaseq/client/py.typed",
        "leaseq/cli/main.py",
        "leaseq/spark_ext/__init__.py",
        # The web console's assets are package data: `pip install .` must ship them.
        "leaseq/server/frontends/console/static/index.html",
        "leaseq/server/frontends/console/static/console.js",
        "leaseq/server/frontends/console/static/console.css",
    ):
        assert expected in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "leaseq = leaseq.cli.main:cli" in zipfile.ZipFile(wheel).read(entry_points).decode()
