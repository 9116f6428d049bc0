"""The report's decisions on the cases that once misled it: two seeds never settle or
bold anything; a seed run twice counts once and the note names what differed; rows whose evaluations
differ are not paired and their other differences are named; a variant key labels only its own
method; a stale ``eval.json`` is not final; the area under the curve does not depend on how often a
run was evaluated; a generic table never compares environments; a one-method report names it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from report_runs import table_row, write_run

from gagpo_cli.report.command import report_command
from gagpo_cli.report.intervals import analysis_of
from gagpo_cli.report.runs import load_runs
from gagpo_cli.report.tables import paper_table
from gagpo_cli.report.writers import to_markdown


def _frame(tmp_path, stem="table1"):
    return pd.read_csv(tmp_path / "out" / f"{stem}.csv")


def test_two_seeds_never_settle_and_never_bold(tmp_path):
    # x = [51, 52] against y = [49, 50]: P(X > Y) = 1, yet no test on 2 + 2 values reaches p < 0.33
    for seeds_y in ((0, 1), (5, 6)):  # shared seeds (paired) and separate seeds (Welch)
        root = tmp_path / f"runs{seeds_y[0]}"
        for seed, value in zip((0, 1), (51.0, 52.0), strict=True):
            write_run(root / "gagpo" / f"s{seed}", "gagpo", "webshop", value, value, seed=seed)
        for seed, value in zip(seeds_y, (49.0, 50.0), strict=True):
            write_run(root / "grpo" / f"s{seed}", "grpo", "webshop", value, value, seed=seed)
        table = report_command([root], 1, tmp_path / "out")
        comparison = analysis_of(table).comparisons[(1, "WebShop Succ.")]  # GAGPO against GRPO
        assert comparison.improvement.point == 1.0 and not comparison.settled
        assert not _frame(tmp_path)["WebShop Succ. best"].any()
        assert table_row(_frame(tmp_path), "GAGPO")["WebShop Succ. decision"] == "n < 3"
    # two identical rows with 2 seeds: nothing bold
    root = tmp_path / "same"
    for estimator in ("grpo", "rloo"):
        for seed, value in ((0, 40.0), (1, 45.0)):
            write_run(root / estimator / f"s{seed}", estimator, "webshop", value, value, seed=seed)
    report_command([root], 1, tmp_path / "out")
    assert not _frame(tmp_path)["WebShop Succ. best"].any()
    assert "**40" not in to_markdown(paper_table(load_runs([root])[0], 1))


def test_a_seed_run_twice_counts_once_and_the_note_names_what_differed(tmp_path):
    root = tmp_path / "runs"
    for seed, value in enumerate((60.0, 70.0, 80.0)):
        # the same config under two sweep folders, once with another rollout engine
        write_run(root / "sweep-a" / f"s{seed}", "gagpo", "webshop", value, value, seed=seed)
        write_run(root / "sweep-b" / f"s{seed}", "gagpo", "webshop", value + 2, value + 2, seed=seed,
                  extra={"rollout.engine": "hf"})
    table = report_command([root], 1, tmp_path / "out")
    row = table_row(_frame(tmp_path), "GAGPO")
    assert row["WebShop Succ. n"] == 3 and row["WebShop Succ. mean"] == pytest.approx(71.0)
    assert row["WebShop Succ. std"] == pytest.approx(10.0)  # of the per-seed means 61, 71, 81
    markdown = to_markdown(table)
    assert ("GAGPO (WebShop Score, WebShop Succ.): 3 seed(s) with several runs, averaged per seed; the runs differ "
            "in logging.output_dir, rollout.engine") in markdown


def test_rows_with_other_evaluations_are_not_paired_and_their_differences_are_named(tmp_path):
    root = tmp_path / "runs"
    for seed in range(3):
        write_run(root / "grpo" / f"s{seed}", "grpo", "webshop", 50.0 + seed, 50.0, seed=seed,
                  extra={"train.iterations": 100, "env.eval_split": "test", "train.eval_episodes": 64},
                  evaluation={"iteration": 100, "split": "test", "seed": seed})
        write_run(root / "gagpo" / f"s{seed}", "gagpo", "webshop", 60.0 + 2 * seed, 60.0, seed=seed,
                  extra={"train.iterations": 400, "env.eval_split": "valid", "train.eval_episodes": 8},
                  evaluation={"iteration": 400, "split": "valid", "seed": seed})
    table = report_command([root], 1, tmp_path / "out")
    row = table_row(_frame(tmp_path), "GAGPO")
    assert row["WebShop Succ. test"] == "Welch t + permutation" and row["WebShop Succ. paired seeds"] == 0
    assert row["WebShop Succ. unpaired because"] == "evaluation settings differ (env.eval_split, train.eval_episodes)"
    assert "train.iterations 400 vs 100" in row["WebShop Succ. differences"]
    markdown = to_markdown(table)
    assert "differ from GRPO beyond the table's labels in env.eval_split valid vs test" in markdown


def test_a_variant_key_labels_only_its_own_method(tmp_path):
    root = tmp_path / "runs"
    for seed in range(3):
        write_run(root / "grpo" / f"s{seed}", "grpo", "webshop", 40.0 + seed, 40.0, seed=seed)
        for lam in (0.5, 0.9):
            write_run(root / f"gagpo-{lam}" / f"s{seed}", "gagpo", "webshop", 50.0 + seed, 50.0, seed=seed,
                      options={"lam": lam})
    table = report_command([root], 1, tmp_path / "out")
    assert [r.label for r in table.rows] == ["GRPO", "GAGPO [lam=0.5]", "GAGPO [lam=0.9]"]
    assert {table.rows[i].label for i, _ in analysis_of(table).comparisons} == {"GAGPO [lam=0.5]", "GAGPO [lam=0.9]"}


def test_an_eval_json_older_than_the_configured_iterations_is_not_final(tmp_path):
    root = tmp_path / "runs"
    for seed in range(3):  # runs as the current trainer writes them: eval.json names its iteration
        write_run(root / "gagpo" / f"s{seed}", "gagpo", "webshop", 50.0, 50.0, seed=seed,
                  extra={"train.iterations": 200}, evaluation={"iteration": 200})
    # train.iterations raised to 400, the extension not finished: its eval.json is the old one
    write_run(root / "gagpo" / "s3", "gagpo", "webshop", 99.0, 99.0, seed=3, extra={"train.iterations": 400},
              evaluation={"iteration": 200})
    table = report_command([root], 1, tmp_path / "out")
    row = table_row(_frame(tmp_path), "GAGPO")
    assert row["WebShop Succ. n"] == 3 and row["WebShop Succ. mean"] == 50.0
    assert any("1 unfinished run(s) left out: 0 without eval.json, 1 whose eval.json is not for the configured "
               "train.iterations" in note for note in table.notes)


def _curve_run(path, estimator, seed, every, curve):
    """A run of 200 iterations evaluated every ``every`` iterations on ``curve(iteration)``."""
    run = write_run(path, estimator, "webshop", curve(200), curve(200), seed=seed)
    (run / "evals").mkdir()
    for iteration in range(0, 201, every):
        (run / "evals" / f"iter_{iteration:06d}.json").write_text(json.dumps(
            {"iteration": iteration, "success_rate": curve(iteration), "score": curve(iteration), "per_type": {}}))


def test_the_area_does_not_depend_on_how_often_a_run_was_evaluated(tmp_path):
    root = tmp_path / "runs"
    for seed in range(3):  # identical per-seed curves, one method evaluated every 10, the other every 50
        curve = lambda it, s=seed: (100 - 5 * s) * (1 - np.exp(-it / 30))  # noqa: E731 (within 0..100)
        _curve_run(root / "grpo" / f"s{seed}", "grpo", seed, 10, curve)
        _curve_run(root / "gagpo" / f"s{seed}", "gagpo", seed, 50, curve)
    report_command([root], 1, tmp_path / "out")
    frame = _frame(tmp_path, "table1_auc")
    row = table_row(frame, "GAGPO")
    assert row["WebShop Succ. mean"] == pytest.approx(table_row(frame, "GRPO")["WebShop Succ. mean"])
    assert row["WebShop Succ. diff"] == pytest.approx(0.0, abs=1e-9) and row["WebShop Succ. decision"] != "higher"
    markdown = (tmp_path / "out" / "table1_auc.md").read_text()
    assert "webshop: area on the common grid of iterations 0-200 every 50 (5 evaluations); 3 run(s) evaluated " \
           "more often contribute only these points" in markdown


def test_a_generic_table_keeps_environments_apart_and_names_a_lone_method(tmp_path):
    root = tmp_path / "runs"
    for seed in range(3):
        write_run(root / "alf" / f"s{seed}", "gagpo", "alfworld", 90.0, 90.0, seed=seed)
        write_run(root / "ws" / f"s{seed}", "gagpo", "webshop", 10.0 + seed, 30.0, seed=seed)
    table = report_command([root], None, tmp_path / "out")
    assert [(r.block, r.label) for r in table.rows] == [("alfworld", "GAGPO"), ("webshop", "GAGPO")]
    assert analysis_of(table).leaders == {}  # one row per environment: nothing ranked across them
    alone = report_command([root / "alf"], None, tmp_path / "out")
    assert [r.label for r in alone.rows] == ["GAGPO"]
    assert [c.header for c in alone.columns] == ["Success"]  # ALFWorld's score is its success
    assert any("no Score column" in note for note in alone.notes)
