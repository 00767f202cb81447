"""The Containerfile cannot be built here (no container engine): these checks keep it in step
with the project, so that it builds and runs as the manifests expect."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "Containerfile").read_text()
LINES = [line.strip() for line in TEXT.splitlines() if line.strip() and not line.startswith("#")]


def instructions(name: str) -> list[str]:
    return [line[len(name) + 1 :] for line in LINES if line.startswith(name + " ")]


def stages() -> list[str]:
    return re.split(r"^FROM ", TEXT, flags=re.MULTILINE)[1:]


def test_slim_python_base() -> None:
    for base in instructions("FROM"):
        assert re.match(r"python:3\.\d+-slim\b", base), base


def test_every_package_folder_goes_into_the_build() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    roots = {folder.split("/")[0] for folder in folders}
    copied = {c.split()[0].rstrip("/") for c in instructions("COPY") if "--from" not in c}
    assert roots <= copied, roots - copied
    assert {"pyproject.toml", "setup.py", pyproject["project"]["readme"]} <= {
        name for c in instructions("COPY") for name in c.split()[:-1]
    }


def test_the_build_stage_can_compile_the_c_extensions() -> None:
    build = stages()[0]
    assert re.search(r"apt-get install .*\bgcc\b", build), "the wheel would lack leaseq._native"


def test_runs_leaseq_serve_as_the_manifests_non_root_user() -> None:
    runtime = stages()[-1]
    [user] = re.findall(r"^USER (\S+)$", runtime, flags=re.MULTILINE)
    uid, _, gid = user.partition(":")
    assert int(uid) > 0 and int(gid or uid) > 0
    statefulset = yaml.safe_load((ROOT / "k8s/overlays/sqlite/statefulset.yaml").read_text())
    assert statefulset["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)
    [entrypoint] = instructions("ENTRYPOINT")
    assert json.loads(entrypoint) == ["leaseq", "serve"]  # exec form: leaseq gets SIGTERM
    exposed = {int(p) for e in instructions("EXPOSE") for p in e.split()}
    assert {50051, 8081, 9090} <= exposed
