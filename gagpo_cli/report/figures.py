"""Figures, matplotlib with the Agg backend (no display):

- training curves (the paper's Figures 2-5) from ``metrics.jsonl``: for each environment and model,
  one PNG per metric with a line per method (mean over seeds) and a mean ± std band (sample std,
  drawn where two or more seeds have the iteration);
- evaluation learning curves from ``evals/iter_*.json`` (the iteration-0 baseline included): the
  mean over seeds with a 95 % Student-t band of that mean (the cells' interval), where two or more
  seeds have the iteration;
- interval plots of a table: per column, each measured row's mean with its 95 % interval, its IQM
  where there is one, and every seed's value as a dot, the reference row drawn in black;
- difference plots of a table: per column, each row's difference to the reference row with the
  interval and decision of the table's test (``intervals.py``), a line at 0.
"""

from __future__ import annotations

import re
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gagpo_cli.report.aggregate import env_name, method_label, model_label, variant_keys, variant_of
from gagpo_cli.report.intervals import ALL_TASKS, Interval, analysis_of, cell_interval
from gagpo_cli.report.runs import RunRecord
from gagpo_cli.report.tables import ReportTable
from gagpo_core.atomic import atomic_write

EVAL_CURVES = {"success_rate": "eval success (%)", "score": "eval score (%)"}

FIGURE_METRICS = {
    "eval/success_rate": "eval success (%)", "eval/score": "eval score (%)",
    "train/success_rate": "train success (%)", "train/score": "train score (%)",
    "train/episode_length": "episode length (steps)", "actor/grad_norm": "grad norm", "actor/entropy": "entropy",
    "adv/iqr": "advantage IQR", "adv/frac_abs_gt1": "share of |A| > 1",
}


