"""Writing a ``ReportTable`` with its interval estimates (``intervals.py``): CSV (pandas; per column
the ``mean ± std`` display, mean, std, n, interval, IQM, probability of improvement over the
reference row, paired difference, seeds needed), Markdown and LaTeX (booktabs) and a rich table on
the terminal. Measured cells read ``mean [low, high]`` (95 % bootstrap interval over seeds); a value
is in bold only where its interval lies above every other row's in its block. Further grids: IQM
(n ≥ 4), the aggregate over tasks, and the comparisons with the reference row. Cells over fewer
seeds than the others carry a dagger; published rows sit in their own blocks (``mean ± std`` as
published) and are never bolded. Files are written atomically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gagpo_cli.report import statistics as st
from gagpo_cli.report.intervals import ALL_TASKS, NO_INTERVAL, Analysis, Comparison, Interval, analysis_of
from gagpo_cli.report.tables import FEWER_SEEDS, Column, ReportTable, Row
from gagpo_core.atomic import atomic_write_text

POWER_TEXT = "two-sample t-test, 80 % power, alpha 0.05, from the observed spread"


@dataclass
class Grid:
    """A titled table of text cells in blocks: (block title, kind, [(label, [(text, bold)])])."""

    title: str
    row_header: str
    headers: list[str]
    blocks: list[tuple[str, str, list[tuple[str, list[tuple[str, bool]]]]]] = field(default_factory=list)


def _block_title(block: str, kind: str) -> str:
    name = block or "measured"
    return f"{name} (published)" if kind == "published" else name


def _indexed_blocks(table: ReportTable) -> list[tuple[str, str, list[tuple[int, Row]]]]:
    out: dict[tuple[str, str], list[tuple[int, Row]]] = {}
    for i, row in enumerate(table.rows):
        out.setdefault((row.block, row.kind), []).append((i, row))
    return [(block, kind, rows) for (block, kind), rows in out.items()]


def _is_best(analysis: Analysis, row: Row, column: Column) -> bool:
    leader = analysis.leaders.get((row.block, column.header))
    return row.kind == "measured" and leader is not None and leader.best == row.label


def _cell(table: ReportTable, analysis: Analysis, index: int, row: Row, column: Column) -> str:
    """``mean [low, high]`` for a measured cell, ``mean ± std`` for a published one."""
    if row.kind == "measured":
        text = analysis.cells[(index, column.header)].display()
    else:
        text = row.stats[column.header].display()
    return text + FEWER_SEEDS if text and table.fewer_seeds(row, column) else text


def _comparison_text(comparison: Comparison) -> str:
    """``0.83 [0.50, 1.00]; paired Δ +3.0 [+1.0, +5.0] over 3 seeds; ~19 seeds needed``."""
    parts = [comparison.improvement.display(digits=2)]
    if comparison.paired_seeds:
        difference = comparison.difference.display(sign=True)
        parts.append(f"paired Δ {difference} over {comparison.paired_seeds} seeds")
    if comparison.seeds_needed is not None:
        parts.append(f"~{comparison.seeds_needed} seeds needed")
    return "; ".join(parts)


def main_grid(table: ReportTable) -> Grid:
    """The table itself: every row, ``mean [low, high]`` cells, separable best values in bold."""
    analysis = analysis_of(table)
    grid = Grid(table.title, table.row_header, [c.header for c in table.columns])
    for block, kind, rows in _indexed_blocks(table):
        lines = [(row.label, [(_cell(table, analysis, i, row, c), _is_best(analysis, row, c))
                              for c in table.columns]) for i, row in rows]
        grid.blocks.append((_block_title(block, kind), kind, lines))
    return grid


def extra_grids(table: ReportTable) -> list[Grid]:
    """IQM (where a cell has four or more seeds), the aggregate over tasks, comparisons with the reference."""
    analysis = analysis_of(table)
    measured = [b for b in _indexed_blocks(table) if b[1] == "measured"]
    grids = []
    if any(v.known for v in analysis.iqm.values()):
        grid = Grid("IQM (25 % trimmed mean over seeds, n ≥ 4) [95 % bootstrap interval]", table.row_header,
                    [c.header for c in table.columns])
        for block, kind, rows in measured:
            lines = [(row.label, [(analysis.iqm[(i, c.header)].display(), False) for c in table.columns])
                     for i, row in rows]
            grid.blocks.append((_block_title(block, kind), kind, lines))
        grids.append(grid)
    if analysis.tasks:
        grid = Grid(f"Over tasks ({', '.join(table.tasks)}), stratified bootstrap [95 % interval]",
                    table.row_header, ["mean of task means", "IQM (runs x tasks, n ≥ 4)"])
        for block, kind, rows in measured:
            lines = [(row.label, [(interval.display(), False) for interval in analysis.tasks[i]])
                     for i, row in rows if i in analysis.tasks]
            if lines:
                grid.blocks.append((_block_title(block, kind), kind, lines))
        grids.append(grid)
    if analysis.comparisons:
        headers = [c.header for c in table.columns] + ([ALL_TASKS] if analysis.tasks else [])
        grid = Grid(f"P(row > {analysis.baseline}): probability of improvement [95 % interval]; paired Δ: "
                    f"per-seed difference row - {analysis.baseline} where the runs share seeds",
                    table.row_header, headers)
        for block, kind, rows in measured:
            lines = []
            for i, row in rows:
                cells = [analysis.comparisons.get((i, h)) for h in headers]
                if any(cells):
                    lines.append((row.label, [(_comparison_text(c) if c else "", False) for c in cells]))
            if lines:
                grid.blocks.append((f"{_block_title(block, kind)} vs {analysis.baseline}", kind, lines))
        grids.append(grid)
    return [_drop_empty_columns(g) for g in grids]


def _drop_empty_columns(grid: Grid) -> Grid:
    """The grid without the columns no row has a value in."""
    keep = [j for j in range(len(grid.headers))
            if any(cells[j][0] for _, _, rows in grid.blocks for _, cells in rows)]
    blocks = [(title, kind, [(label, [cells[j] for j in keep]) for label, cells in rows])
              for title, kind, rows in grid.blocks]
    return Grid(grid.title, grid.row_header, [grid.headers[j] for j in keep], blocks)


def _notes(table: ReportTable) -> list[str]:
    analysis = analysis_of(table)
    notes = list(table.notes)
    notes.append(f"measured cells: mean [95 % interval], a percentile bootstrap over seeds ({st.REPS:,} "
                 "replicates, fixed seed); no interval with one seed; bold: the interval lies above every "
                 "other row's")
    if any(table.fewer_seeds(r, c) for r in table.rows for c in table.columns):
        notes.append(f"{FEWER_SEEDS} fewer seeds than the other cells (n < {table.max_n}; n per cell in the CSV)")
    for (block, header), leader in analysis.leaders.items():
        if leader.best is not None:
            continue
        where = f"{block}, {header}" if block else header
        text = (f"{where}: the leading rows {', '.join(leader.tied)} are not separable at n = {leader.n} "
                "(their 95 % intervals overlap)")
        if leader.runner_up_seeds is not None:
            text += (f"; ~{leader.runner_up_seeds} seeds per method would separate {leader.tied[0]} from "
                     f"{leader.runner_up} ({POWER_TEXT})")
        else:
            text += "; too few seeds or no difference to estimate how many seeds would separate them"
        notes.append(text)
    if analysis.comparisons:
        paired = sorted({table.rows[i].label for (i, _), c in analysis.comparisons.items() if c.paired_seeds})
        notes.append("paired comparisons (shared train.seed values): " + (", ".join(paired) or "none"))
        notes.append(f"~N seeds needed: seeds per method for a difference the intervals leave open "
                     f"({POWER_TEXT})")
    blocks = {r.block for r in table.rows if r.kind == "measured"}
    if analysis.baseline is not None:
        missing = sorted(b for b in blocks if analysis.reference(table, b) is None)
        for block in missing:
            notes.append(f"no {analysis.baseline} row{f' for {block}' if block else ''} to compare with "
                         "(--baseline NAME picks the reference row)")
    sources = sorted({r.source for r in table.rows if r.kind == "published"})
    notes += [f"published: {s}" for s in sources]
    return notes


# ---------------------------------------------------------------------------- CSV


def _interval_columns(record: dict[str, object], prefix: str, interval: Interval) -> None:
    record[prefix] = interval.point
    record[f"{prefix} low"] = interval.low
    record[f"{prefix} high"] = interval.high


def to_dataframe(table: ReportTable) -> pd.DataFrame:
    """One line per row: kind, model, method (generic table: settings), source, reference; then per
    column its ``mean ± std`` display, mean, std, n, 95 % interval (low, high), IQM (low, high), whether
    it is the separable best, P(> reference) (low, high), the paired difference (low, high, seeds) and
    the seeds needed; then the aggregate over tasks and its comparison."""
    analysis = analysis_of(table)
    records = []
    for i, row in enumerate(table.rows):
        record: dict[str, object] = {"kind": row.kind, "model": row.block, table.row_header: row.label,
                                     "source": row.source, "reference": analysis.baseline or ""}
        for column in table.columns:
            stat, header = row.stats[column.header], column.header
            text = stat.display()
            record[header] = text + FEWER_SEEDS if text and table.fewer_seeds(row, column) else text
            record[f"{header} mean"] = stat.mean
            record[f"{header} std"] = stat.std
            record[f"{header} n"] = stat.n
            cell = analysis.cells.get((i, header))
            record[f"{header} ci low"] = cell.low if cell else math.nan
            record[f"{header} ci high"] = cell.high if cell else math.nan
            _interval_columns(record, f"{header} iqm", analysis.iqm.get((i, header), NO_INTERVAL))
            record[f"{header} best"] = _is_best(analysis, row, column)
            _comparison_columns(record, header, analysis.comparisons.get((i, header)))
        if table.tasks:
            mean, iqm = analysis.tasks.get(i, (NO_INTERVAL, NO_INTERVAL))
            _interval_columns(record, f"{ALL_TASKS} mean", mean)
            _interval_columns(record, f"{ALL_TASKS} iqm", iqm)
            _comparison_columns(record, ALL_TASKS, analysis.comparisons.get((i, ALL_TASKS)))
        records.append(record)
    return pd.DataFrame.from_records(records)


def _comparison_columns(record: dict[str, object], header: str, comparison: Comparison | None) -> None:
    _interval_columns(record, f"{header} P(>ref)", comparison.improvement if comparison else NO_INTERVAL)
    _interval_columns(record, f"{header} paired diff", comparison.difference if comparison else NO_INTERVAL)
    record[f"{header} paired seeds"] = comparison.paired_seeds if comparison else 0
    needed = comparison.seeds_needed if comparison else None
    record[f"{header} seeds needed"] = needed if needed is not None else math.nan


def write_csv(table: ReportTable, path: Path) -> Path:
    return atomic_write_text(path, to_dataframe(table).to_csv(index=False))


# ---------------------------------------------------------------------------- Markdown


def _markdown_grid(grid: Grid, heading: str = "###") -> list[str]:
    lines = [f"**{grid.title}**", ""]
    for title, _, rows in grid.blocks:
        lines += [f"{heading} {title}", "", f"| {grid.row_header} | " + " | ".join(grid.headers) + " |",
                  "|---|" + "---:|" * len(grid.headers)]
        for label, cells in rows:
            texts = [f"**{t}**" if t and bold else t for t, bold in cells]
            lines.append(f"| {label} | " + " | ".join(texts) + " |")
        lines.append("")
    return lines


def to_markdown(table: ReportTable) -> str:
    """The table (a heading per block), then the IQM, over-tasks and comparison grids, then notes."""
    lines = _markdown_grid(main_grid(table))
    for grid in extra_grids(table):
        lines += _markdown_grid(grid, "####")
    lines += [f"- {note}" for note in _notes(table)]
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------- LaTeX


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "±": r"$\pm$", FEWER_SEEDS: r"$^\dagger$", "Δ": r"$\Delta$", ">": r"$>$", "<": r"$<$",
                  "≥": r"$\geq$"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _latex_cell(text: str, bold: bool) -> str:
    if not text:
        return "--"
    dagger = text.endswith(FEWER_SEEDS)
    body = latex_escape(text.removesuffix(FEWER_SEEDS))
    return (f"\\textbf{{{body}}}" if bold else body) + ("$^\\dagger$" if dagger else "")


def _latex_grid(grid: Grid, notes: list[str]) -> list[str]:
    width = len(grid.headers) + 1
    lines = ["\\begin{table}[t]", "\\centering", f"\\caption{{{latex_escape(grid.title)}}}",
             "\\begin{tabular}{l" + "r" * len(grid.headers) + "}", "\\toprule",
             " & ".join(latex_escape(h) for h in [grid.row_header.capitalize(), *grid.headers]) + " \\\\"]
    for title, _, rows in grid.blocks:
        lines += ["\\midrule", f"\\multicolumn{{{width}}}{{l}}{{\\textit{{{latex_escape(title)}}}}} \\\\"]
        for label, cells in rows:
            texts = [latex_escape(label), *(_latex_cell(t, b) for t, b in cells)]
            lines.append(" & ".join(texts) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    if notes:
        lines.append(f"\\par\\smallskip{{\\footnotesize {'; '.join(latex_escape(n) for n in notes)}}}")
    return [*lines, "\\end{table}"]


def to_latex(table: ReportTable) -> str:
    """A booktabs ``table`` environment for the table (block title rows; notes below), one for each
    further grid."""
    lines = ["% generated by gagpo report; needs \\usepackage{booktabs}",
             *_latex_grid(main_grid(table), _notes(table))]
    for grid in extra_grids(table):
        lines += ["", *_latex_grid(grid, [])]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- terminal


def _print_grid(grid: Grid, console: Console) -> None:
    for title, kind, rows in grid.blocks:
        rich_table = Table(title=escape(f"{grid.title} - {title}"), title_justify="left")
        rich_table.add_column(grid.row_header, style="bold cyan" if kind == "measured" else "dim")
        for header in grid.headers:
            rich_table.add_column(escape(header), justify="right")
        for label, cells in rows:
            rich_table.add_row(escape(label), *(f"[bold]{escape(t)}[/bold]" if t and b else escape(t)
                                                for t, b in cells))
        console.print(rich_table)


def print_table(table: ReportTable, console: Console) -> None:
    """The table and its further grids on the terminal, one rich table per block, then the notes."""
    for grid in [main_grid(table), *extra_grids(table)]:
        _print_grid(grid, console)
    for note in _notes(table):
        console.print(f"[dim]{escape(note)}[/dim]", highlight=False)


def write_all(table: ReportTable, out: Path, stem: str) -> list[Path]:
    """``<out>/<stem>.csv``, ``.md`` and ``.tex``."""
    out = Path(out)
    return [write_csv(table, out / f"{stem}.csv"), atomic_write_text(out / f"{stem}.md", to_markdown(table)),
            atomic_write_text(out / f"{stem}.tex", to_latex(table))]
