"""``gagpo list``: rich tables of the registered plugins, broken ones reported as warnings."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from gagpo_cli import plugins
from gagpo_cli.errors import UsageError


def _summary(obj: Any) -> str:
    description = getattr(obj, "description", None)
    if description:
        return str(description)
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def _extra(obj: Any) -> str:
    """Loss settings of an estimator (ratio mode, critic), when it declares them."""
    ratio = getattr(obj, "ratio_mode", None)
    if ratio is None:
        return ""
    critic = " + critic" if getattr(obj, "needs_critic", False) else ""
    return f"{ratio} ratio{critic}"


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
    table.add_column("package", style="dim", no_wrap=True)
    for name, obj in loaded.items():
        row = [name, _summary(obj)]
        if kind == "estimators":
            row.append(_extra(obj))
        row.append(packages.get(name, "?"))
        table.add_row(*row)
    console.print(table)
    for name, error in failed.items():
        console.print(f"[yellow]warning:[/yellow] {kind[:-1]} plugin '{name}' failed to load and is skipped: {error}")


def print_plugins(kind: str | None) -> None:
    """Print the plugin tables; ``kind`` None lists both. Unknown kinds raise ``UsageError``."""
    kinds = list(plugins.GROUPS)
    if kind is not None and kind not in kinds:
        raise UsageError(plugins.unknown_name_message("list kind", kind, kinds))
    console = Console()
    for k in [kind] if kind else kinds:
        plugin_table(k, console)
