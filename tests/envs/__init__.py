"""The toy environments of the test suite, and a helper that installs two of them as a third-party
plugin package.

- ``corridor``: a small deterministic text game (walk, take, put; ``reach`` and ``fetch`` tasks);
  ``corridor-faulty`` (``faulty.py``) fails on purpose. These two are the plugin package.
- ``half_alphabet``: one step, any word; won when it starts with a..m (generate-mode learning).
- ``pick_word``: one step among four admissible words (score-mode learning).
- ``buttons``: press two named buttons in order (bow-mlp learning, held-out goals).
- ``no_choice``: the first step offers no admissible action (score-mode rollout).

``install_plugin`` writes what pip would: a package folder plus a ``*.dist-info`` holding
``entry_points.txt``, into a folder that the caller puts on ``sys.path`` / ``PYTHONPATH``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).parent
PLUGIN_PACKAGE = "gagpo_test_plugin"
DEFAULT_ENTRY_POINTS = {
    "gagpo.environments": {
        "corridor": f"{PLUGIN_PACKAGE}.corridor:CorridorEnvironment",
        "corridor-faulty": f"{PLUGIN_PACKAGE}.faulty:FaultyCorridorEnvironment",
    }
}


def install_plugin(root: Path, entry_points: dict[str, dict[str, str]] | None = None,
                   extra_modules: dict[str, str] | None = None) -> Path:
    """Install the test environments under ``root`` as package ``gagpo_test_plugin``; returns ``root``.

    ``entry_points`` maps group -> {name: "module:attr"}; ``extra_modules`` maps a module file name
    inside the package to its source text.
    """
    package = root / PLUGIN_PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('"""Third-party gagpo plugins (test package)."""\n')
    for module in ("corridor.py", "faulty.py"):
        shutil.copy(HERE / module, package / module)
    for name, source in (extra_modules or {}).items():
        (package / name).write_text(source)
    dist_info = root / f"{PLUGIN_PACKAGE}-0.1.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN_PACKAGE}\nVersion: 0.1\n")
    lines = []
    for group, names in (entry_points or DEFAULT_ENTRY_POINTS).items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in names.items()]
        lines.append("")
    (dist_info / "entry_points.txt").write_text("\n".join(lines))
    return root


@contextmanager
def plugin_on_sys_path(root: Path, entry_points: dict[str, dict[str, str]] | None = None,
                       extra_modules: dict[str, str] | None = None) -> Iterator[Path]:
    """Install the plugin under ``root`` (see ``install_plugin``) and put it on ``sys.path``; spawned
    worker processes inherit the path."""
    install_plugin(root, entry_points, extra_modules)
    _forget_plugin_modules()
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        _forget_plugin_modules()
        importlib.invalidate_caches()


def _forget_plugin_modules() -> None:
    """Drop the plugin package from ``sys.modules`` so the next install (another folder) is imported afresh."""
    for name in [n for n in sys.modules if n == PLUGIN_PACKAGE or n.startswith(PLUGIN_PACKAGE + ".")]:
        del sys.modules[name]


def run_gagpo(args: list[str], plugin_root: Path | None, stdin: str | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the real ``gagpo`` entry point in a fresh interpreter, with ``plugin_root`` on PYTHONPATH."""
    env = dict(os.environ)
    if plugin_root is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_root), env.get("PYTHONPATH", "")]))
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-c", "from gagpo_cli.app import main; main()", *args],
                          input=stdin, capture_output=True, text=True, env=env, timeout=timeout)