def curves(runs: list[RunRecord], metric: str) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """label -> (iterations, mean, std) of ``metric`` over the runs (seeds) of each label."""
    keys = variant_keys(runs)
    series: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        label = _label(run, keys)
        for line in run.metric_lines():
            value = line.get(metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
                series[label][int(line["iteration"])].append(float(value))
    out = {}
    for label, by_iteration in sorted(series.items()):
        its = np.array(sorted(by_iteration))
        mean = np.array([np.mean(by_iteration[i]) for i in its])
        std = np.array([np.std(by_iteration[i], ddof=1) if len(by_iteration[i]) > 1 else 0.0 for i in its])
        out[label] = (its, mean, std)
    return out


def _label(run: RunRecord, keys: dict[tuple[str, str], list[str]]) -> str:
    variant = variant_of(run, keys)
    return method_label(run.config) + (f" [{variant}]" if variant else "")


Band = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def eval_curves(runs: list[RunRecord], metric: str) -> dict[str, Band]:
    """label -> (iterations, mean, low, high) of ``metric`` in ``evals/iter_*.json`` over the seeds of
    each label; low = high = mean where fewer than two seeds have the iteration."""
    keys = variant_keys(runs)
    series: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for iteration, evaluation in run.evaluations():
            value = evaluation.get(metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
                series[_label(run, keys)][iteration].append(float(value))
    out = {}
    for label, by_iteration in sorted(series.items()):
        its = np.array(sorted(by_iteration))
        intervals = [cell_interval(np.array(by_iteration[i])) for i in its]
        mean = np.array([c.point for c in intervals])
        low = np.array([c.low if c.has_bounds else c.point for c in intervals])
        high = np.array([c.high if c.has_bounds else c.point for c in intervals])
        out[label] = (its, mean, low, high)
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", text).strip("_")


def write_figures(runs: list[RunRecord], out: Path) -> list[Path]:
    """PNG files ``<out>/<env>_<model>_<metric>.png`` for every metric some run logged."""
    import matplotlib

    matplotlib.use("Agg")

    groups: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for run in runs:
        groups[(env_name(run.config), model_label(run.config))].append(run)
    written = []
    for (env, model), members in sorted(groups.items()):
        for metric, ylabel in FIGURE_METRICS.items():
            data = curves(members, metric)
            if not data:
                continue
            bands = {label: (its, mean, mean - std, mean + std) for label, (its, mean, std) in data.items()}
            path = Path(out) / f"{_slug(env)}_{_slug(model)}_{_slug(metric)}.png"
            written.append(_band_figure(bands, "iteration", ylabel, f"{env}, {model}", path))
        for metric, ylabel in EVAL_CURVES.items():
            bands = eval_curves(members, metric)
            if not any(len(its) > 1 for its, *_ in bands.values()):
                continue
            written.append(_band_figure(bands, "iteration (0: before training)", ylabel,
                                        f"{env}, {model}: mean over seeds, 95 % Student-t band",
                                        Path(out) / f"{_slug(env)}_{_slug(model)}_eval_curve_{metric}.png"))
    return written


def _band_figure(bands: dict[str, Band], xlabel: str, ylabel: str, title: str, path: Path) -> Path:
    """One line per label over its iterations with a shaded (low, high) band, saved as ``path``."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for label, (its, mean, low, high) in bands.items():
        (line,) = ax.plot(its, mean, marker="o" if len(its) < 10 else None, markersize=3, label=label)
        ax.fill_between(its, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    written = atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)
    return written


def swarm_levels(values: np.ndarray, gap: float) -> np.ndarray:
    """The stack level of each value in a one-dimensional dot plot: taken in order of value, each dot
    gets the first of the levels 0, 1, -1, 2, -2, ... that no dot closer than ``gap`` already holds, so
    equal values (ties on a 1/E grid) and near-equal ones sit side by side instead of on top of each other."""
    order = [0, *(sign * k for k in range(1, values.size + 1) for sign in (1, -1))]
    levels = np.zeros(values.size, dtype=int)
    placed: list[tuple[float, int]] = []
    for index in np.argsort(values, kind="stable"):
        taken = {level for x, level in placed if abs(values[index] - x) < gap}
        levels[index] = next(level for level in order if level not in taken)
        placed.append((float(values[index]), int(levels[index])))
    return levels


DOT_BAND = 0.16  # the per-seed dots lie within +-DOT_BAND of their line, below the row's interval
DOT_STEP = 0.07  # vertical distance of two stacked dots (rows are 1 apart), shrunk to fit DOT_BAND


def _seed_dots(ax, values: np.ndarray, y: float, gap: float, colour: str) -> None:
    """The cell's per-seed values as small dots on the line ``y``, ties stacked (``swarm_levels``)."""
    levels = swarm_levels(values, gap)
    step = min(DOT_STEP, DOT_BAND / max(1, int(np.abs(levels).max(initial=0))))
    ax.scatter(values, y + step * levels, s=10, color=colour, alpha=0.6, linewidths=0, zorder=3)


def _panels(count: int, rows: int, row_height: float):
    """A figure of ``count`` panels (three a line) sharing the row axis; the unused ones hidden."""
    import matplotlib.pyplot as plt

    width = min(count, 3)
    height = -(-count // width)
    size = (3.4 * width + 1.8, (row_height * rows + 1.3) * height)  # 1.8 inches for the row labels
    fig, axes = plt.subplots(height, width, figsize=size, squeeze=False, sharey=True)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, axes


def _finish(fig, axes, labels: list[str], title: str) -> None:
    """Row labels on the left panels (first row at the top), the wrapped title, a tight layout."""
    ys = np.arange(len(labels))[::-1]
    for ax in axes[:, 0]:
        ax.set_yticks(ys, labels, fontsize=8)
        ax.set_ylim(-0.6, len(labels) - 0.4)
    for ax in axes.flat:
        ax.tick_params(axis="x", labelsize=8)
    width_inches = fig.get_size_inches()[0]
    fig.suptitle(textwrap.fill(title, width=int(13 * width_inches)), fontsize=9)  # ~13 characters per inch
    fig.tight_layout()


def interval_figure(table: ReportTable, block: str):
    """The interval figure of one block (``write_interval_figures``); None when no cell has a value."""
    analysis = analysis_of(table)
    rows = [(i, r) for i, r in enumerate(table.rows) if r.kind == "measured" and r.block == block]
    columns = [c for c in table.columns if any(analysis.cells[(i, c.header)].known for i, _ in rows)]
    if not columns:
        return None
    fig, axes = _panels(len(columns), len(rows), 0.6)
    ys = np.arange(len(rows))[::-1]
    for ax, column in zip(axes.flat, columns, strict=False):
        values = [np.array([v for _, v in row.scores.get(column.header, [])], dtype=float) for _, row in rows]
        spread = float(np.ptp(np.concatenate(values))) if any(v.size for v in values) else 0.0
        for y, (i, row), seeds in zip(ys, rows, values, strict=True):
            colour = "black" if row.label == analysis.baseline else "tab:blue"
            cell, iqm = analysis.cells[(i, column.header)], analysis.iqm[(i, column.header)]
            if cell.known:
                low, high = (cell.low, cell.high) if cell.has_bounds else (cell.point, cell.point)
                ax.errorbar(cell.point, y + 0.2, xerr=[[cell.point - low], [high - cell.point]], fmt="o",
                            color=colour, capsize=3, markersize=4)
            if iqm.known:
                ax.plot(iqm.point, y + 0.2, "D", markersize=6, markerfacecolor="none", color=colour, alpha=0.7)
            if seeds.size:
                _seed_dots(ax, seeds, y - 0.18, 0.02 * max(spread, 1.0), colour)
        ax.set_title(column.header, fontsize=9)
        ax.set_xlabel("%", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    title = (f"{block or 'measured'}: mean (o) with its 95 % Student-t interval, IQM (hollow diamond, n ≥ 4); "
             "dots below: each seed's value (equal values stacked)")
    _finish(fig, axes, [row.label for _, row in rows], title)
    return fig


def write_interval_figures(table: ReportTable, out: Path, stem: str) -> list[Path]:
    """``<out>/<stem>_intervals[_<block>].png``: per block, one panel per column with each measured
    row's mean and 95 % Student-t interval, its IQM (a hollow diamond, n >= 4) on the same line, and
    below them every seed's value as a dot (ties stacked), so collapsed seeds beside learned ones show."""
    import matplotlib

    matplotlib.use("Agg")

    written = []
    blocks = list(dict.fromkeys(r.block for r in table.rows if r.kind == "measured"))
    for block in blocks:
        fig = interval_figure(table, block)
        if fig is not None:
            suffix = f"_{_slug(block)}" if len(blocks) > 1 else ""
            written.append(_save(fig, Path(out) / f"{stem}_intervals{suffix}.png"))
    return written


@dataclass(frozen=True)
class DifferenceMark:
    """One comparison as the differences figure draws it: ``row`` - the reference in ``column`` (a
    column header or ``ALL_TASKS``), the difference with the decision's 95 % interval, and the decision."""

    block: str
    column: str
    row: str
    difference: Interval
    decision: str

    @property
    def style(self) -> str:
        """``settled`` (filled marker), ``open`` (hollow) or ``none`` (grey: withheld, gated, n < 3,
        sequential)."""
        return "settled" if self.decision in ("higher", "lower") else "open" if self.decision == "open" else "none"


def difference_marks(table: ReportTable) -> list[DifferenceMark]:
    """Every comparison of ``table`` with its reference row, as the comparison grid prints it: the
    blocks in order, per block the columns in order (then ``ALL_TASKS``), per column the rows in order."""
    analysis = analysis_of(table)
    headers = [c.header for c in table.columns] + [ALL_TASKS]
    marks = []
    for block in dict.fromkeys(r.block for r in table.rows if r.kind == "measured"):
        for header in headers:
            for i, row in enumerate(table.rows):
                found = analysis.comparisons.get((i, header)) if row.block == block else None
                if found is not None and found.difference.known:
                    marks.append(DifferenceMark(block, header, row.label, found.difference, found.decision))
    return marks


STYLES = {"settled": ("tab:blue", "tab:blue"), "open": ("white", "tab:blue"), "none": ("white", "0.6")}  # face, edge


def difference_figure(table: ReportTable, marks: list[DifferenceMark]):
    """The figure of one block's ``marks``: a panel per column, a line per compared row with its
    difference and interval, a vertical line at 0 (the reference), the decision in the marker."""
    analysis = analysis_of(table)
    columns = list(dict.fromkeys(m.column for m in marks))
    compared = {m.row for m in marks}
    labels = [r.label for r in table.rows if r.kind == "measured" and r.block == marks[0].block and r.label in compared]
    fig, axes = _panels(len(columns), len(labels), 0.42)
    y_of = dict(zip(labels, np.arange(len(labels))[::-1], strict=True))
    for ax, column in zip(axes.flat, columns, strict=False):
        for mark in (m for m in marks if m.column == column):
            face, edge = STYLES[mark.style]
            d = mark.difference
            low, high = (d.low, d.high) if d.has_bounds else (d.point, d.point)
            ax.errorbar(d.point, y_of[mark.row], xerr=[[d.point - low], [high - d.point]], fmt="o", color=edge,
                        ecolor=edge, markerfacecolor=face, markeredgecolor=edge, capsize=3, markersize=6)
        ax.axvline(0.0, color="black", linewidth=0.8)
        left, right = ax.get_xlim()
        ax.set_xlim(min(left, -1.0), max(right, 1.0))  # 0 inside, at least a point either side
        ax.set_title(column, fontsize=9)
        ax.set_xlabel(f"row − {analysis.baseline} (points)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    grey = sorted({m.decision for m in marks if m.style == "none"})
    block = marks[0].block
    title = (f"{block + ': ' if block else ''}difference to {analysis.baseline} (o) with the 95 % interval of the "
             "t-test that decides the comparison (unadjusted); filled: settled (Holm p < 0.05), hollow: open"
             + (f", grey: no decision ({', '.join(grey)})" if grey else ""))
    if table.seeds_stopped_on_data:
        title += "; seeds chosen by --until-decided: the sweep's own design decides (printed by gagpo report)"
    _finish(fig, axes, labels, title)
    return fig


def write_difference_figures(table: ReportTable, out: Path, stem: str) -> list[Path]:
    """``<out>/<stem>_differences[_<block>].png``: per block with a reference row, every row's
    difference to it per column with the interval and decision the table prints (``difference_marks``);
    nothing without comparisons."""
    import matplotlib

    matplotlib.use("Agg")

    marks = difference_marks(table)
    blocks = list(dict.fromkeys(m.block for m in marks))
    written = []
    for block in blocks:
        suffix = f"_{_slug(block)}" if len(blocks) > 1 else ""
        fig = difference_figure(table, [m for m in marks if m.block == block])
        written.append(_save(fig, Path(out) / f"{stem}_differences{suffix}.png"))
    return written
