"""The report's answers where seeds misbehave, on the cases that misled it: zero spread read as
certainty, a shared reference that settles every row at once on three seeds, unshared seeds dropped
by the pairing; and the flags and the family of claims ``gagpo report`` prints for bimodal rows and
rows at the ceiling (the error rates over whole families of shapes: tests/sweep/test_sequential_families.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from report_runs import table_row, write_run

from gagpo_cli.report.command import report_command
from tests.support import run_cli


def _row(tmp_path, method="GAGPO", stem="table1"):
    return table_row(pd.read_csv(tmp_path / "out" / f"{stem}.csv"), method)


def test_zero_spread_is_not_certainty(tmp_path):
    # three seeds at 100% against three at 96.875% (31 of 32 episodes), paired: no test of 3 pairs goes below
    # p = 0.25, and three evaluations at 100% leave the true rate anywhere above about 91%
    for seed in range(3):
        write_run(tmp_path / "runs" / "gagpo" / f"s{seed}", "gagpo", "webshop", 100.0, 100.0, seed=seed, episodes=32)
        write_run(tmp_path / "runs" / "grpo" / f"s{seed}", "grpo", "webshop", 96.875, 96.875, seed=seed, episodes=32)
    report_command([tmp_path / "runs"], 1, tmp_path / "out")
    row = _row(tmp_path)
    assert row["WebShop Succ. decision"] == "open" and row["WebShop Succ. p"] >= 0.25
    assert row["WebShop Succ. ci low"] < 95.0 < 100.0 < row["WebShop Succ. ci high"]  # never [100, 100]
    assert row["WebShop Succ. diff low"] < 0 < row["WebShop Succ. diff high"]


def test_a_shared_reference_at_the_floor_does_not_settle_every_row_on_three_seeds(tmp_path):
    # the reference drew 0% on all three seeds; every row is a few episodes above it on every seed
    rows = {"grpo": [0.0, 0.0, 0.0], "gagpo": [9.375, 12.5, 9.375], "rloo": [12.5, 15.625, 12.5],
            "ppo": [6.25, 9.375, 9.375]}
    for estimator, values in rows.items():
        for seed, value in enumerate(values):
            write_run(tmp_path / "runs" / estimator / f"s{seed}", estimator, "webshop", value, value, seed=seed,
                      episodes=32)
    report_command([tmp_path / "runs"], 1, tmp_path / "out")
    frame = pd.read_csv(tmp_path / "out" / "table1.csv")
    decisions = frame.loc[frame["method"] != "GRPO", "WebShop Succ. decision"]
    assert set(decisions) == {"open"} and not frame["WebShop Succ. best"].any()


def test_unshared_seeds_are_used(tmp_path):
    # 10 seeds a side, 2 of them shared, 20 points apart: pairing on the 2 shared seeds alone said "n < 3"
    rng = np.random.default_rng(4)
    for seed in range(10):
        write_run(tmp_path / "runs" / "gagpo" / f"s{seed}", "gagpo", "webshop", 60 + rng.normal(0, 4), 0.0,
                  seed=seed, episodes=None)
        write_run(tmp_path / "runs" / "grpo" / f"s{seed + 8}", "grpo", "webshop", 40 + rng.normal(0, 4), 0.0,
                  seed=seed + 8, episodes=None)
    report_command([tmp_path / "runs"], 1, tmp_path / "out")
    row = _row(tmp_path)
    assert row["WebShop Succ. test"] == "partially paired t + permutation"
    assert row["WebShop Succ. paired seeds"] == 2 and row["WebShop Succ. unshared seeds"] == 16
    assert row["WebShop Succ. decision"] == "higher"


def test_report_flags_bimodal_and_ceiling_rows_and_names_the_family(tmp_path):
    rows = {"grpo": [80.0, 85.0, 78.0, 82.0, 84.0, 79.0], "empg": [0.0, 86.0, 0.0, 70.0, 0.0, 66.0],
            "gagpo": [100.0, 98.4375, 100.0, 100.0, 96.875, 100.0]}
    for estimator, values in rows.items():
        for seed, value in enumerate(values):
            write_run(tmp_path / "runs" / estimator / f"s{seed}", estimator, "alfworld", value, value, seed=seed,
                      episodes=64)
    code, out, err = run_cli(["report", str(tmp_path / "runs"), "--table", "1", "--out", str(tmp_path / "out")])
    assert code == 0, err
    text = " ".join(out.split())
    assert "EMPG (ALFWorld All): bimodal: 3 of 6 seeds at 0% (the others up to 86%)" in text
    assert "GAGPO (ALFWorld All): ceiling: 5 of 6 seeds within one episode of 100%" in text
    assert "multiplicity: the claims of this table form two families, Holm within each" in text
    assert table_row(pd.read_csv(tmp_path / "out" / "table1.csv"), "EMPG")["ALFWorld All decision"] == "withheld"
