"""``--until-decided`` on the cases that misled it: zero spread read as certainty at the first look,
the effect printed at an early stop, too large among the comparisons decided "better"; and a record of
the earlier procedure, shown as it is and not continued."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gagpo_cli.errors import UsageError
from gagpo_cli.sweep.sequential import STATE_FILE, Design, SequentialState, load_state, resume_or_start
from gagpo_cli.sweep.sequential_report import summarize
from gagpo_cli.sweep.simulate import simulate

BASE = np.array([70.0, 75.0, 80.0, 72.0])


def _design(min_effect=None):
    # the lab's Table 1: five comparisons, cap 20
    return Design(0.05, "base", "success_rate", min_effect, 20, tuple(f"c{i}" for i in range(5)))


def test_four_equal_differences_are_not_decided_at_the_first_look():
    state = SequentialState(_design(), 20)
    state.analyse(4, {"base": BASE, **{f"c{i}": BASE + 3.125 for i in range(5)}})  # one episode in 32, every seed
    assert {c.status for c in state.comparisons.values()} == {"running"}


def test_four_zero_differences_are_not_no_difference():
    state = SequentialState(_design(min_effect=1.0), 20)
    state.analyse(4, {"base": BASE, **{f"c{i}": BASE.copy() for i in range(5)}})
    assert {c.status for c in state.comparisons.values()} == {"running"}


@pytest.mark.integration  # 200 simulated sweeps to 20 seeds, and the estimate for each decided one
def test_the_adjusted_effect_is_median_unbiased_among_the_better_decisions(tmp_path):
    effect = 0.5  # half an SD of the per-seed difference, one comparison, cap 20
    outcome = simulate([effect], sims=200, max_seeds=20, seed=7)
    raw, adjusted, covered = [], [], []
    for state in outcome.states:
        if state.comparisons["c0"].status == "better":
            row = summarize(state, tmp_path).rows[0]
            raw.append(float(row["difference"]))
            adjusted.append(float(row["adjusted"]))
            low, high = (float(x) for x in row["interval"].strip("[]").split(","))
            covered.append(low <= effect <= high)
    assert len(raw) > 70
    assert np.median(raw) > 1.3 * effect  # the raw mean of the decided comparisons overstates the effect
    assert 0.8 * effect < np.median(adjusted) < 1.25 * effect
    assert np.mean(covered) >= 0.9 - 2.58 * math.sqrt(0.09 / len(covered))


def test_a_state_of_the_earlier_procedure_is_shown_as_recorded_and_not_continued(tmp_path):
    # a sequential.json of the group-sequential t-test (no "procedure" field, no boundaries per look)
    old = {"design": {"alpha": 0.05, "baseline": "base", "metric": "success_rate", "min_effect": None,
                      "horizon": 20, "comparisons": ["c0"]},
           "max_seeds": 20, "looks": [{"n": 4, "spent": 1e-9}],
           "comparisons": {"c0": {"status": "better", "round": 1, "seeds": 4, "mean": 3.125, "sd": 0.0}}}
    (tmp_path / STATE_FILE).write_text(json.dumps(old))
    summary = summarize(load_state(tmp_path), tmp_path)
    assert summary.rows[0]["decision"] == "better" and summary.rows[0]["adjusted"] == "-"
    note = summary.notes[0]
    assert "made by an earlier procedure (unnamed)" in note and "move sequential.json away" in note
    with pytest.raises(UsageError, match="earlier procedure.*move the file away"):
        resume_or_start(tmp_path, ["base", "c0"], baseline=None, metric=None, alpha=None, min_effect=None,
                        max_seeds=None)
