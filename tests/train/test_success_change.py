"""The final line of a run: success against the run's own baseline on the same episodes, with the
paired standard error."""

from __future__ import annotations

import json

import pytest

from gagpo_cli.run_layout import RunLayout
from gagpo_cli.train.evaluation import print_success_change, success_change


def _evaluation(won: list[int], tasks: list[int] | None = None) -> dict:
    tasks = tasks or list(range(len(won)))
    return {"success_rate": 100.0 * sum(won) / len(won),
            "per_episode": [{"task_id": t, "won": bool(w)} for t, w in zip(tasks, won, strict=True)]}


def test_the_change_is_the_mean_paired_difference_with_its_standard_error_hand_checked():
    change = success_change(_evaluation([0, 0, 1, 0]), _evaluation([1, 0, 1, 1]))
    # d = (100, 0, 0, 100): mean 50, sample sd sqrt(4 * 50^2 / 3) = 57.735, SE = 57.735 / 2
    assert change == pytest.approx({"episodes": 4, "before": 25.0, "after": 75.0, "change": 50.0,
                                    "standard_error": 28.8675}, abs=1e-4)
    assert success_change(_evaluation([0, 1]), _evaluation([0, 1], tasks=[1, 0])) is None  # not the same episodes
    assert success_change({"per_episode": []}, _evaluation([1])) is None


def test_the_run_prints_it_against_its_own_baseline(tmp_path, capsys):
    layout = RunLayout(tmp_path)
    layout.eval_record(0).parent.mkdir(parents=True)
    print_success_change(tmp_path, 3, _evaluation([1, 1]))
    assert capsys.readouterr().out == ""  # no baseline: nothing to compare
    layout.eval_record(0).write_text(json.dumps(_evaluation([0, 0, 1, 0])))
    print_success_change(tmp_path, 3, _evaluation([1, 0, 1, 1]))
    assert capsys.readouterr().out == ("eval success 25.0% before training -> 75.0% after iteration 3: +50.0 points, "
                                       "paired standard error 28.9 over the same 4 episodes (1.7 standard errors)\n")
