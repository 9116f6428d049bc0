"""The generated reference pages (docs/reference/*.md, written by scripts/gen_docs.py) match the code."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return _generator()


def test_the_committed_reference_pages_are_what_the_code_generates(gen):
    stale = gen.stale_pages()
    assert not stale, f"docs/reference/{', '.join(stale)} stale: run python scripts/gen_docs.py and commit the pages"


def test_a_changed_estimator_default_makes_the_estimator_page_stale(gen, monkeypatch):
    from estimators.gagpo import GAGPO

    monkeypatch.setattr(GAGPO, "defaults", {**GAGPO.defaults, "lam": 0.7})
    assert gen.stale_pages({"estimators.md": gen.estimator_page()}) == ["estimators.md"]


def test_a_changed_option_help_makes_the_cli_page_stale(gen, monkeypatch):
    from gagpo_cli.app import app

    monkeypatch.setattr(app.info, "help", "another description")
    assert gen.stale_pages({"cli.md": gen.cli_page()}) == ["cli.md"]


def _field(cls: type, name: str) -> dataclasses.Field:
    return {f.name: f for f in dataclasses.fields(cls)}[name]


def test_a_changed_key_description_makes_the_config_page_stale(gen, monkeypatch):
    from gagpo_cli.config import OptimConfig

    monkeypatch.setattr(_field(OptimConfig, "lr"), "metadata", {"doc": "another description"})
    assert gen.stale_pages({"config.md": gen.config_page()}) == ["config.md"]


def test_a_config_key_without_a_description_is_refused(gen, monkeypatch):
    from gagpo_cli.config import TrainConfig

    monkeypatch.setattr(_field(TrainConfig, "seed"), "metadata", {})
    with pytest.raises(ValueError, match="train.seed has no description"):
        gen.config_page()


def test_every_command_and_config_section_is_on_its_page(gen):
    from gagpo_cli.app import app
    from gagpo_cli.config import ExperimentConfig

    cli, config = gen.cli_page(), gen.config_page()
    for command in app.registered_commands:
        assert f"## `gagpo {command.name}`" in cli
    for f in dataclasses.fields(ExperimentConfig):
        if dataclasses.is_dataclass(getattr(ExperimentConfig(), f.name)):
            assert f"## `{f.name}`" in config


def test_the_cli_page_names_every_option_as_the_parser_reads_it(gen):
    """The page reads the Typer declarations; the parser Typer builds from them must accept each name shown."""
    import typer

    from gagpo_cli.app import app

    page = gen.cli_page()
    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        section = page.split(f"## `gagpo {name}`", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            for opt in (*param.opts, *param.secondary_opts):
                if opt.startswith("-"):
                    assert f"{opt}" in section, f"gagpo {name}: {opt} missing from docs/reference/cli.md"


def test_every_option_the_cli_page_names_is_one_the_parser_accepts(gen):
    """No invented switch: Typer adds ``--no-X`` only to a flag declared without names of its own."""
    import typer

    from gagpo_cli.app import app

    page = gen.cli_page()
    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        section = page.split(f"## `gagpo {name}`", 1)[1].split("\n## ", 1)[0]
        accepted = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        shown = {opt for decl in re.findall(r"^\| `([^`]+)` \|", section, re.M)
                 for opt in re.split(r", |/", decl) if opt.startswith("-")}
        assert shown <= accepted, f"gagpo {name}: the page shows {sorted(shown - accepted)}, which the parser refuses"


def _outside_code(text: str) -> str:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`+[^`]*`+", "", text)


@pytest.mark.parametrize("page", ["cli", "config", "estimator"])
def test_placeholders_are_written_to_show_literally(gen, page):
    """A ``<seed>`` outside code would pass through Markdown as an HTML tag and vanish from the page."""
    text = _outside_code(getattr(gen, f"{page}_page")())
    tags = set(re.findall(r"</?[A-Za-z_][\w.-]*>", text))
    assert not tags, f"{page} page: {sorted(tags)} would render as HTML tags; escape them (gen_docs.literal)"


def test_literal_leaves_code_spans_alone(gen):
    assert gen.literal("in <dir>/s<seed>/ with `<action>`") == "in &lt;dir>/s&lt;seed>/ with `<action>`"


# ------------------------------------------------------------------------------------------ the API pages


def _resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _listed(gen: ModuleType) -> list[tuple[str, str]]:
    return [(module, name) for page in gen.API_PAGES.values() for module, names in page.objects for name in names]


def _public_names(module: str) -> dict[str, ast.stmt]:
    """The public names a module's own source defines at top level (not the ones it imports)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            names.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return {name: node for name, node in names.items() if not name.startswith("_") and name != "annotations"}


def _attribute_docstring(module: str, name: str) -> str | None:
    """The string literal right after the top-level assignment of ``name`` (how griffe reads a constant's doc)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    body = ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body
    for node, after in zip(body, body[1:], strict=False):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        assigned = any(isinstance(t, ast.Name) and t.id == name for t in targets)
        if assigned and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            return after.value.value if isinstance(after.value.value, str) else None
    return None


def test_every_object_the_api_pages_list_exists_and_has_a_docstring(gen):
    """The site shows only documented objects (mkdocs.yml: show_if_no_docstring false): none may vanish."""
    for module, name in _listed(gen):
        obj = _resolve(f"{module}.{name}")
        if inspect.isclass(obj) or inspect.isroutine(obj):
            assert inspect.getdoc(obj), f"{module}.{name} has no docstring: it would be missing from the API pages"
            if inspect.isclass(obj):
                for member, value in vars(obj).items():
                    method = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                    if not member.startswith("_") and inspect.isfunction(method):
                        assert method.__doc__, f"{module}.{name}.{member} has no docstring"
        else:
            assert _attribute_docstring(module, name), f"{module}.{name}: no docstring line after it"


def test_every_public_name_of_the_api_modules_is_on_a_page_or_left_out_with_a_reason(gen):
    listed: dict[str, set[str]] = {}
    for module, name in _listed(gen):
        listed.setdefault(module, set()).add(name)
    for module, names in listed.items():
        left_out = set(gen.API_LEFT_OUT.get(module, {}))
        missing = set(_public_names(module)) - names - left_out
        assert not missing, f"{module}: {sorted(missing)} on no API page; add them to API_PAGES in scripts/gen_docs.py"
        assert not left_out & names, f"{module}: {sorted(left_out & names)} both listed and left out"


@pytest.mark.parametrize("package", ["estimators", "environments"])
def test_the_packages_public_api_is_on_the_api_pages(gen, package):
    documented = {id(_resolve(f"{module}.{name}")) for module, name in _listed(gen)}
    exported = importlib.import_module(package).__all__
    missing = [name for name in exported if id(getattr(importlib.import_module(package), name)) not in documented]
    assert not missing, f"{package}.__all__ names {missing}, which no API page documents"


def test_a_changed_api_list_makes_its_page_stale(gen, monkeypatch):
    page = gen.API_PAGES["environments.md"]
    monkeypatch.setitem(gen.API_PAGES, "environments.md",
                        dataclasses.replace(page, objects=(("environments.base", ("Environment",)),)))
    assert gen.stale_pages({"api/environments.md": gen.api_page(gen.API_PAGES["environments.md"])}) == [
        "api/environments.md"]
