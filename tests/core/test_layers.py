"""Dependencies point down, and no module imports itself round a loop.

Layers: ``gagpo_core`` < ``stats``, ``estimators``, ``environments`` < ``integrations`` (verl, OpenEnv)
< ``gagpo_cli``; a package may import its own layer and the ones below, never one above (the packages
of one layer do not import each other). Inside ``gagpo_cli`` the same rule holds between its rooms
(``CLI_ROOMS``, lowest first). ``benchmarks/`` and ``testkit/`` import nothing from ``tests/``, and
``testkit/`` nothing from ``benchmarks/``. The import graph is read from the source with ``ast``:
top-level imports and those inside functions alike (a lazy import does not hide a cycle or an arrow
back up from this test).
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
# The rooms of gagpo_cli, lowest first: a module imports its own room and those below, never one above.
# "pkg.*" is a subpackage and everything in it; any other name is one module. Every module is in one room.
CLI_ROOMS: list[tuple[str, tuple[str, ...]]] = [
    # what every command shares: settings, errors, paths, models on disk, the evaluation episode loop
    ("base", ("gagpo_cli", "gagpo_cli.agents", "gagpo_cli.config", "gagpo_cli.console", "gagpo_cli.episodes",
              "gagpo_cli.errors", "gagpo_cli.folder_locks", "gagpo_cli.models", "gagpo_cli.output_paths",
              "gagpo_cli.run_layout", "gagpo_cli.threads", "gagpo_cli.weight_files", "gagpo_cli.write_errors")),
    # what the training rooms below share: processes, sharding, prompts, checkpoints, records
    ("train: shared", ("gagpo_cli.train", "gagpo_cli.train.distributed", "gagpo_cli.train.sharding",
                       "gagpo_cli.train.prompts", "gagpo_cli.train.checkpoint", "gagpo_cli.train.config_match",
                       "gagpo_cli.train.records", "gagpo_cli.train.determinism")),
    ("train: policies", ("gagpo_cli.train.policies.*",)),
    ("train: learning", ("gagpo_cli.train.learning.*",)),
    ("train: acting", ("gagpo_cli.train.acting.*",)),
    # the loop and what composes it
    ("train: loop", ("gagpo_cli.train.recipe", "gagpo_cli.train.command", "gagpo_cli.train.config_checks",
                     "gagpo_cli.train.evaluation", "gagpo_cli.train.forecast", "gagpo_cli.train.memory_plan",
                     "gagpo_cli.train.run_dir", "gagpo_cli.train.stopping", "gagpo_cli.train.collector")),
    ("prompting", ("gagpo_cli.prompting.*",)),  # the prompting agents of `gagpo eval --agent`
    ("sweep", ("gagpo_cli.sweep.*",)),
    ("report", ("gagpo_cli.report.*",)),  # reads a sweep's state one way
    # the commands that are not a room of their own, and the app that dispatches them all
    ("app", ("gagpo_cli.app", "gagpo_cli.evaluate", "gagpo_cli.eval_checks", "gagpo_cli.export", "gagpo_cli.plan",
             "gagpo_cli.play", "gagpo_cli.listing", "gagpo_cli.serve")),
]
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


def cli_room(module: str, rooms: list[tuple[str, tuple[str, ...]]] = CLI_ROOMS) -> int | None:
    """The index of ``module``'s room in ``rooms`` (the most specific name that holds it), None if none does."""
    best: tuple[int, int] | None = None  # (specificity, room)
    for index, (_, names) in enumerate(rooms):
        for name in names:
            package = name.removesuffix(".*")
            holds = module == package or (name.endswith(".*") and module.startswith(package + "."))
            specificity = len(package) * 2 + (0 if name.endswith(".*") else 1)
            if holds and (best is None or specificity > best[0]):
                best = (specificity, index)
    return best[1] if best else None


def unplaced(graph: dict[str, set[str]], rooms: list[tuple[str, tuple[str, ...]]] = CLI_ROOMS) -> list[str]:
    """The modules of ``gagpo_cli`` that no room holds."""
    return sorted(m for m in graph if m.split(".")[0] == "gagpo_cli" and cli_room(m, rooms) is None)


def arrows_back_up(graph: dict[str, set[str]], rooms: list[tuple[str, tuple[str, ...]]] = CLI_ROOMS) -> list[str]:
    """``a (room) -> b (room)`` for every import inside ``gagpo_cli`` of a module in a higher room."""
    found = []
    for a, targets in graph.items():
        for b in targets:
            low, high = cli_room(a, rooms), cli_room(b, rooms)
            if low is not None and high is not None and high > low:
                found.append(f"{a} ({rooms[low][0]}) -> {b} ({rooms[high][0]})")
    return sorted(found)


def foreign_imports(folder: Path, forbidden: set[str]) -> list[str]:
    """``file: name`` for every import in a ``.py`` file of ``folder`` of a top-level name in ``forbidden``,
    and every string ``"tests"`` (a path to the tests folder put on ``sys.path``)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and node.value in forbidden:
                names = [node.value]
            else:
                continue
            found += [f"{path.relative_to(folder.parent)}: {name}" for name in names if name.split(".")[0] in forbidden]
    return found


def importable_names(folder: Path) -> set[str]:
    """The names ``folder``'s modules and packages are imported by when it is on ``sys.path``, and its own."""
    names = {folder.name} | {p.stem for p in folder.glob("*.py")}
    return names | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


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


def test_every_cli_module_is_in_one_room(graph):
    assert cli_room("gagpo_cli.train.acting.engines.vllm") == cli_room("gagpo_cli.train.acting")
    assert CLI_ROOMS[cli_room("gagpo_cli.train.prompts")][0] == "train: shared"
    assert CLI_ROOMS[cli_room("gagpo_cli.train")][0] == "train: shared"
    assert unplaced(graph) == []


def test_an_arrow_back_up_is_named():
    rooms = [("low", ("pkg.base", "pkg.sub.*")), ("high", ("pkg.top",))]
    graph = {"pkg.base": {"pkg.sub.leaf"}, "pkg.sub.leaf": {"pkg.top"}, "pkg.top": {"pkg.base"}, "pkg.new": set()}
    assert arrows_back_up(graph, rooms) == ["pkg.sub.leaf (low) -> pkg.top (high)"]
    assert unplaced({"gagpo_cli.new_module": set()}, rooms) == ["gagpo_cli.new_module"]


def test_no_arrow_runs_back_up_between_the_cli_rooms(graph):
    assert arrows_back_up(graph) == []


def test_benchmarks_and_testkit_import_nothing_from_tests(tmp_path):
    tests = ROOT / "tests"
    assert {"envs", "support", "tests"} <= importable_names(tests)
    planted = tmp_path / "benchmarks"
    planted.mkdir()
    (planted / "bench.py").write_text('import sys\nsys.path.append("tests")\nfrom envs.corridor import X\n')
    assert sorted(foreign_imports(planted, importable_names(tests))) == ["benchmarks/bench.py: envs.corridor",
                                                                         "benchmarks/bench.py: tests"]
    assert foreign_imports(ROOT / "benchmarks", importable_names(tests)) == []
    benchmarks = importable_names(ROOT / "benchmarks") - set(PACKAGES)  # benchmarks/estimators.py is not the package
    assert foreign_imports(ROOT / "testkit", importable_names(tests) | benchmarks) == []
