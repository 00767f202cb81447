"""mkdocs hook: give the API reference's static analysis (griffe) the import names.

The repository's folders are not laid out as the packages they install as (pyproject.toml maps
`client/` to `leaseq.client`, `spark_ext/` to `leaseq.spark_ext`, ...), so griffe, which reads
source files by path, cannot find `leaseq.client`. Before the build this lays the tree of links
scripts/typecheck lays for mypy, build/import-tree (`leaseq/client -> client/`, ...), which
mkdocs.yml's `paths` points at.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "import-tree"


@event_priority(100)  # before mkdocstrings reads its `paths`
def on_config(config: Any, **_: Any) -> Any:
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    for name, folder in mapping.items():
        link = TREE.joinpath(*name.split("."))
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(ROOT / folder, target_is_directory=True)
    return config
