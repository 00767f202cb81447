"""Render a kustomization: with `kubectl kustomize` when kubectl is on the PATH, else with the
small renderer below (CI machines need not have kubectl; Debian's kubernetes-client is 1.20,
whose kustomize is too old to trust).

The renderer knows exactly what k8s/ uses: `resources` (files and directories with their own
kustomization.yaml). Anything else in a kustomization is refused, so a new kustomize feature in
k8s/ fails here loudly instead of being skipped; tests/k8s checks that both renderers agree
wherever kubectl exists.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "resources"}


class KustomizeError(Exception):
    pass


def kubectl() -> str | None:
    return shutil.which("kubectl")


def render_with_kubectl(directory: Path) -> list[dict[str, Any]]:
    binary = kubectl()
    if binary is None:
        raise KustomizeError("kubectl is not installed")
    done = subprocess.run(
        [binary, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        raise KustomizeError(done.stderr.strip())
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _identity(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    group = obj["apiVersion"].rpartition("/")[0]
    meta = obj["metadata"]
    return group, obj["kind"], meta.get("namespace", ""), meta["name"]


def render_in_python(directory: Path) -> list[dict[str, Any]]:
    objects = _render(directory.resolve(), set())
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = _identity(obj)
        if key in seen:
            raise KustomizeError(f"{directory}: {key} is defined twice")
        seen.add(key)
    return objects


def _render(directory: Path, visiting: set[Path]) -> list[dict[str, Any]]:
    if directory in visiting:
        raise KustomizeError(f"{directory}: kustomizations include each other")
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise KustomizeError(f"{directory} has no kustomization.yaml")
    kustomization = yaml.safe_load(path.read_text()) or {}
    unsupported = set(kustomization) - SUPPORTED
    if unsupported:
        raise KustomizeError(
            f"{path}: {sorted(unsupported)} not supported by tests/k8s/kustomize.py"
        )
    objects: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            objects += _render(target, visiting | {directory})
        elif target.is_file():
            for doc in yaml.safe_load_all(target.read_text()):
                if not doc:
                    continue
                for field in ("apiVersion", "kind"):
                    if field not in doc:
                        raise KustomizeError(f"{target}: an object without {field}")
                if not doc.get("metadata", {}).get("name"):
                    raise KustomizeError(f"{target}: an object without metadata.name")
                objects.append(doc)
        else:
            raise KustomizeError(f"{path}: resource {entry!r} does not exist")
    return objects


def render(directory: Path) -> list[dict[str, Any]]:
    """The objects of the kustomization in directory."""
    if kubectl() is not None:
        return render_with_kubectl(directory)
    return render_in_python(directory)


def by_identity(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    return {_identity(obj): obj for obj in objects}
