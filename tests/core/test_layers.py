"""Dependencies point down, and no module imports itself round a loop.

Layers: ``gagpo_core`` < ``stats``, ``estimators``, ``environments`` < ``integrations`` (verl, OpenEnv)
< ``gagpo_cli``; a package may import its
own layer and the ones below, never one above (``estimators`` and ``environments`` are one layer
and do not import each other). The import graph is read from the source with ``ast``: top-level
imports and those inside functions alike (a lazy import does not hide a cycle from this test).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gagpo_core", "stats", "estimators", "environments", "integrations", "gagpo_cli")
LAYER = {"gagpo_core": 0, "stats": 1, "estimators": 1, "environments": 1, "integrations": 2, "gagpo_cli": 3}
LIBRARIES = ["estimators", "estimators.gagpo", "estimators.gigpo", "estimators.ppo", "environments",
             "environments.pool", "environments.webshop", "environments.webshop.generate_catalog",
             "environments.alfworld", "environments.alfworld.pddl_export"]


def module_files(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file of ``packages`` (``pkg/__init__.py``
    is the module ``pkg``)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _known(name: str, modules: set[str]) -> str | None:
    """The longest prefix of dotted ``name`` that is one of ``modules`` (None: outside the project)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, source: str, modules: set[str], is_package: bool = False) -> set[str]:
    """The project modules ``module`` imports anywhere in ``source``: ``import a.b`` names ``a.b``,
    ``from a import b`` names ``a.b`` when that is a module, else ``a``; relative imports resolved."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[:len(module.split(".")) - node.level + is_package]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        found.update(target for target in (_known(name, modules) for name in names) if target)
    found.discard(module)
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules it imports (see ``imports_of``)."""
    files = module_files(root, packages)
    names = set(files)
    return {name: imports_of(name, path.read_text(), names, path.name == "__init__.py")
            for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None when the graph has none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of a package's module from a higher layer, or across one layer."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if (top_a := a.split(".")[0]) != (top_b := b.split(".")[0]) and LAYER[top_b] >= LAYER[top_a])


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"p": {"q"}, "q": {"q2"}, "q2": {"q"}}) == ["q", "q2", "q"]


def test_the_graph_reads_function_level_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("def f():\n    from pkg.sub import leaf\n")
    (package / "sub" / "__init__.py").write_text("from . import leaf\n")
    (package / "sub" / "leaf.py").write_text("import os\nfrom .. import other\n")
    (package / "other.py").write_text("def g():\n    import pkg\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": {"pkg.sub.leaf"}, "pkg.sub": {"pkg.sub.leaf"}, "pkg.sub.leaf": {"pkg.other"},
                     "pkg.other": {"pkg"}}
    assert find_cycle(graph) == ["pkg", "pkg.sub.leaf", "pkg.other", "pkg"]


def test_an_upward_import_is_named():
    graph = {"estimators.x": {"gagpo_core.y", "gagpo_cli.z"}, "gagpo_core.y": set(), "gagpo_cli.z": set(),
             "environments.e": {"estimators.x"}}
    assert upward_imports(graph) == ["environments.e -> estimators.x", "estimators.x -> gagpo_cli.z"]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_no_module_imports_itself_round_a_loop(graph):
    assert "gagpo_cli.episodes" in graph["gagpo_cli.evaluate"]  # a top-level import
    assert "gagpo_cli.evaluate" in graph["gagpo_cli.app"]  # one inside a function
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_dependencies_point_down(graph):
    assert upward_imports(graph) == []


def test_libraries_import_no_cli_module():
    code = ("import importlib, sys\n"
            f"for name in {LIBRARIES!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'gagpo_cli'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
