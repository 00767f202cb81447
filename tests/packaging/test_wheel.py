"""The distribution installs only under `leaseq/`: the repository's folders keep their design-card
names (server/, client/, ...) but must never land as top-level modules in site-packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _build_wheel(tmp_path: Path, env: dict[str, str] | None = None) -> list[str]:
    """The names in a wheel built from a clean copy of the repository: a build/ folder left in
    the work tree would hand setuptools stale files (a module that no longer exists would still
    be in the wheel), and an in-place built extension would be copied as it is."""
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git",
            "build",
            "dist",
            "*.egg-info",
            "node_modules",
            "__pycache__",
            "leaseq-data",
            "*.so",
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        env=env,
    )
    [wheel] = tmp_path.glob("leaseq-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_wheel_builds_without_a_c_compiler(tmp_path: Path) -> None:
    """The C extension is optional (setup.py): with no working compiler the wheel still builds,
    without it, and leaseq._native falls back to the pure-Python twins."""
    names = _build_wheel(tmp_path, env={**os.environ, "CC": "false", "LDSHARED": "false"})
    assert "leaseq/_native/__init__.py" in names
    assert not [n for n in names if n.startswith("leaseq/_native/speedups") and n.endswith(".so")]


def test_wheel_holds_only_the_leaseq_package(tmp_path: Path) -> None:
    names = _build_wheel(tmp_path)
    wheel = next(tmp_path.glob("leaseq-*.whl"))
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
        "leaseq/_native/__init__.py",
        # The web console's assets are package data: `pip install .` must ship them.
        "leaseq/server/frontends/console/static/index.html",
        "leaseq/server/frontends/console/static/console.js",
        "leaseq/server/frontends/console/static/console.css",
    ):
        assert expected in names
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler):  # the optional C extension is built where it can be
        assert [n for n in names if n.startswith("leaseq/_native/speedups") and n.endswith(".so")]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "leaseq = leaseq.cli.main:cli" in zipfile.ZipFile(wheel).read(entry_points).decode()
