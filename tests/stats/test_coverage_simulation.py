"""The report's claims checked against simulated scores whose truth is known (seeded; a few seconds):

- a cell's "95 %" interval covers the true mean in >= 93 % of 2,000 cells of 3 seeds (normal scores);
- between two identical methods sharing seeds (a seed effect common to both plus noise), the report
  calls the comparison "settled" in <= 7 % of 500 tables at 3 and at 10 seeds, and bolds a "best" row
  in <= 7 % (never with 2 seeds);
- the mean over the task types of one run's evaluation (a generic table) covers the true mean in
  >= 93 % of 1,000 rows of 5 seeds, the task types sharing each seed's effect.

The tables go through the report's own path: runs -> ``generic_table`` -> ``intervals.analyse`` (the
interval, test, Holm and gatekeeping of the report, without the descriptions that decide nothing).
Every family of RL shapes: tests/sweep/test_sequential_families.py.
"""

from __future__ import annotations

import numpy as np

from gagpo_cli.report.intervals import analyse, cell_interval, tasks_mean
from gagpo_cli.report.runs import RunRecord
from gagpo_cli.report.tables import generic_table

TRUE_MEAN = 60.0


def _run(lam: float, seed: int, success: float, per_type: dict[str, float] | None = None) -> RunRecord:
    config = {"estimator": {"name": "gagpo", "options": {"lam": lam}}, "env": {"name": "webshop"},
              "model": {"name": "m"}, "train": {"seed": seed}}
    return RunRecord(None, config, {"success_rate": success, "score": success, "per_type": per_type or {}})


def _identical_methods_table(rng: np.random.Generator, seeds: int):
    """Two rows (lam=0 and lam=1) with the same distribution, sharing seeds: (the "best" row of the
    Success column if any, lam=1's comparison with lam=0 as the report decides it)."""
    seed_effect = rng.normal(0.0, 8.0, seeds)
    runs = [_run(lam, s, TRUE_MEAN + seed_effect[s] + rng.normal(0.0, 3.0)) for lam in (0.0, 1.0)
            for s in range(seeds)]
    table = generic_table(runs)
    # the report's decision path (pairing, test, Holm, decision); describe=False leaves out what decides
    # nothing: the bootstrap interval of P(X > Y) and the seeds needed
    analysis = analyse(table, table.rows[0].label, describe=False)
    return analysis.leaders[("", "Success")].best, analysis.comparisons[(1, "Success")]


def test_a_cell_interval_covers_the_true_mean_at_three_seeds():
    rng = np.random.default_rng(2025)
    cells = rng.normal(TRUE_MEAN, 10.0, size=(2000, 3))
    covered = [(i.low <= TRUE_MEAN <= i.high) for i in map(cell_interval, cells)]
    assert np.mean(covered) >= 0.93, np.mean(covered)


def test_identical_methods_are_rarely_settled_or_bolded():
    rng = np.random.default_rng(7)
    for seeds, tables in ((3, 500), (10, 500)):
        settled = bolded = 0
        for _ in range(tables):
            best, comparison = _identical_methods_table(rng, seeds)
            settled += comparison.settled
            bolded += best is not None
        assert settled / tables <= 0.07, (seeds, settled / tables)
        assert bolded / tables <= 0.07, (seeds, bolded / tables)
    for _ in range(100):  # 2 seeds: nothing is bolded, nothing settled
        best, comparison = _identical_methods_table(rng, 2)
        assert best is None and not comparison.settled


def test_the_mean_over_task_types_of_the_same_runs_covers_the_true_mean():
    rng = np.random.default_rng(11)
    types = ("pick", "look", "clean")
    covered = 0
    for _ in range(1000):
        seed_effect = rng.normal(0.0, 10.0, 5)  # shared by every type of one run
        runs = []
        for s in range(5):
            values = {t: TRUE_MEAN + seed_effect[s] + rng.normal(0.0, 2.0) for t in types}
            runs.append(_run(0.0, s, float(np.mean(list(values.values()))), values))
        table = generic_table(runs)
        mean = tasks_mean(table, table.rows[0])
        covered += mean.low <= TRUE_MEAN <= mean.high
    assert covered / 1000 >= 0.93, covered / 1000
