"""``gagpo report`` reads verl's run logs beside gagpo's own runs. The logs in
``tests/fixtures/verl_logs`` were written by verl's own logging code (``verl.utils.tracking.Tracking``:
console, its JSONL ``file`` backend, a wandb offline run) with verl-agent's validation metric names;
``make_logs.py`` there made them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from report_runs import table_row, write_run

from gagpo_cli.report.command import report_command
from gagpo_cli.report.runs import load_runs
from gagpo_cli.report.verl_logs import read_verl_log

LOGS = Path(__file__).parents[1] / "fixtures" / "verl_logs"


def test_each_form_of_verl_log_names_its_run_and_its_evaluations():
    wandb_run = next(LOGS.glob("wandb/offline-run-*/run-*.wandb"))
    forms = {"jsonl": LOGS / "gigpo_alfworld_s0.jsonl", "console": LOGS / "gigpo_webshop_s1.log", "wandb": wandb_run}
    read = {form: read_verl_log(path) for form, path in forms.items()}
    expected = {"jsonl": ("gigpo", "alfworld", 0, 70.0, 70.0), "console": ("gigpo", "webshop", 1, 71.0, 91.0),
                "wandb": ("gagpo", "alfworld", 1, 76.0, 76.0)}
    for form, (config, curve) in read.items():
        final = curve[-1][1]
        got = (config["estimator"]["name"], config["env"]["name"], config["train"]["seed"], final["success_rate"],
               final["score"])
        assert got == pytest.approx(expected[form]), form
        assert [step for step, _ in curve] == [0, 10, 20] and config["train"]["iterations"] == 20
    jsonl_final = read["jsonl"][1][-1][1]["per_type"]
    assert jsonl_final == pytest.approx({"pick": 70, "pick2": 75, "look": 80, "heat": 85, "cool": 90, "clean": 95})
    assert read["console"][1][0][1]["per_type"] == {}  # WebShop: no task types


def test_files_that_are_no_verl_log_are_not_runs(tmp_path):
    (tmp_path / "notes.log").write_text("step:3 - actor/pg_loss:0.1\nno validation here\n")
    (tmp_path / "other.jsonl").write_text('{"iteration": 1}\n')
    assert read_verl_log(tmp_path / "notes.log") is None and read_verl_log(tmp_path / "other.jsonl") is None


def test_verl_runs_sit_in_table_1_beside_gagpo_s_own(tmp_path):
    shutil.copytree(LOGS, tmp_path / "verl")
    write_run(tmp_path / "own" / "grpo-alf", "grpo", "alfworld", 60.0, 60.0, per_type={"pick": 61.0})
    runs, warnings = load_runs([tmp_path])
    assert not warnings and len(runs) == 5  # a console log beside its JSONL is the same run, read once
    report_command([tmp_path], 1, tmp_path / "out")
    frame = pd.read_csv(tmp_path / "out" / "table1.csv")
    gagpo, gigpo, grpo = (table_row(frame, m) for m in ("GAGPO", "GiGPO (w/ std)", "GRPO"))
    assert gagpo["ALFWorld All n"] == 2 and gagpo["ALFWorld All mean"] == pytest.approx(75.5)  # seeds 0 and 1
    assert gigpo["ALFWorld All mean"] == pytest.approx(70.0) and gigpo["WebShop Score mean"] == pytest.approx(91.0)
    assert gigpo["WebShop Succ. mean"] == pytest.approx(71.0) and grpo["ALFWorld All mean"] == pytest.approx(60.0)
