"""The up-front run-time estimate and its announcement before training (gagpo_cli.estimate)."""

from __future__ import annotations

import pytest
import torch
from tiny_model import tiny_policy
from train_runs import run_flags, train_in_process

from gagpo_cli.config import ExperimentConfig
from gagpo_cli.estimate import Estimate, TurnCost, calibrate, cpu_experiments, describe, estimate_run


def test_estimate_extrapolates_the_measured_turn_by_hand():
    cfg = ExperimentConfig()
    cfg.rollout.tasks_per_batch, cfg.rollout.group_size, cfg.rollout.max_new_tokens = 2, 3, 11
    cfg.train.iterations, cfg.train.eval_every, cfg.train.eval_episodes = 7, 3, 10
    cost = TurnCost(rows=2, prompt_tokens=100, prefill_s=0.5, step_fixed_s=0.01, step_row_s=0.002)
    est = estimate_run(cfg, cost, start=1, train_steps=4, eval_steps=5, machine_name="cpu, 2 cores")
    turn = 6 / 2 * 0.5 + 10 * (0.01 + 6 * 0.002)  # prompt pass scaled from 2 rows to 6, 10 decode steps of 6 rows
    assert est.iterations == 6
    assert est.rollout_s == pytest.approx(6 * 4 * turn)
    # (2 + 2 x 1 epoch) forward passes (LoRA) over 6 rows x 4 turns x (100 + 11) tokens at 0.5 s / 200 tokens
    assert est.update_s == pytest.approx(6 * 4 * (0.5 / 200) * 6 * 4 * 111)
    cfg.model.lora = False  # full fine-tuning: weight gradients too, 2 + 3 passes
    full = estimate_run(cfg, cost, start=1, train_steps=4, eval_steps=5, machine_name="cpu, 2 cores")
    assert full.update_s == pytest.approx(6 * 5 * (0.5 / 200) * 6 * 4 * 111)
    # evaluations after iterations 3 and 6 (start 1: none before) + the final one; 2 batches of 6 rows
    assert est.eval_s == pytest.approx(3 * 2 * 5 * turn)
    assert est.total_s == pytest.approx(est.rollout_s + est.update_s + est.eval_s)


def test_a_fresh_run_counts_its_baseline_evaluation_and_a_finished_one_costs_nothing():
    cfg = ExperimentConfig()
    cfg.train.iterations, cfg.train.eval_every, cfg.train.eval_episodes = 10, 5, 1
    cost = TurnCost(rows=1, prompt_tokens=10, prefill_s=1.0, step_fixed_s=0.0, step_row_s=0.0)
    fresh = estimate_run(cfg, cost, start=0, train_steps=1, eval_steps=1, machine_name="cpu")
    assert fresh.eval_s == pytest.approx(3 * 1.0)  # iteration 0, 5 and 10
    done = estimate_run(cfg, cost, start=10, train_steps=1, eval_steps=1, machine_name="cpu")
    assert done.total_s == 0


def test_long_cpu_runs_point_to_the_cpu_sized_experiments():
    long = Estimate(iterations=160, rollout_s=40 * 3600, update_s=3600, eval_s=3600, machine="cpu, 2 cores")
    line = describe(long, ["quickstart", "lab-alfworld"])
    assert "about 42.0 h on this machine (cpu, 2 cores)" in line
    assert "for a CPU try `gagpo train quickstart` or `gagpo train lab-alfworld`" in line
    assert "try" not in describe(Estimate(1, 60, 0, 0, "cpu, 2 cores"), ["quickstart"])
    assert "try" not in describe(Estimate(160, 40 * 3600, 0, 0, "cuda, H200"), ["quickstart"])
    assert "quickstart" in cpu_experiments()


def test_calibration_measures_the_real_model_and_leaves_the_random_state_alone():
    policy = tiny_policy()
    prompt = policy.chat_prompt("You are in a corridor. Go east.")
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    cost = calibrate(policy, prompt, batch=8, fast_s=0.0)  # fast_s=0: stop at the first batch size
    assert torch.equal(torch.rand(3), expected)
    assert cost.rows == 2 and cost.prompt_tokens == len(prompt)
    assert cost.prefill_s > 0 and cost.step_fixed_s >= 0 and cost.step_row_s >= 0
    assert cost.turn_s(8, 10) > cost.turn_s(2, 10) > cost.turn_s(2, 1) > 0
    grown = calibrate(policy, prompt, batch=8, fast_s=1e9)  # always fast: doubles up to the batch
    assert grown.rows == 8


def test_gagpo_train_prints_the_estimate_before_the_first_iteration(resume_setup, capsys):
    root, model_dir = resume_setup
    train_in_process(run_flags(root, model_dir, "estimated", 1))
    out = capsys.readouterr().out
    assert "estimate: about" in out and "(cpu, " in out
    assert out.index("estimate: about") < out.index("iter 1/1")
