"""Writing a ``ReportTable`` with its interval estimates and tests (``intervals.py``): CSV (pandas; per
column the ``mean ± std`` display, mean, std, n, interval, IQM, best, shape flags, and per comparison
with the reference row the test, statistic, df, the t-test's, the permutation test's and the
decision's p, the Holm-adjusted p and its family, decision, difference with its interval, P(improvement),
seeds needed and the settings that differ), Markdown and LaTeX (booktabs) and a rich table on the
terminal. Measured cells read ``mean [low, high]`` (Student-t 95 % interval over seeds, never narrower
than the seeds' evaluation episodes allow); a value is in bold only where its claim to be the best
of its block is settled. Further grids: IQM (n ≥ 4), the aggregate over tasks, and the comparisons
with the reference row. The notes say which interval each number carries, which test decided each
comparison, which families Holm was applied over, and which cells are bimodal or at the ceiling.
Cells over fewer seeds than the others carry a dagger, flagged cells a double dagger; published rows
sit in their own blocks (``mean ± std`` as published) and are never bolded. Files are written
atomically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gagpo_cli.report.intervals import (
    ALL_TASKS,
    FIRST,
    NO_INTERVAL,
    SECOND,
    Analysis,
    Comparison,
    Interval,
    analysis_of,
)
from gagpo_cli.report.tables import FEWER_SEEDS, Column, ReportTable, Row
from gagpo_core.atomic import atomic_write_text
from stats import fixed_n as st

POWER_TEXT = ("80 % power at the level Holm's first step leaves in its family (alpha 0.05 / its claims), and no fewer "
              "than the permutation test needs to reach that level; paired t power (df n - 1) where every seed is "
              f"shared, else two-sample; spread at its one-sided {st.SD_CONFIDENCE:.0%} upper confidence limit")
FLAGGED = "‡"


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
        text += FLAGGED if text and (index, column.header) in analysis.flags else ""
    else:
        text = row.stats[column.header].display()
    return text + FEWER_SEEDS if text and table.fewer_seeds(row, column) else text


def _p(value: float) -> str:
    return "p < 0.001" if value < 0.001 else f"p = {value:.3f}"


def _comparison_text(comparison: Comparison) -> str:
    """``+3.0 [+1.0, +5.0], paired t + permutation (8 seeds) p = 0.008, Holm p = 0.031: higher; P(>) 0.83
    [0.50, 1.00]; ~19 seeds needed``."""
    parts = [comparison.difference.display(sign=True)]
    if comparison.test:
        parts[0] += f", {comparison.test} ({comparison.seeds} seeds) {_p(comparison.p)}"
        if comparison.decidable and math.isfinite(comparison.p_holm):
            parts[0] += f", Holm {_p(comparison.p_holm)}"
    parts[0] += f": {comparison.decision}"
    parts.append(f"P(>) {comparison.improvement.display(digits=2)}")
    if comparison.seeds_needed is not None and not comparison.settled:
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


def _tasks_title(table: ReportTable) -> tuple[str, list[str]]:
    tasks = ", ".join(table.tasks)
    if table.tasks_share_runs:
        return (f"Over the task types ({tasks}) of the same runs: mean over types per seed [Student-t 95 % "
                "interval over seeds], IQM [95 % bootstrap resampling seeds jointly across types]",
                ["mean over types (not Success: that is over episodes)", "IQM (seeds x types, n ≥ 4)"])
    return (f"Over tasks from separate runs ({tasks}): rliable's stratified bootstrap [95 % interval]",
            ["mean of task means", "IQM (runs x tasks, n ≥ 4)"])


def extra_grids(table: ReportTable) -> list[Grid]:
    """IQM (where a cell has four or more seeds), the aggregate over tasks, comparisons with the reference."""
    analysis = analysis_of(table)
    measured = [b for b in _indexed_blocks(table) if b[1] == "measured"]
    grids = []
    if any(v.known for v in analysis.iqm.values()):
        grid = Grid("IQM (25 % trimmed mean over seeds, n ≥ 4; a point estimate)", table.row_header,
                    [c.header for c in table.columns])
        for block, kind, rows in measured:
            lines = [(row.label, [(analysis.iqm[(i, c.header)].display(), False) for c in table.columns])
                     for i, row in rows]
            grid.blocks.append((_block_title(block, kind), kind, lines))
        grids.append(grid)
    if analysis.tasks:
        title, headers = _tasks_title(table)
        grid = Grid(title, table.row_header, headers)
        for block, kind, rows in measured:
            lines = [(row.label, [(interval.display(), False) for interval in analysis.tasks[i]])
                     for i, row in rows if i in analysis.tasks]
            if lines:
                grid.blocks.append((_block_title(block, kind), kind, lines))
        grids.append(grid)
    if analysis.comparisons:
        headers = [c.header for c in table.columns] + ([ALL_TASKS] if analysis.tasks else [])
        grid = Grid(f"row - {analysis.baseline}: difference [95 % interval of the t-test], the test and its p "
                    f"(Holm-adjusted in its family of claims): decision; P(row > {analysis.baseline}) "
                    "[bootstrap interval, a description]", table.row_header, headers)
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


def _interval_notes(table: ReportTable, analysis: Analysis) -> list[str]:
    """Which interval each number carries."""
    notes = ["measured cells: mean [95 % Student-t interval over seeds, mean ± t(0.975, n-1) s/√n, s² never below "
             "the within-seed variance a success rate over its evaluation episodes has (the largest binomial "
             "p(1-p)/E its k of E wins leave plausible at one-sided 95 %): equal per-seed values are not "
             "certainty]; the seed is the unit (runs of one seed averaged first, n = distinct seeds); no interval "
             "with one seed, nor from zero spread where the episodes are unknown"]
    if analysis.tasks:
        notes.append("over tasks: " + ("task types of the same runs -- mean per seed then Student-t over seeds; "
                                       "IQM with a bootstrap drawing seeds jointly for all types"
                                       if table.tasks_share_runs else
                                       f"tasks from separate runs -- rliable's stratified percentile bootstrap "
                                       f"({st.REPS:,} replicates, fixed seed)"))
    if analysis.leaders:
        notes.append("bold: the column's leader where its claim to be the best of its block is settled: its tests "
                     "against every other row, one-sided, Bonferroni over those rows (the claim's p = rows x the "
                     "largest), then Holm over the table's claims (below); three or more seeds each")
    return notes


def _flag_notes(table: ReportTable, analysis: Analysis) -> list[str]:
    """The shape flags of the cells (``stats/shape_flags.py``)."""
    several = len({r.block for r in table.rows if r.kind == "measured"}) > 1
    notes = []
    for (i, header), found in analysis.flags.items():
        row = table.rows[i]
        where = row.label + (f" [{row.block}]" if several and row.block else "")
        notes.append(f"{FLAGGED} {where} ({header}): {'; '.join(found)}")
    if any("bimodal" in f for found in analysis.flags.values() for f in found):
        notes.append(f"{FLAGGED} bimodal: seeds collapsed at 0% beside seeds that learned; a steady row and a bimodal "
                     "one can have the same mean while a test on a few seeds sees a difference, and no test keeps "
                     "its error rate for the mean there: comparisons and best claims involving the cell are "
                     "withheld; the cell's interval does not cover for this shape either")
    if any("ceiling" in f for found in analysis.flags.values() for f in found):
        notes.append(f"{FLAGGED} ceiling: a quarter of the seeds or more within one episode of 100%; spread shrinks "
                     "toward 0 and the interval rests on the within-seed floor")
    return notes


def _family_notes(table: ReportTable, analysis: Analysis) -> list[str]:
    """Which claims Holm was applied over, in which order."""
    if not analysis.families or table.seeds_stopped_on_data:
        return []
    headline = ", ".join(table.headline or [c.header for c in table.columns])
    first, tested_first = analysis.families.get(FIRST, (0, True))
    second, tested_second = analysis.families.get(SECOND, (0, False))
    note = (f"multiplicity: the claims of this table form two families, Holm within each (alpha 0.05): first "
            f"the comparisons with {analysis.baseline or 'the reference row'} and the best rows in {headline} "
            f"({first} claim(s), every block); then those in the other columns and over all tasks ({second} "
            "claim(s)), tested only when every claim of the first is settled (serial gatekeeping)")
    if second:
        note += ("; the second family was tested" if tested_second else
                 "; here the first family is not all settled, so the second reads 'gated'")
    return [note]


def _grouped(found: dict[tuple[str, str], list[str]], every: list[str]) -> dict[str, list[str]]:
    """(key, row) -> columns, as key -> ``row (columns)`` texts (``every compared column`` where it is all)."""
    out: dict[str, list[str]] = {}
    for (key, where), headers in found.items():
        columns = "every compared column" if len(headers) == len(every) > 1 else ", ".join(headers)
        out.setdefault(key, []).append(f"{where} ({columns})")
    return out


def _comparison_notes(table: ReportTable, analysis: Analysis) -> list[str]:
    """Which test decided each comparison, why a pair is unpaired, the settings that differ."""
    several = len({r.block for r in table.rows if r.kind == "measured"}) > 1
    every = list(dict.fromkeys(h for _, h in analysis.comparisons))
    tests: dict[tuple[str, str], list[str]] = {}
    unpaired: dict[tuple[str, str], list[str]] = {}
    differ: dict[tuple[str, str], list[str]] = {}
    withheld: dict[tuple[str, str], list[str]] = {}
    for (i, header), c in analysis.comparisons.items():
        row = table.rows[i]
        where = row.label + (f" [{row.block}]" if several and row.block else "")
        tests.setdefault((c.test or "no test (a side has fewer than 2 seeds)", where), []).append(header)
        if c.withheld:
            withheld.setdefault((c.withheld, where), []).append(header)
        if c.unpaired_because:
            unpaired.setdefault((c.unpaired_because, where), []).append(header)
        if c.differences:
            differ.setdefault((c.differences, where), []).append(header)
    notes = [f"decided by the {test} against {analysis.baseline}: {'; '.join(rows)}"
             for test, rows in _grouped(tests, every).items()]
    notes.append("each test uses every seed of both cells, paired on the seeds both ran with the same evaluation "
                 "(paired t where all are shared, Welch where none, the partially paired t of Derrick et al. 2017 "
                 "between); its p is the larger of the t-test's and the exact permutation test's (swapping a "
                 "shared seed's two values, relabelling the others), valid for normal scores with equal means "
                 "and for methods with the same distribution of any shape, and never below what the seeds allow "
                 "(2^(1-n) for n paired seeds: 0.25 at 3)")
    notes.append("a comparison is settled (higher / lower) where its Holm-adjusted p < 0.05 in its family (below), "
                 "with three or more seeds a side; withheld where a cell it involves is bimodal; the interval "
                 "of the difference is the t-test's (unadjusted); P(>) is the probability of improvement with "
                 "its bootstrap interval, a description only; ~N seeds needed: seeds per method to detect "
                 + (f"a difference of {table.min_effect:g} points" if table.min_effect is not None
                    else "the observed difference (--min-effect POINTS sizes for a chosen one)")
                 + f" ({POWER_TEXT})")
    notes += [f"unpaired, {reason}: {'; '.join(rows)}" for reason, rows in _grouped(unpaired, every).items()]
    notes += [f"withheld, bimodal {reason}: {'; '.join(rows)}" for reason, rows in _grouped(withheld, every).items()]
    notes += [f"differ from {analysis.baseline} beyond the table's labels in {diff}: {'; '.join(rows)}"
              for diff, rows in _grouped(differ, every).items()]
    return notes


def _duplicate_notes(table: ReportTable) -> list[str]:
    """Per row, the seeds that ran more than once and the settings in which those runs differ."""
    several = len({r.block for r in table.rows if r.kind == "measured"}) > 1
    notes = []
    for row in table.rows:
        found: dict[tuple[int, tuple[str, ...]], list[str]] = {}
        for header, (count, differing) in row.duplicates.items():
            found.setdefault((count, tuple(differing)), []).append(header)
        where = row.label + (f" [{row.block}]" if several and row.block else "")
        for (count, keys), headers in found.items():
            notes.append(f"{where} ({', '.join(headers)}): {count} seed(s) with several runs, averaged per seed; "
                         f"the runs differ in {', '.join(keys) if keys else 'nothing (identical configs)'}")
    return notes


def _notes(table: ReportTable) -> list[str]:
    analysis = analysis_of(table)
    notes = [*table.notes, *_interval_notes(table, analysis), *_flag_notes(table, analysis), *_duplicate_notes(table)]
    if any(table.fewer_seeds(r, c) for r in table.rows for c in table.columns):
        notes.append(f"{FEWER_SEEDS} fewer seeds than the other cells (n < {table.max_n}; n per cell in the CSV)")
    for (block, header), leader in analysis.leaders.items():
        if leader.best is not None or table.seeds_stopped_on_data:  # nothing separates on a sequential sweep
            continue
        where = f"{block}, {header}" if block else header
        why = (" (best withheld: " + leader.withheld + ")" if leader.withheld else
               " (the best claim is gated)" if leader.gated else "")
        text = (f"{where}: the leading rows {', '.join(leader.tied)} are not separated at n = {leader.n} "
                f"({' / '.join(leader.tests) or 'no test'}, Holm){why}")
        if leader.runner_up_seeds is not None:
            text += (f"; ~{leader.runner_up_seeds} seeds per method would separate {leader.tied[0]} from "
                     f"{leader.runner_up}")
        else:
            text += "; too few seeds or no difference to size how many seeds would separate them"
        notes.append(text)
    if analysis.comparisons:
        notes += _comparison_notes(table, analysis)
    notes += _family_notes(table, analysis)
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
    column its ``mean ± std`` display, mean, std, n, 95 % Student-t interval (low, high), IQM, whether
    it is the best, and the comparison with the reference (test, statistic, df, p, p_holm, decision,
    difference with its interval, paired seeds, P(>ref) with its interval, seeds needed, why unpaired,
    the settings that differ); then the aggregate over tasks and its comparison."""
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
            record[f"{header} iqm"] = analysis.iqm.get((i, header), NO_INTERVAL).point
            record[f"{header} best"] = _is_best(analysis, row, column)
            record[f"{header} flags"] = "; ".join(analysis.flags.get((i, header), []))
            _comparison_columns(record, header, analysis.comparisons.get((i, header)))
        if table.tasks:
            mean, iqm = analysis.tasks.get(i, (NO_INTERVAL, NO_INTERVAL))
            _interval_columns(record, f"{ALL_TASKS} mean", mean)
            _interval_columns(record, f"{ALL_TASKS} iqm", iqm)
            _comparison_columns(record, ALL_TASKS, analysis.comparisons.get((i, ALL_TASKS)))
        records.append(record)
    return pd.DataFrame.from_records(records)


