"""The generated reference pages (docs/reference/*.md, written by scripts/gen_docs.py) match the code."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
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
