"""``gagpo list``: rich tables of the registered plugins, broken ones reported as warnings."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gagpo_cli.errors import UsageError
from gagpo_core import plugins


def plugin_summary(obj: Any) -> str:
    """A plugin's one-line description: its ``description``, else the first line of its docstring."""
    description = getattr(obj, "description", None)
    if description:
        return str(description)
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


@dataclass(frozen=True)
class EstimatorFacts:
    """What an estimator class declares, read once for ``gagpo list`` and the generated reference page
    (``scripts/gen_docs.py``): loss settings, source, resolved default options, pinned options, inputs."""

    ratio_mode: str | None  # None: the plugin declares no loss settings
    loss_agg: str
    needs_critic: bool
    needs_groups: bool
    groups_states: bool
    paper: str  # "arXiv ID: short title", the title alone, or ""
    arxiv: str
    options: dict[str, Any]  # the options an instance resolves by default (pinned ones included)
    state_grouping: dict[str, Any]  # grouping options of an estimator that groups states, else {}
    fixed: dict[str, Any]  # options an ablation pins
    requires: tuple[str, ...]  # optional StepBatch inputs it reads


def estimator_facts(obj: Any) -> EstimatorFacts:
    """The declarations of estimator class ``obj`` (a plugin that cannot be built bare keeps its declared
    ``defaults``; a base class may add options an instance resolves)."""
    options = getattr(obj, "defaults", None)
    options = dict(options) if isinstance(options, dict) else {}
    grouping: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        instance = obj()
        options = dict(instance.options)
        grouping = dict(getattr(instance, "state_grouping", {}) or {})
    arxiv, title = getattr(obj, "arxiv", ""), getattr(obj, "paper", "")
    paper = (f"arXiv {arxiv}: {title}" if title else f"arXiv {arxiv}") if arxiv else str(title or "")
    return EstimatorFacts(
        ratio_mode=getattr(obj, "ratio_mode", None), loss_agg=getattr(obj, "loss_agg", "") or "",
        needs_critic=bool(getattr(obj, "needs_critic", False)), needs_groups=bool(getattr(obj, "needs_groups", False)),
        groups_states=bool(getattr(obj, "groups_states", False)), paper=paper, arxiv=str(arxiv or ""),
        options=options, state_grouping=grouping, fixed=dict(getattr(obj, "fixed", {}) or {}),
        requires=tuple(getattr(obj, "requires", ()) or ()))


def loss_text(facts: EstimatorFacts) -> str:
    """Loss settings of an estimator (ratio mode, aggregation, critic), when it declares them."""
    if facts.ratio_mode is None:
        return ""
    critic = " + critic" if facts.needs_critic else ""
    return f"{facts.ratio_mode} ratio{f', {facts.loss_agg}' if facts.loss_agg else ''}{critic}"


def _defaults(facts: EstimatorFacts) -> str:
    """The options an estimator uses by default (``fixed`` ones marked), and the batch inputs it needs."""
    parts = [f"{k}={v}" for k, v in facts.options.items() if k not in facts.fixed]
    parts += [f"{k}={v} (fixed)" for k, v in facts.fixed.items()]
    if facts.requires:
        parts.append(f"needs {', '.join(facts.requires)}")
    return ", ".join(parts)


def _columns(kind: str, name: str, obj: Any) -> list[str]:
    """The kind's own columns of one plugin's row (after name and description)."""
    if kind == "estimators":
        facts = estimator_facts(obj)
        return [loss_text(facts), _defaults(facts)]
    if kind == "environments":
        return [f"{getattr(obj, 'max_steps', '?')} steps; splits {', '.join(getattr(obj, 'splits', ()))}"]
    if kind == "policy-kinds":
        return [f"model.name: {name}; acts in {', '.join(getattr(obj, 'action_modes', ()))}"]
    if kind == "engines":
        problem = obj.problem() if callable(getattr(obj, "problem", None)) else None
        priority = getattr(obj, "auto_priority", 0)
        auto = f"auto tries it (priority {priority})" if priority > 0 else "by name only"
        return [f"{auto}; {'usable here' if problem is None else escape(problem)}"]
    return [""]