def _comparison_columns(record: dict[str, object], header: str, comparison: Comparison | None) -> None:
    c = comparison
    record[f"{header} test"] = c.test if c else ""
    record[f"{header} statistic"] = c.statistic if c else math.nan
    record[f"{header} df"] = c.df if c else math.nan
    record[f"{header} p"] = c.p if c else math.nan
    record[f"{header} p_t"] = c.p_t if c else math.nan
    record[f"{header} p_exact"] = c.p_exact if c else math.nan
    record[f"{header} p_holm"] = c.p_holm if c else math.nan
    record[f"{header} family"] = c.family if c else ""
    record[f"{header} decision"] = c.decision if c else ""
    _interval_columns(record, f"{header} diff", c.difference if c else NO_INTERVAL)
    record[f"{header} paired seeds"] = c.paired_seeds if c else 0
    record[f"{header} unshared seeds"] = c.unshared_seeds if c else 0
    _interval_columns(record, f"{header} P(>ref)", c.improvement if c else NO_INTERVAL)
    needed = c.seeds_needed if c and not c.settled else None
    record[f"{header} seeds needed"] = needed if needed is not None else math.nan
    record[f"{header} unpaired because"] = c.unpaired_because if c else ""
    record[f"{header} differences"] = c.differences if c else ""


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


_LATEX_SPECIAL = {FLAGGED: r"$^\ddagger$", "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_",
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
