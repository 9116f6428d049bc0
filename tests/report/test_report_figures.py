"""The report's table figures: the interval figure shows every seed's value (ties on a 1/64 grid
stacked, so a bimodal cell is visible), and the differences figure draws exactly the differences,
intervals and decisions the table prints, read back from the matplotlib artists."""

from __future__ import annotations

import re

import matplotlib
import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.colors import to_rgba
from report_runs import write_run

from gagpo_cli.report.command import build_table
from gagpo_cli.report.figures import (
    STYLES,
    difference_figure,
    difference_marks,
    interval_figure,
    swarm_levels,
    write_difference_figures,
)
from gagpo_cli.report.intervals import analysis_of
from gagpo_cli.report.runs import load_runs
from gagpo_cli.report.writers import extra_grids

matplotlib.use("Agg")

GRID = 100 / 64  # a success rate over 64 episodes moves in steps of 1/64
BASE = [24, 26, 25, 27, 23, 26, 25, 24, 25, 26]  # GRPO's wins out of 64 per seed
ROWS = {  # estimator -> wins out of 64 per seed, seeds 0-9
    "grpo": BASE,
    "gagpo": [w + 16 + s % 3 for s, w in enumerate(BASE)],  # far above: settled
    "gigpo": [w + (1, -2, 2, 0, -1, 3, -3, 1, 0, -1)[s] for s, w in enumerate(BASE)],  # close: open
    "rloo": [0, 0, 0, 0, 0, 50, 52, 50, 51, 49],  # five seeds collapsed beside five that learned: withheld
}


@pytest.fixture
def table(tmp_path):
    """Table 1 on WebShop against GRPO, ten seeds a row, rates on the 1/64 grid."""
    for estimator, wins in ROWS.items():
        for seed, k in enumerate(wins):
            write_run(tmp_path / estimator / f"s{seed}", estimator, "webshop", k * GRID, k * GRID + 5, seed=seed,
                      episodes=64)
    return build_table(load_runs([tmp_path])[0], 1, False)


def _printed(table) -> dict[tuple[str, str], tuple[str, str, str, str]]:
    """(column, row) -> (difference, low, high, decision) as the comparison grid prints them."""
    grid = next(g for g in extra_grids(table) if g.title.startswith("row - "))
    out = {}
    for _, _, rows in grid.blocks:
        for label, cells in rows:
            for header, (text, _) in zip(grid.headers, cells, strict=True):
                found = re.match(r"([+-]\d+\.\d) \[([+-]\d+\.\d), ([+-]\d+\.\d)\].*?: ([a-z<3 ]+?)(;|$)", text)
                if found:
                    out[(header, label)] = found.groups()[:4]
    return out


def _row_labels(fig) -> dict[int, str]:
    """Height -> the row label written there (on the first panel; the others share its axis)."""
    ax = fig.axes[0]
    return {round(y): t.get_text() for y, t in zip(ax.get_yticks(), ax.get_yticklabels(), strict=True)}


def _drawn(fig) -> dict[tuple[str, str], tuple[float, float, float, str]]:
    """(panel title, row label at the marker's height) -> (x, low, high, style) of every error bar."""
    out = {}
    labels = _row_labels(fig)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for container in ax.containers:
            line, _, (bars,) = container.lines
            (low, y), (high, _) = bars.get_segments()[0]
            face, edge = to_rgba(line.get_markerfacecolor()), to_rgba(line.get_markeredgecolor())
            style = next(s for s, (f, e) in STYLES.items() if to_rgba(f) == face and to_rgba(e) == edge)
            out[(ax.get_title(), labels[round(y)])] = (float(line.get_xdata()[0]), float(low), float(high), style)
    return out


def test_the_differences_figure_draws_the_printed_differences_intervals_and_decisions(table):
    printed = _printed(table)
    assert {d for *_, d in printed.values()} >= {"higher", "open", "withheld"}  # every style is exercised
    fig = difference_figure(table, difference_marks(table))
    drawn = _drawn(fig)
    assert drawn.keys() == printed.keys()
    style_of = {"higher": "settled", "lower": "settled", "open": "open"}
    for key, (point, low, high, decision) in printed.items():
        x, left, right, style = drawn[key]
        assert (f"{x:+.1f}", f"{left:+.1f}", f"{right:+.1f}") == (point, low, high), key
        assert style == style_of.get(decision, "none"), key
    zero = [line for line in fig.axes[0].lines if list(line.get_xdata()) == [0, 0]]
    assert zero, "no line at 0"


def test_the_interval_figure_shows_every_seed_and_stacks_ties(table):
    fig = interval_figure(table, table.rows[0].block)
    ax = next(a for a in fig.axes if a.get_title() == "WebShop Succ.")
    labels = _row_labels(fig)
    dots: dict[str, list[tuple[float, float]]] = {}
    for collection in (c for c in ax.collections if isinstance(c, PathCollection)):  # the scatter dots
        for x, y in collection.get_offsets():
            dots.setdefault(labels[round(y)], []).append((float(x), float(y)))
    for row in table.rows:
        seeds = sorted(v for _, v in row.scores["WebShop Succ."])
        assert sorted(x for x, _ in dots[row.label]) == pytest.approx(seeds), row.label
        assert len(set(dots[row.label])) == len(seeds), f"{row.label}: a dot hides another"
    collapsed = [y for x, y in dots["RLOO"] if x == 0.0]
    assert len(collapsed) == 5  # the bimodal row's five collapsed seeds, side by side
    assert analysis_of(table).flags[(next(i for i, r in enumerate(table.rows) if r.label == "RLOO"),
                                     "WebShop Succ.")]


def test_swarm_levels_separate_ties_and_near_ties_only():
    levels = swarm_levels(np.array([0.0, 50.0, 0.0, 0.0, 100.0, 50.0, 0.0, 60.0]), gap=1.0)
    assert sorted(levels[[0, 2, 3, 6]]) == [-1, 0, 1, 2]  # four equal values, four levels
    assert sorted(levels[[1, 5]]) == [0, 1] and levels[4] == 0 and levels[7] == 0


def test_no_reference_row_no_differences_figure_and_a_sequential_sweep_draws_no_decision(table, tmp_path):
    table.baseline = None  # no reference row: nothing to compare, no file
    assert write_difference_figures(table, tmp_path, "table1") == []
    table.baseline, table.analysis = "GRPO", None
    table.seeds_stopped_on_data = True  # runs of an --until-decided sweep
    marks = difference_marks(table)
    assert marks and {m.decision for m in marks} == {"sequential"} and {m.style for m in marks} == {"none"}
