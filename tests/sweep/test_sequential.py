"""``gagpo ablate --until-decided``: the group-sequential procedure's error rates measured through
the whole decision loop with a toy trainer (``gagpo_cli/sweep/simulate.py``), the state's resume and
extension, the report's rows, and the one-line errors (the boundaries' exactness:
tests/stats/test_group_sequential.py; every family of scores: test_sequential_families.py)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from gagpo_cli.errors import UsageError
from gagpo_cli.sweep.sequential import (
    STATE_FILE,
    SequentialState,
    load_state,
    resume_or_start,
    save_state,
    until_decided,
)
from gagpo_cli.sweep.sequential_report import sequential_summaries
from gagpo_cli.sweep.simulate import ToyTrainer, simulate
from stats import group_sequential as gs
from tests.support import run_cli

ALPHA = 0.05
SIMS = 1500


def _wrong_rate(outcome) -> float:
    """Share of simulated sweeps with any better/worse decision (the truth is no difference)."""
    wrong = (outcome.status == "better") | (outcome.status == "worse")
    return float(wrong.any(axis=1).mean())


def _monte_carlo_bound(rate: float, sims: int) -> float:
    """rate + 2.58 standard errors (one-sided 99.5%)."""
    return rate + 2.58 * math.sqrt(rate * (1 - rate) / sims)


def _peeking(design, looks, differences):
    """A fixed-n paired t-test at level alpha_each applied at every look: the common practice."""
    n = looks[-1]
    look = gs.Look(n, float(differences.mean()), float(differences.std(ddof=1)), gs.self_normalised(differences),
                   gs.z_of(_t_quantile(design.alpha_each, n), n))
    if abs(look.statistic) >= look.bound:
        return look, "better" if look.statistic > 0 else "worse"
    return look, None


@functools.lru_cache
def _t_quantile(alpha: float, n: int) -> float:
    return float(scipy.stats.t.isf(alpha / 2, n - 1))


@pytest.mark.parametrize("comparisons,max_seeds", [(1, 14), (2, 10)])
def test_no_difference_is_declared_a_difference_at_most_alpha_through_the_loop(comparisons, max_seeds):
    outcome = simulate([0.0] * comparisons, sims=SIMS, max_seeds=max_seeds, seed=11)
    assert _wrong_rate(outcome) <= _monte_carlo_bound(ALPHA, SIMS)
    assert outcome.seeds.max() <= max_seeds and set(outcome.status.ravel()) <= {"better", "worse", "cap"}


def test_a_fixed_n_test_that_peeks_every_round_fails_the_same_check():
    # about 0.17 against a bound of 0.075 at 500 sweeps: fewer sweeps than the check it fails still show it
    outcome = simulate([0.0], sims=500, max_seeds=20, seed=11, rule=_peeking)
    assert _wrong_rate(outcome) > _monte_carlo_bound(ALPHA, 500)


def test_a_true_difference_is_called_no_difference_at_most_alpha():
    # the futility decision's error: effect exactly at --min-effect, "no difference >= min-effect" is wrong
    outcome = simulate([1.0], sims=600, max_seeds=20, seed=5, min_effect=1.0)
    assert float((outcome.status == "no difference").mean()) <= _monte_carlo_bound(ALPHA, 600)
    assert float((outcome.status == "worse").mean()) == 0.0


def test_a_large_effect_is_decided_early_and_its_cell_stops():
    outcome = simulate([2.0, 0.0], sims=200, max_seeds=20, seed=3, min_effect=1.0)
    assert float((outcome.status[:, 0] == "better").mean()) > 0.95
    # stopped well before the cap: at 12 seeds, the first look at which a sign-flip test of two comparisons
    # (alpha 0.025 each) has the precision to decide (2^(1 - n) below that look's share of alpha)
    assert outcome.seeds[:, 0].mean() < 13
    assert outcome.runs.mean() < 3 * 20  # the loop trained fewer runs than 3 cells x 20 seeds


def _state(tmp_path, max_seeds=6, min_effect=None):
    return resume_or_start(tmp_path, ["base", "c0", "c1"], baseline="base", metric=None, alpha=ALPHA,
                           min_effect=min_effect, max_seeds=max_seeds)


class Interrupt(Exception):
    pass


def test_an_interrupted_loop_resumes_where_it_was_and_a_larger_cap_continues(tmp_path):
    rng = np.random.default_rng(7)
    trainer = ToyTrainer(["base", "c0", "c1"], [0.3, 0.0], 12, rng)
    rounds = []

    def launch_then_stop(cells, seeds):
        if len(rounds) == 1:
            raise Interrupt  # Ctrl-C in round 2: the state stays at round 1
        rounds.append(len(seeds))
        trainer.launch(cells, seeds)

    with pytest.raises(Interrupt):
        until_decided(_state(tmp_path), launch_then_stop, trainer.score, lambda s: save_state(tmp_path, s))
    assert [look["n"] for look in load_state(tmp_path).looks] == [4]

    resumed = until_decided(_state(tmp_path), trainer.launch, trainer.score, lambda s: save_state(tmp_path, s))
    fresh = until_decided(SequentialState(resumed.design, 6), trainer.launch, trainer.score, lambda s: None)
    assert resumed.comparisons == fresh.comparisons
    assert [look["n"] for look in resumed.looks] == [4, 6]
    assert {c.status for c in resumed.comparisons.values()} == {"cap"}

    extended = until_decided(_state(tmp_path, max_seeds=12), trainer.launch, trainer.score,
                             lambda s: save_state(tmp_path, s))
    assert [look["n"] for look in extended.looks] == [4, 6, 8, 10, 12]
    assert all(c.seeds == 12 or c.status != "cap" for c in extended.comparisons.values())
    assert extended.design.horizon == 6  # the design keeps its first horizon; past it the reserve is spent
    assert all(0 < look["spent"] < ALPHA / 2 for look in extended.looks)


def test_a_changed_design_is_refused_in_one_line(tmp_path):
    state = _state(tmp_path)
    save_state(tmp_path, state)
    replaced = resume_or_start(tmp_path, ["base", "c0", "c1"], baseline=None, metric="score", alpha=0.1,
                               min_effect=None, max_seeds=None)  # no look yet: a new design voids nothing
    assert (replaced.design.alpha, replaced.design.metric, replaced.design.horizon) == (0.1, "score", 6)
    base = np.array([70.0, 80.0, 75.0, 90.0])
    state.analyse(4, {"base": base, "c0": base + [5.0, -3.0, 9.0, 1.0], "c1": base + [2.0, 2.0, -1.0, 4.0]})
    save_state(tmp_path, state)
    with pytest.raises(UsageError, match="--alpha 0.05"):
        resume_or_start(tmp_path, ["base", "c0", "c1"], baseline=None, metric=None, alpha=0.1, min_effect=None,
                        max_seeds=None)
    with pytest.raises(UsageError, match="cells"):
        resume_or_start(tmp_path, ["base", "c0"], baseline=None, metric=None, alpha=None, min_effect=None,
                        max_seeds=None)
    with pytest.raises(UsageError, match="not a cell of this sweep; cells: base, c0, c1"):
        resume_or_start(tmp_path, ["base", "c0", "c1"], baseline="nope", metric=None, alpha=None, min_effect=None,
                        max_seeds=None)
    (tmp_path / STATE_FILE).write_text("{not json")
    with pytest.raises(UsageError, match="unreadable decision state"):
        load_state(tmp_path)


def test_the_report_rows_name_decision_round_seeds_and_the_design_interval(tmp_path):
    folder = tmp_path / "sweep"
    trainer = ToyTrainer(["base", "c0", "c1"], [3.0, 0.0], 12, np.random.default_rng(1))
    until_decided(_state(folder, max_seeds=12, min_effect=2.0), trainer.launch, trainer.score,
                  lambda s: save_state(folder, s))
    (summary,) = sequential_summaries([tmp_path])
    rows = {r["comparison"]: r for r in summary.rows}
    better = rows["c0 - base"]
    assert better["decision"] == "better" and int(better["seeds"]) < 12 and better["round"] != "-"
    low, high = (float(x) for x in better["interval"].strip("[]").split(","))
    c = load_state(folder).comparisons["c0"]
    assert len(c.t_bounds) == int(better["round"]) and c.t >= c.t_bounds[-1]  # decided at its boundary
    assert low < float(better["adjusted"]) < high and float(better["adjusted"]) <= c.mean + 0.005  # printed to 0.01
    assert any("Lan-DeMets" in note for note in summary.notes)


def test_an_interval_past_the_range_of_two_success_rates_is_shown_cut_to_it(tmp_path):
    state = _state(tmp_path, max_seeds=20)  # metric success_rate; nothing can be decided at the first look
    base = np.array([70.0, 80.0, 75.0, 90.0])
    state.analyse(4, {"base": base, "c0": base + [5.0, -3.0, 9.0, 1.0], "c1": np.array([100.0, 0.0, 100.0, 0.0])})
    save_state(tmp_path, state)
    (summary,) = sequential_summaries([tmp_path])
    rows = {r["comparison"]: r for r in summary.rows}
    assert rows["c1 - base"]["interval"].startswith("[-100.00, ")
    assert rows["c1 - base"]["decision"] == "withheld (shape)" and "bimodal" in rows["c1 - base"]["flags"]
    assert any("cut to it" in note for note in summary.notes)


@pytest.mark.parametrize("args,message", [
    (["--until-decided", "--seeds", "3"], "leave out --seeds"),
    (["--until-decided", "--max-seeds", "3"], "--max-seeds must be at least 4"),
    (["--until-decided", "--alpha", "0"], "--alpha is an error rate strictly between 0 and 1"),
    (["--until-decided", "--metric", "loss"], "unknown --metric 'loss'"),
    (["--until-decided", "--baseline", "ppo"], "--baseline 'ppo' is not a cell of this sweep; cells: lambda=0, "),
    (["--max-seeds", "8"], "--max-seeds is an option of --until-decided"),
])
def test_bad_flags_are_one_line_exit_2(tmp_path, args, message):
    code, out, err = run_cli(["ablate", "--grid", "lambda=0,1", "--output-dir", str(tmp_path), *args])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_gagpo_report_on_a_decided_sweep_prints_the_decisions(tmp_path):
    from tests.report_runs import write_run

    folder = tmp_path / "sweep"
    trainer = ToyTrainer(["base", "c0"], [4.0], 10, np.random.default_rng(2))
    state = resume_or_start(folder, ["base", "c0"], baseline="base", metric=None, alpha=ALPHA, min_effect=None,
                            max_seeds=10)
    until_decided(state, trainer.launch, trainer.score, lambda s: save_state(folder, s))
    for cell, estimator in (("base", "grpo"), ("c0", "gagpo")):
        for seed in range(state.comparisons["c0"].seeds):
            value = float(np.clip(50 + trainer.score(cell, seed), 0, 100))  # eval.json holds 0..100
            write_run(folder / cell / f"s{seed}", estimator, "alfworld", value, value, seed=seed)
    code, out, err = run_cli(["report", str(folder), "--baseline", "estimator=grpo", "--out", str(tmp_path / "report")])
    assert code == 0, err
    assert "decisions against base" in out and "better" in out and "Lan-DeMets" in out
    # the fixed-n table over the same runs describes, and leaves the decision to the design
    assert "seeds chosen by --until-decided" in out and "not separated" not in out
    table = pd.read_csv(tmp_path / "report" / "results.csv")
    decisions = table[[c for c in table.columns if c.endswith(" decision")]].stack().dropna()
    assert set(decisions) == {"sequential"}
    assert table[[c for c in table.columns if c.endswith(" p_holm")]].isna().all().all()


@pytest.mark.parametrize("given", ["method=grpo", "grpo", "GRPO"])
def test_the_baseline_is_named_by_its_cell_or_its_label_in_any_case(given):
    from gagpo_cli.sweep.rounds import _cell_named
    from gagpo_cli.sweep.spec import build_sweep

    sweep = build_sweep("lab-table1-alfworld")
    assert _cell_named(sweep, given) == "method=grpo"
    assert _cell_named(sweep, "GiGPO") == "GiGPO"  # no label alone names it: refused later as no cell
