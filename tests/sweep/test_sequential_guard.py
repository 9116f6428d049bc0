"""``gagpo ablate --until-decided`` guards its record: the runs each look read are recorded and checked
again by every later command (changed, extended, deleted, non-finite: refused in one line); the state
file is strict JSON and checked when read; ``--metric`` is checked before anything is written; a design
with no look yet can be started over; ``gagpo report`` shows no decision from a broken record.

The sweeps here are the lab experiment with run folders written as ``gagpo train`` leaves a finished run
(its ``config.yaml`` and ``eval.json``), so every round finds its runs done and nothing trains.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gagpo_cli.config import write_resolved_config
from gagpo_cli.errors import UsageError
from gagpo_cli.sweep.sequential import STATE_FILE, load_state, resume_or_start, save_state
from gagpo_cli.sweep.sequential_record import read_value
from gagpo_cli.sweep.spec import build_sweep
from gagpo_cli.sweep.verify import recorded_form
from tests.support import assert_one_error_line, run_cli

GRID = ["lab-alfworld", "--grid", "optim.lr=0.01,0.02", "--iterations", "2"]
# no decision at 4 seeds (differences +5, -5, +3, -4, ...): a larger --max-seeds takes another look
VALUES = {"optim.lr=0.01": [40.0, 50.0, 45.0, 55.0, 50.0, 45.0], "optim.lr=0.02": [45.0, 45.0, 48.0, 51.0, 54.0, 41.0]}


def _finished_runs(tmp_path, seeds: int = 6, name: str = "d") -> dict:
    """The sweep's runs of seeds 0..seeds-1 as finished runs (config.yaml, eval.json); returns (cell, seed) ->
    run folder."""
    sweep = build_sweep("lab-alfworld", grid=["optim.lr=0.01,0.02"], seeds=seeds,
                        flags={"iterations": 2, "output_dir": str(tmp_path)}, name=name)
    found = {}
    for run in sweep.runs:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        write_resolved_config(recorded_form(run), run.run_dir)
        value = VALUES[run.cell.name][run.seed]
        _write_eval(run.run_dir, value)
        found[(run.cell.name, run.seed)] = run.run_dir
    return found


def _write_eval(run_dir, value, iteration: int = 2) -> None:
    (run_dir / "eval.json").write_text(json.dumps({"iteration": iteration, "success_rate": value, "score": value,
                                                   "per_type": {"pick": value, "heat": value}}))


@pytest.fixture(scope="module")
def decided(tmp_path_factory) -> Path:
    """A folder holding sweep ``d``: seeds 0-5 of both cells finished and ``--max-seeds 6`` run on them (two
    looks; the comparison stopped at the cap). Tests copy it (``_copy``)."""
    root = tmp_path_factory.mktemp("decided")
    _finished_runs(root)
    code, out, err = _decide(root, "--max-seeds", "6")
    assert code == 0, out + err
    return root


def _copy(decided: Path, tmp_path: Path) -> dict:
    shutil.copytree(decided / "d", tmp_path / "d")
    return {(cell.name, int(run.name[1:])): run for cell in (tmp_path / "d").iterdir() if cell.is_dir()
            for run in cell.iterdir()}


def _decide(tmp_path, *more: str) -> tuple[int, str, str]:
    return run_cli(["ablate", *GRID, "--until-decided", "--output-dir", str(tmp_path), "--name", "d", *more])


def _state_file(tmp_path):
    return tmp_path / "d" / STATE_FILE


def test_each_look_records_the_runs_it_read_and_a_larger_cap_reads_the_same_values(tmp_path):
    _finished_runs(tmp_path)
    code, out, err = _decide(tmp_path, "--max-seeds", "4")
    assert code == 0, out + err
    state = load_state(tmp_path / "d")
    assert state.record["looks"] == [{"n": 4, "cells": ["optim.lr=0.01", "optim.lr=0.02"]}]
    used = state.record["runs"]["optim.lr=0.02"]["3"]
    assert used["iteration"] == 2 and used["value"] == 51.0 and len(used["config"]) == 16
    code, out, err = _decide(tmp_path, "--max-seeds", "6")  # seeds 4-5 are done too: a second look
    assert code == 0, out + err
    state = load_state(tmp_path / "d")
    assert [look["n"] for look in state.record["looks"]] == [4, 6]
    assert sorted(state.record["runs"]["optim.lr=0.01"], key=int) == ["0", "1", "2", "3", "4", "5"]
    json.loads(_state_file(tmp_path).read_text(), parse_constant=pytest.fail)  # strict JSON


@pytest.mark.parametrize("damage,words", [
    ("value", ["optim.lr=0.02 seed 1", "now reads 10 where the decisions read 45"]),
    ("extended", ["was trained further (eval.json of iteration 3, read at iteration 2)"]),
    ("deleted", ["optim.lr=0.01 seed 2", "is gone"]),
    ("nan", ["no longer holds a usable value"]),
    ("settings", ["holds a run trained with other settings"]),
])
def test_a_run_the_decisions_read_that_changed_is_refused_in_one_line(decided, tmp_path, damage, words):
    runs = _copy(decided, tmp_path)
    before = _state_file(tmp_path).read_text()
    run_dir = runs[("optim.lr=0.02", 1)] if damage != "deleted" else runs[("optim.lr=0.01", 2)]
    if damage == "value":
        _write_eval(run_dir, 10.0)
    elif damage == "extended":
        _write_eval(run_dir, 45.0, iteration=3)
    elif damage == "deleted":
        (run_dir / "eval.json").unlink()
    elif damage == "nan":
        (run_dir / "eval.json").write_text('{"iteration": 2, "success_rate": NaN, "score": 1, "per_type": {}}')
    else:
        text = (run_dir / "config.yaml").read_text()
        (run_dir / "config.yaml").write_text(text.replace("lr: 0.02", "lr: 0.03"))
    code, out, err = _decide(tmp_path, "--max-seeds", "8")  # a larger cap would look again: refused first
    assert_one_error_line(code, out, err, [*words, "another --name"])
    assert _state_file(tmp_path).read_text() == before
    assert not list((tmp_path / "d").rglob("train.log"))  # nothing was launched


def test_status_and_report_show_no_decision_from_a_changed_run(decided, tmp_path):
    runs = _copy(decided, tmp_path)
    _write_eval(runs[("optim.lr=0.02", 1)], 10.0)
    code, out, err = _decide(tmp_path, "--status")
    assert_one_error_line(code, out, err, ["optim.lr=0.02 seed 1", "now reads 10 where the decisions read 45"])
    code, out, err = run_cli(["report", str(tmp_path / "d"), "--out", str(tmp_path / "report")])
    assert code == 0 and "its decisions are not shown" in err and "decisions against" not in out, (code, out, err)
    assert "now reads 10 where the decisions read 45" in err


def test_raising_iterations_after_a_look_is_refused_before_anything_runs(decided, tmp_path):
    _copy(decided, tmp_path)
    before = _state_file(tmp_path).read_text()
    code, out, err = run_cli(["ablate", "lab-alfworld", "--grid", "optim.lr=0.01,0.02", "--iterations", "3",
                              "--until-decided", "--max-seeds", "8", "--output-dir", str(tmp_path), "--name", "d"])
    assert_one_error_line(code, out, err, ["train.iterations 2 -> 3", "optim.lr=0.01", "another --name"])
    assert _state_file(tmp_path).read_text() == before
    assert not list((tmp_path / "d").rglob("train.log"))  # nothing was launched


@pytest.mark.parametrize("value,words", [
    ("NaN", ["no number at success_rate (or not strict JSON)"]),
    ("1e999", ["no number at success_rate (or not strict JSON)"]),
    ("1e308", ["must be a finite number in [0, 100], got 1e+308"]),
    ('"12.5"', ["must be a finite number in [0, 100], got '12.5'"]),
    ("true", ["got True"]),
    ("-3", ["got -3"]),
])
def test_a_value_is_read_only_when_it_is_a_finite_number_in_range(tmp_path, value, words):
    (tmp_path / "eval.json").write_text(f'{{"iteration": 2, "success_rate": {value}, "score": 1, "per_type": {{}}}}')
    with pytest.raises(UsageError) as info:
        read_value(tmp_path, ("success_rate",))
    assert all(word in str(info.value) for word in [str(tmp_path / "eval.json"), *words]), str(info.value)


def test_a_value_out_of_range_stops_the_round_before_its_decision(decided, tmp_path):
    runs = _copy(decided, tmp_path)
    _state_file(tmp_path).unlink()
    (runs[("optim.lr=0.01", 0)] / "eval.json").write_text(
        '{"iteration": 2, "success_rate": 1e308, "score": 1, "per_type": {}}')
    code, out, err = _decide(tmp_path, "--max-seeds", "4")
    assert_one_error_line(code, out, err, ["optim.lr=0.01/s0/eval.json", "got 1e+308"])
    state = load_state(tmp_path / "d")  # the design was recorded, no look taken, nothing non-finite written
    assert state.looks == [] and state.record["runs"] == {}


@pytest.mark.parametrize("edit,words", [
    (lambda s: s["design"].update(horizon=0), ["design.horizon must be a whole number >= 4, got 0"]),
    (lambda s: s["design"].update(alpha=5), ["design.alpha must be a number strictly between 0 and 1, got 5"]),
    (lambda s: s["design"].update(alpha="abc"), ["got 'abc'"]),
    (lambda s: s["comparisons"]["optim.lr=0.02"].update(status="won"), ["status must be one of", "got 'won'"]),
    (lambda s: s["looks"][0].update(n=5), ["look 1 must be at 4 seeds, got 5"]),
    (lambda s: s.update(max_seeds="ten"), ["max_seeds must be a whole number >= 4"]),
    (lambda s: s["comparisons"]["optim.lr=0.02"].update(seeds=40), ["seeds must be a whole number 0..6"]),
    (lambda s: s["record"]["runs"]["optim.lr=0.01"]["0"].update(value=None), ["record.runs.optim.lr=0.01.0"]),
    (lambda s: s["design"].update(metric="loss"), ["design.metric is no metric of eval.json: 'loss'"]),
])
def test_a_hand_edited_state_is_refused_with_its_problems_named(decided, tmp_path, edit, words):
    _copy(decided, tmp_path)
    data = json.loads(_state_file(tmp_path).read_text())
    edit(data)
    _state_file(tmp_path).write_text(json.dumps(data))
    code, out, err = _decide(tmp_path)
    assert_one_error_line(code, out, err, [*words, "is not a valid decision state", "another --name"])


def test_every_problem_of_a_state_is_named_and_status_and_report_refuse_it(decided, tmp_path):
    _copy(decided, tmp_path)
    data = json.loads(_state_file(tmp_path).read_text())
    data["design"].update(horizon=0, alpha=5)
    data["comparisons"]["optim.lr=0.02"].update(status="won")
    _state_file(tmp_path).write_text(json.dumps(data))
    code, out, err = _decide(tmp_path, "--status")
    assert_one_error_line(code, out, err, ["design.alpha", "design.horizon", "status must be one of"])
    code, out, err = run_cli(["report", str(tmp_path / "d"), "--out", str(tmp_path / "report")])
    assert code == 0 and "is not a valid decision state" in err and "decisions against" not in out, (out, err)


@pytest.mark.parametrize("content,words", [
    ('{"design": 1e999}', ["not strict JSON"]),
    ("NaN", ["not strict JSON"]),
    ("[1, 2]", ["it is not a JSON object"]),
    ('{"design": {}, "max_seeds": 10, "looks": [], "comparisons": {}}', ["design.alpha must be"]),
])
def test_a_state_file_that_is_no_state_is_refused(tmp_path, content, words):
    (tmp_path / STATE_FILE).write_text(content)
    with pytest.raises(UsageError) as info:
        load_state(tmp_path)
    assert all(word in str(info.value) for word in [str(tmp_path / STATE_FILE), *words]), str(info.value)


def test_a_state_file_that_is_a_folder_is_one_line(tmp_path):
    _state_file(tmp_path).mkdir(parents=True)
    code, out, err = _decide(tmp_path)
    assert_one_error_line(code, out, err, [str(_state_file(tmp_path)), "is not a file"])


def test_a_look_that_cannot_decide_is_written_as_null_and_the_state_reads_back_equal(tmp_path):
    # the first of 40 planned seeds spends almost nothing: that look has no boundary (infinite), kept as null
    state = resume_or_start(tmp_path, ["b", "c"], baseline="b", metric=None, alpha=None, min_effect=None,
                            max_seeds=40)
    state.analyse(4, {"b": np.array([1.0, 2.0, 3.0, 4.0]), "c": np.array([2.0, 2.0, 5.0, 4.0])})
    assert state.comparisons["c"].t_bounds == [None]
    save_state(tmp_path, state)
    text = _state_file_in(tmp_path).read_text()
    assert "Infinity" not in text and "NaN" not in text and json.loads(text)["comparisons"]["c"]["t_bounds"] == [None]
    again = load_state(tmp_path)
    assert again.comparisons == state.comparisons and again.looks == state.looks


def _state_file_in(folder):
    return folder / STATE_FILE


@pytest.mark.parametrize("args,words", [
    (["--metric", "per_type.nosuchtype"], ["alfworld", "no task type 'nosuchtype'", "pick, look, clean"]),
    (["--set", "train.eval_episodes=0"], ["train.eval_episodes is 0", "no eval.json"]),
    (["--alpha", "1e-300"], ["--alpha 1e-300", "too small to decide anything with --max-seeds 10"]),
])
def test_a_metric_no_evaluation_holds_or_a_useless_alpha_is_refused_before_anything_is_written(tmp_path, args,
                                                                                                  words):
    code, out, err = _decide(tmp_path, *args)
    assert_one_error_line(code, out, err, words)
    assert list(tmp_path.iterdir()) == []


def test_a_design_that_failed_before_its_first_look_starts_over_with_the_next_options(tmp_path):
    _finished_runs(tmp_path, seeds=4)
    # what an earlier version left: a design recorded with a metric no evaluation holds, then round 1 failed
    typo = resume_or_start(tmp_path / "d", ["optim.lr=0.01", "optim.lr=0.02"], baseline=None,
                           metric="per_type.nosuchtype", alpha=None, min_effect=None, max_seeds=4)
    save_state(tmp_path / "d", typo)
    code, out, err = _decide(tmp_path)
    assert_one_error_line(code, out, err, ["no task type 'nosuchtype'", "give another --metric"])
    code, out, err = _decide(tmp_path, "--metric", "per_type.heat")  # no look yet: the design starts over
    assert code == 0, out + err
    state = load_state(tmp_path / "d")
    assert state.design.metric == "per_type.heat" and [look["n"] for look in state.looks] == [4]
    code, out, err = _decide(tmp_path, "--metric", "score")  # once a look is taken, the design stays
    assert_one_error_line(code, out, err, ["--metric per_type.heat", "another --name"])
