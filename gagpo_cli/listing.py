"""``gagpo list``: rich tables of the registered plugins, broken ones reported as warnings."""

from __future__ import annotations

import contextlib
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gagpo_cli.errors import UsageError
from gagpo_core import plugins


def _summary(obj: Any) -> str:
    description = getattr(obj, "description", None)
    if description:
        return str(description)
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def _extra(obj: Any) -> str:
    """Loss settings of an estimator (ratio mode, aggregation, critic), when it declares them."""
    ratio = getattr(obj, "ratio_mode", None)
    if ratio is None:
        return ""
    aggregation = getattr(obj, "loss_agg", None)
    critic = " + critic" if getattr(obj, "needs_critic", False) else ""
    return f"{ratio} ratio{f', {aggregation}' if aggregation else ''}{critic}"


def _paper(obj: Any) -> str:
    """The method's source (``arXiv ID: short title``), when the estimator declares it."""
    arxiv, title = getattr(obj, "arxiv", ""), getattr(obj, "paper", "")
    if arxiv:
        return f"arXiv {arxiv}: {title}" if title else f"arXiv {arxiv}"
    return str(title or "")


def _defaults(obj: Any) -> str:
    """The options an estimator uses by default (``fixed`` ones marked), and the batch inputs it needs."""
    defaults = getattr(obj, "defaults", None)
    if not isinstance(defaults, dict):
        return ""
    with contextlib.suppress(Exception):  # a plugin that cannot be built bare keeps its declared defaults
        defaults = dict(obj().options)  # the options an instance resolves (a base class may add some)
    fixed = getattr(obj, "fixed", {}) or {}
    parts = [f"{k}={v}" for k, v in defaults.items() if k not in fixed]
    parts += [f"{k}={v} (fixed)" for k, v in fixed.items()]
    needs = getattr(obj, "requires", ())
    if needs:
        parts.append(f"needs {', '.join(needs)}")
    return ", ".join(parts)


def plugin_table(kind: str, console: Console) -> None:
    """Print one table for ``kind`` ('estimators' or 'environments') and a warning per broken plugin."""
    group = plugins.GROUPS[kind]
    loaded, failed = plugins.load_all(group)
    packages = {info.name: info.package for info in plugins.describe(group)}
    table = Table(title=f"{kind} ({plugins.GROUPS[kind]})", title_justify="left")
    table.add_column("name", style="bold cyan", no_wrap=True)
    table.add_column("what it is")
    if kind == "estimators":
        table.add_column("loss", no_wrap=True)
        table.add_column("defaults")
    table.add_column("package", style="dim", no_wrap=True)
    for name, obj in loaded.items():
        row = [name, _summary(obj)]
        if kind == "estimators":
            paper = _paper(obj)
            if paper:
                row[1] += f"\n[dim]{escape(paper)}[/dim]"
            row += [_extra(obj), _defaults(obj)]
        row.append(packages.get(name, "?"))
        table.add_row(*row)
    console.print(table)
    for name, error in failed.items():
        console.print(f"[yellow]warning:[/yellow] {kind[:-1]} plugin '{name}' failed to load and is skipped: {error}")


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
    """Print the tables of ``kind`` (estimators, environments, experiments; None: all).

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