COLUMN = {"estimators": "loss", "environments": "budget", "policy-kinds": "used as",
          "engines": "rollout.engine", "action-modes": ""}


def plugin_table(kind: str, console: Console) -> None:
    """Print one table for plugin ``kind`` (a key of ``plugins.GROUPS``) and a warning per broken plugin."""
    group = plugins.GROUPS[kind]
    loaded, failed = plugins.load_all(group)
    packages = {info.name: info.package for info in plugins.describe(group)}
    table = Table(title=f"{kind} ({group})", title_justify="left")
    table.add_column("name", style="bold cyan", no_wrap=True)
    table.add_column("what it is")
    if COLUMN[kind]:
        table.add_column(COLUMN[kind], no_wrap=kind == "estimators")
    if kind == "estimators":
        table.add_column("defaults")
    table.add_column("package", style="dim", no_wrap=True)
    for name, obj in loaded.items():
        row = [name, escape(plugin_summary(obj))]
        if kind == "estimators" and (paper := estimator_facts(obj).paper):
            row[1] += f"\n[dim]{escape(paper)}[/dim]"
        row += _columns(kind, name, obj) if COLUMN[kind] else []
        row.append(packages.get(name, "?"))
        table.add_row(*row)
    if kind == "policy-kinds":  # the default kind, which no entry point names
        table.add_row("[dim](any other)[/dim]", "a language model (transformers): a built-in alias, a folder or "
                      "a hub id", "model.name: that model; acts in generate, score", "gagpo")
    console.print(table)
    for name, error in failed.items():
        console.print(f"[yellow]warning:[/yellow] {plugins.SINGULAR[group]} plugin '{name}' failed to load and is "
                      f"skipped: {escape(error)}")


def experiment_table(console: Console) -> None:
    """Print the built-in experiment files with their descriptions and main settings."""
    from gagpo_cli.config import builtin_experiments, load_config

    table = Table(title="experiments (gagpo train NAME)", title_justify="left")
    table.add_column("name", style="bold cyan", no_wrap=True)
    table.add_column("what it is")
    table.add_column("estimator / env / model", style="dim")
    for name, path in builtin_experiments().items():
        try:
            cfg = load_config(path)
        except UsageError as exc:
            console.print(f"[yellow]warning:[/yellow] experiment '{name}' is invalid: {exc}")
            continue
        table.add_row(name, cfg.description, f"{cfg.estimator.name} / {cfg.env.name} / {cfg.model.name}")
    console.print(table)
    sweep_table(console)


def sweep_table(console: Console) -> None:
    """Print the built-in sweep files (``experiments/sweeps/``) with their size."""
    from gagpo_cli.sweep.spec import build_sweep, builtin_sweeps

    table = Table(title="sweeps (gagpo ablate NAME)", title_justify="left")
    table.add_column("name", style="bold cyan", no_wrap=True)
    table.add_column("what it is")
    table.add_column("cells x seeds", style="dim")
    for name, path in builtin_sweeps().items():
        try:
            sweep = build_sweep(str(path))
        except (UsageError, ValueError) as exc:
            console.print(f"[yellow]warning:[/yellow] sweep '{name}' is invalid: {exc}")
            continue
        table.add_row(name, sweep.description, f"{len(sweep.cells)} x {len(sweep.seeds)}")
    console.print(table)


LIST_KINDS = (*plugins.GROUPS, "experiments")


def print_listing(kind: str | None) -> None:
    """Print the tables of ``kind`` (a plugin kind of ``plugins.GROUPS``, or experiments; None: all).

    Unknown kinds raise ``UsageError`` naming the valid ones.
    """
    if kind is not None and kind not in LIST_KINDS:
        raise UsageError(plugins.unknown_name_message("list kind", kind, list(LIST_KINDS)))
    console = Console()
    for k in [kind] if kind else LIST_KINDS:
        if k == "experiments":
            experiment_table(console)
        else:
            plugin_table(k, console)
