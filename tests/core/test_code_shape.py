"""Small functions: no function in ``gagpo_cli/`` is longer than 60 lines, its docstring not counted."""

from __future__ import annotations

import ast
from pathlib import Path

LIMIT = 60
ROOT = Path(__file__).resolve().parents[2] / "gagpo_cli"


def _body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    lines = fn.end_lineno - fn.lineno + 1
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def long_functions(root: Path = ROOT, limit: int = LIMIT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _body_lines(node) > limit:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({_body_lines(node)} lines)")
    return found


def test_no_function_in_the_cli_package_exceeds_sixty_lines():
    assert long_functions() == []


def test_the_check_sees_a_long_function(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text('def f():\n    """doc"""\n' + "    x = 1\n" * 60)
    assert long_functions(tmp_path / "pkg") == ["pkg/m.py:1 f (61 lines)"]  # the def line and 60 statements
