"""The arrows between the server's layers point down (docs/architecture.md).

Walks the real imports of every module of the server (with ast: each `import` and `from ...
import`, relative ones resolved against the module's package, at any depth of the file,
including imports inside functions and under TYPE_CHECKING) and fails when

- a front end (server/frontends/**, the gRPC handlers) imports a store or the long-poll machinery:
  front ends translate their wire format and call the core;
- a store imports a front end (or the core): stores know the domain, nothing above it;
- the domain imports anything of the server but itself and the domain errors: it is I/O-free.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parents[2] / "server"
PACKAGE = "leaseq.server"

FRONT_ENDS = ("leaseq.server.frontends", "leaseq.server.service", "leaseq.server.validation")
STORES = ("leaseq.server.store",)
BELOW_FRONT_ENDS = ("leaseq.server.store", "leaseq.server.longpoll", "leaseq.server.wakeups")
ABOVE_STORES = (*FRONT_ENDS, "leaseq.server.core", "leaseq.server.app")
DOMAIN = "leaseq.server.domain"
DOMAIN_MAY_IMPORT = (DOMAIN, "leaseq.server.errors")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SERVER).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def imports_of(path: Path) -> set[str]:
    """Every module the file imports, as absolute names (for `from x import y`, both x and x.y:
    y may be a submodule)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found.add(origin)
            found.update(f"{origin}.{alias.name}" for alias in node.names)
    return found


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


GRAPH = {module_name(path): imports_of(path) for path in sorted(SERVER.rglob("*.py"))}


def test_the_walk_sees_the_layers() -> None:
    """The walk resolves relative imports: the core is seen to import the store protocol and the
    long-poll module, and the gRPC handlers the core (else the checks below prove nothing)."""
    assert "leaseq.server.store.base" in GRAPH["leaseq.server.core"]
    assert "leaseq.server.longpoll" in GRAPH["leaseq.server.core"]
    assert any(within(n, ("leaseq.server.core",)) for n in GRAPH["leaseq.server.service"])
    assert any(within(n, FRONT_ENDS) for n in GRAPH) and any(within(n, STORES) for n in GRAPH)


@pytest.mark.parametrize("module", sorted(n for n in GRAPH if within(n, FRONT_ENDS)))
def test_a_front_end_imports_no_store_and_no_long_poll(module: str) -> None:
    bad = sorted(n for n in GRAPH[module] if within(n, BELOW_FRONT_ENDS))
    assert not bad, f"{module} imports {bad}: front ends call the core (server/core.py)"


@pytest.mark.parametrize("module", sorted(n for n in GRAPH if within(n, STORES)))
def test_a_store_imports_no_front_end(module: str) -> None:
    bad = sorted(n for n in GRAPH[module] if within(n, ABOVE_STORES))
    assert not bad, f"{module} imports {bad}: stores know the domain, nothing above it"


@pytest.mark.parametrize("module", sorted(n for n in GRAPH if within(n, (DOMAIN,))))
def test_the_domain_imports_only_itself(module: str) -> None:
    bad = sorted(
        n for n in GRAPH[module] if within(n, (PACKAGE,)) and not within(n, DOMAIN_MAY_IMPORT)
    )
    assert not bad, f"{module} imports {bad}: the domain is I/O-free and below everything"
