"""``gagpo report`` on run directories this test writes: numbers equal hand-computed means and sample
stds, Table 1/2 layouts, published rows kept apart, LaTeX bold, fewer-seed marks, figures, errors."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from report_runs import run_report, table_row, write_run

from gagpo_cli.errors import UsageError
from gagpo_cli.report.command import report_command
from gagpo_cli.report.runs import load_runs
from gagpo_cli.report.tables import paper_table
from gagpo_cli.report.writers import to_latex, to_markdown


@pytest.fixture
def table_runs(tmp_path):
    """GAGPO 3 seeds and GiGPO (w/o std) 2 seeds on ALFWorld and WebShop; an ablation with 3 seeds."""
    root = tmp_path / "runs"
    alf = {"gagpo": [90.0, 94.0, 95.0], "gigpo": [80.0, 83.0]}
    for seed, rate in enumerate(alf["gagpo"]):
        write_run(root / "gagpo-alf" / f"s{seed}", "gagpo", "alfworld", rate, rate, seed=seed,
                  per_type={"pick": rate, "look": rate - 20, "pick2": 50.0 + seed})
        write_run(root / "gagpo-ws" / f"s{seed}", "gagpo", "webshop", 60.0 + seed, 80.0 + 2 * seed, seed=seed)
        write_run(root / "mc-alf" / f"s{seed}", "gagpo-mc", "alfworld", 70.0 + seed, 70.0 + seed, seed=seed)
    for seed, rate in enumerate(alf["gigpo"]):
        write_run(root / "gigpo-alf" / f"s{seed}", "gigpo", "alfworld", rate, rate, seed=seed,
                  options={"mode": "mean_norm"}, per_type={"pick": 99.0})
    return root


def test_table1_numbers_are_the_hand_computed_means_and_stds(table_runs, tmp_path):
    report_command([table_runs], 1, tmp_path / "out")
    frame = pd.read_csv(tmp_path / "out" / "table1.csv")
    gagpo = table_row(frame, "GAGPO")
    assert gagpo["ALFWorld All mean"] == pytest.approx(93.0)  # (90 + 94 + 95) / 3
    assert gagpo["ALFWorld All std"] == pytest.approx(2.6457513, abs=1e-6)  # sqrt(((-3)^2 + 1 + 2^2) / 2)
    assert gagpo["ALFWorld All n"] == 3 and gagpo["ALFWorld All"] == "93.0 ± 2.6"
    assert gagpo["ALFWorld Look mean"] == pytest.approx(73.0)
    assert gagpo["ALFWorld Pick2 mean"] == pytest.approx(51.0) and gagpo["ALFWorld Pick2 std"] == pytest.approx(1.0)
    assert gagpo["WebShop Score mean"] == pytest.approx(82.0) and gagpo["WebShop Score std"] == pytest.approx(2.0)
    assert gagpo["WebShop Succ. mean"] == pytest.approx(61.0)
    gigpo = table_row(frame, "GiGPO (w/o std)")
    assert gigpo["ALFWorld All mean"] == pytest.approx(81.5) and gigpo["ALFWorld All std"] == pytest.approx(2.1213203)
    assert gigpo["ALFWorld All"] == "81.5 ± 2.1†"  # 2 seeds where others have 3
    assert pd.isna(gigpo["WebShop Score mean"]) and gigpo["WebShop Score n"] == 0
    assert list(frame["method"]) == ["GiGPO (w/o std)", "GAGPO", "GAGPO (Monte-Carlo advantage)"]  # paper order


def test_table2_rows_and_latex_bold_best(table_runs, tmp_path):
    runs, _ = load_runs([table_runs])
    table = paper_table(runs, 2)
    assert [r.label for r in table.rows] == ["GAGPO", "GAGPO (Monte-Carlo advantage)"]
    assert [c.header for c in table.columns] == ["ALFWorld All", "WebShop Score", "WebShop Succ."]
    assert any("GiGPO (w/o std)" in note for note in table.notes)  # left out of Table 2, said so
    latex = to_latex(table)
    assert "\\toprule" in latex and "\\bottomrule" in latex
    # mean [95 % Student-t interval]; the spread (2.65) is below what 8 episodes per evaluation allow (a rate of
    # 7 in 8 wins can be a p as far from 1 as 0.53), so the interval is the within-seed floor's; 3 seeds: no
    # test of 3 pairs goes below p = 0.25, nothing is bold
    assert "GAGPO & 93.0 [" in latex and "\\textbf" not in latex
    # 8 seeds each, episodes not recorded: the paired test over 8 shared seeds puts GAGPO above the ablation
    root = tmp_path / "eight"
    for seed in range(8):
        write_run(root / "gagpo" / f"s{seed}", "gagpo", "alfworld", 90.0 + seed % 4, 0.0, seed=seed, episodes=None)
        write_run(root / "mc" / f"s{seed}", "gagpo-mc", "alfworld", 70.0 + seed % 3, 0.0, seed=seed, episodes=None)
    eight = paper_table(load_runs([root])[0], 2)
    assert "GAGPO & \\textbf{91.5 [90.5, 92.5]}" in to_latex(eight) and "\\textbf{70.9" not in to_latex(eight)
    assert "**91.5 [90.5, 92.5]**" in to_markdown(eight)  # 91.5 ± t(0.975, 7) 1.195 / sqrt(8)


def test_paper_rows_are_separate_and_marked(table_runs, tmp_path):
    report_command([table_runs], 1, tmp_path / "out", paper=True)
    frame = pd.read_csv(tmp_path / "out" / "table1.csv")
    published = frame[frame["kind"] == "published"]
    gigpo = table_row(frame, "GiGPO (w/ std)", "published")
    assert gigpo["ALFWorld All mean"] == 86.7 and gigpo["ALFWorld All std"] == 1.7
    assert "2505.10978" in gigpo["source"]
    assert set(published["model"]) == {"Qwen2.5-1.5B-Instruct", "Qwen2.5-7B-Instruct"}
    assert (table_row(frame, "GAGPO")["kind"] == "measured"
            and table_row(frame, "GAGPO", "published")["ALFWorld All mean"] == 93.5)
    markdown = (tmp_path / "out" / "table1.md").read_text()
    assert "### Qwen2.5-1.5B-Instruct (published)" in markdown
    measured_block = markdown.split("### Qwen2.5-1.5B-Instruct (published)")[0]
    assert "PPO" not in measured_block  # never mixed with measured rows


def test_generic_table_groups_by_what_varied(tmp_path):
    root = tmp_path / "sweep"
    values = {(0.0, "group"): [40.0, 50.0], (1.0, "group"): [10.0, 30.0]}
    for (lam, norm), rates in values.items():
        for seed, rate in enumerate(rates):
            write_run(root / f"lambda={lam:g}" / f"s{seed}", "gagpo", "corridor", rate, rate / 2, seed=seed,
                      options={"lam": lam, "norm": norm})
    table = report_command([root], None, tmp_path / "out")
    assert [r.label for r in table.rows] == ["lam=0", "lam=1"]
    frame = pd.read_csv(tmp_path / "out" / "results.csv")
    assert frame["Success mean"].tolist() == [45.0, 20.0]
    assert frame["Score mean"].tolist() == [22.5, 10.0]
    assert frame["Success std"].tolist() == pytest.approx([7.0710678, 14.1421356])
    # an option only one estimator has is no part of the other's label (it was "mode=None")
    write_run(root / "grpo" / "s0", "grpo", "corridor", 30.0, 15.0, seed=0)
    labels = [r.label for r in report_command([root], None, tmp_path / "out2").rows]
    assert sorted(labels) == ["estimator=gagpo, lam=0, norm=group", "estimator=gagpo, lam=1, norm=group",
                              "estimator=grpo"]


def test_figures_are_pngs(table_runs, tmp_path):
    write_run(table_runs / "curves" / "s0", "gagpo", "alfworld", 50, 50, seed=5, curve=[10.0, 20.0, 30.0])
    write_run(table_runs / "curves" / "s1", "gagpo", "alfworld", 50, 50, seed=6, curve=[20.0, 30.0])
    report_command([table_runs], 1, tmp_path / "out", figures=True, baseline="GAGPO")
    pngs = sorted((tmp_path / "out" / "figures").glob("*.png"))
    assert [p.name for p in pngs] == ["alfworld_Qwen2.5-1.5B-Instruct_adv_iqr.png",
                                      "alfworld_Qwen2.5-1.5B-Instruct_train_success_rate.png",
                                      "table1_differences.png", "table1_intervals.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_curves_are_mean_and_std_over_seeds(tmp_path):
    from gagpo_cli.report.figures import curves

    write_run(tmp_path / "a", "gagpo", "alfworld", 1, 1, seed=0, curve=[10.0, 20.0, 30.0])
    write_run(tmp_path / "b", "gagpo", "alfworld", 1, 1, seed=1, curve=[20.0, 40.0])
    runs, _ = load_runs([tmp_path])
    its, mean, std = curves(runs, "train/success_rate")["GAGPO"]
    assert its.tolist() == [1, 2, 3] and mean.tolist() == [15.0, 30.0, 30.0]
    assert std.tolist() == pytest.approx([7.0710678, 14.1421356, 0.0])


def test_corrupt_eval_json_is_named_and_the_others_are_still_reported(table_runs, tmp_path):
    broken = table_runs / "gagpo-alf" / "s2" / "eval.json"
    broken.write_text('{"success_rate": 9')
    result = run_report(table_runs, "--table", "1", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("\n") == 1 and str(broken) in result.stderr and "corrupt eval.json" in result.stderr
    frame = pd.read_csv(tmp_path / "out" / "table1.csv")
    assert table_row(frame, "GAGPO")["ALFWorld All mean"] == pytest.approx(92.0)  # seeds 0 and 1 only


def test_nothing_to_report_is_one_line_exit_2(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [(empty, "no runs found"), (tmp_path / "missing", "no such run directory")]
    only = write_run(tmp_path / "only" / "s0", "gagpo", "alfworld", 1, 1)
    (only / "eval.json").write_text("not json")
    cases.append((tmp_path / "only", "nothing to report"))
    for path, message in cases:
        result = run_report(path, "--out", tmp_path / "out")
        assert result.returncode == 2, result.stdout + result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("error:")
    write_run(tmp_path / "corridor" / "s0", "gagpo", "corridor", 1, 1)
    with pytest.raises(UsageError, match="no finished runs fit Table 1"):
        report_command([tmp_path / "corridor"], 1, tmp_path / "out")


def test_runs_on_other_environments_are_left_out_of_table1_with_a_note(table_runs):
    write_run(table_runs / "corridor" / "s0", "gagpo", "corridor", 1, 1)
    runs, _ = load_runs([table_runs])
    table = paper_table([r for r in runs if r.evaluation], 1)
    assert any("corridor" in note for note in table.notes)


def test_report_without_arguments_reads_the_default_output_folder(tmp_path):

    proc = subprocess.run([sys.executable, "-m", "gagpo_cli.app", "report"], cwd=tmp_path, capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "runs" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
