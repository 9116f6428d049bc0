"""The up-front run-time forecast and its announcement before training (gagpo_cli.train.forecast)."""

from __future__ import annotations

import pytest
import torch
from tiny_model import tiny_policy
from train_runs import run_flags, train_in_process

from gagpo_cli.config import ExperimentConfig
from gagpo_cli.train.forecast import (
    Forecast,
    RunProgress,
    TurnCost,
    calibrate,
    cpu_experiments,
    describe,
    evaluations_ahead,
    forecast_run,
)


def test_forecast_extrapolates_the_measured_turn_by_hand():
    cfg = ExperimentConfig()
    cfg.rollout.tasks_per_batch, cfg.rollout.group_size, cfg.rollout.max_new_tokens = 2, 3, 11
    cfg.train.iterations, cfg.train.eval_every, cfg.train.eval_episodes = 7, 3, 10
    cost = TurnCost(rows=2, prompt_tokens=100, prefill_s=0.5, step_fixed_s=0.01, step_row_s=0.002)
    est = forecast_run(cfg, cost, start=1, train_steps=4, eval_steps=5, machine_name="cpu, 2 cores")
    turn = 6 / 2 * 0.5 + 10 * (0.01 + 6 * 0.002)  # prompt pass scaled from 2 rows to 6, 10 decode steps of 6 rows
    assert est.iterations == 6
    assert est.rollout_s == pytest.approx(6 * 4 * turn)
    # (2 + 2 x 1 epoch) forward passes (LoRA) over 6 rows x 4 turns x (100 + 11) tokens at 0.5 s / 200 tokens
    assert est.update_s == pytest.approx(6 * 4 * (0.5 / 200) * 6 * 4 * 111)
    cfg.model.lora = False  # full fine-tuning: weight gradients too, 2 + 3 passes
    full = forecast_run(cfg, cost, start=1, train_steps=4, eval_steps=5, machine_name="cpu, 2 cores")
    assert full.update_s == pytest.approx(6 * 5 * (0.5 / 200) * 6 * 4 * 111)
    # evaluations after iterations 3 and 6 (start 1: none before) + the final one; 2 batches of 6 rows
    assert est.eval_s == pytest.approx(3 * 2 * 5 * turn)
    assert est.total_s == pytest.approx(est.rollout_s + est.update_s + est.eval_s)


def test_a_fresh_run_counts_its_baseline_evaluation_and_a_finished_one_only_its_final_one():
    cfg = ExperimentConfig()
    cfg.train.iterations, cfg.train.eval_every, cfg.train.eval_episodes = 10, 5, 1
    cost = TurnCost(rows=1, prompt_tokens=10, prefill_s=1.0, step_fixed_s=0.0, step_row_s=0.0)
    fresh = forecast_run(cfg, cost, start=0, train_steps=1, eval_steps=1, machine_name="cpu")
    assert fresh.eval_s == pytest.approx(3 * 1.0)  # iteration 0, 5 and 10
    done = forecast_run(cfg, cost, start=10, train_steps=1, eval_steps=1, machine_name="cpu")
    # resumed after its last iteration, a run plays its final evaluation again, and nothing else
    assert done.rollout_s == done.update_s == 0 and done.eval_s == pytest.approx(1.0)


def test_the_evaluations_ahead_follow_the_recipes_schedule():
    train = ExperimentConfig().train
    train.iterations, train.eval_every, train.eval_episodes = 4, 2, 8
    assert evaluations_ahead(train, 0) == 3  # the baseline, after 2 and after 4 (the final one)
    assert evaluations_ahead(train, 2) == 1  # resumed: after 4
    assert evaluations_ahead(train, 4) == 1  # resumed after the last iteration: the final one again
    train.iterations = 5
    assert evaluations_ahead(train, 0) == 4  # the baseline, after 2 and 4, and the final one after 5
    train.eval_every = 0
    assert evaluations_ahead(train, 0) == 1  # no schedule: only the final one
    train.eval_episodes = 0
    assert evaluations_ahead(train, 0) == 0


class FakeClock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _four_iterations() -> tuple[RunProgress, FakeClock]:
    """A fresh run of 4 iterations, evaluated before training and after iterations 2 and 4."""
    train = ExperimentConfig().train
    train.iterations, train.eval_every, train.eval_episodes = 4, 2, 8
    clock = FakeClock()
    return RunProgress(train, clock=clock, period_s=0), clock


def _play(progress: RunProgress, clock: FakeClock, iteration_s: int, evaluation_s: int) -> list[float | None]:
    """The recipe's order of work, every iteration and evaluation taking the seconds given; the time
    left read once per second, from the start to the end."""
    seen = [progress.left_s()]

    def work(seconds: int) -> None:
        for _ in range(seconds):
            clock.now += 1
            seen.append(progress.left_s())

    with progress.evaluation():  # the baseline
        work(evaluation_s)
    for iteration in range(1, 5):
        work(iteration_s)
        if iteration % 2 == 0:
            with progress.evaluation():
                work(evaluation_s)
        progress.finished(iteration)
    return seen


def test_time_left_shrinks_with_every_second_of_work_evaluations_included():
    progress, clock = _four_iterations()
    forecast = Forecast(iterations=4, rollout_s=300, update_s=100, eval_s=150, machine="cpu")
    with progress:
        assert progress.left_s() is None  # loading: nothing planned yet
        progress.begin(0, forecast)
        # as forecast: 100 s an iteration, 50 s an evaluation (3 of them), 550 s in all
        seen = _play(progress, clock, iteration_s=100, evaluation_s=50)
    assert seen == pytest.approx([550.0 - second for second in range(551)])


def test_a_unit_slower_than_priced_stops_the_countdown_and_the_finished_ones_reprice_the_rest(capsys):
    progress, clock = _four_iterations()
    forecast = Forecast(iterations=4, rollout_s=300, update_s=100, eval_s=150, machine="cpu")
    with progress:
        progress.begin(0, forecast)
        seen = _play(progress, clock, iteration_s=130, evaluation_s=40)
    assert seen[40] == pytest.approx(10 + 4 * 100 + 2 * 50)  # the baseline's last second: 10 s of 50 left
    # the baseline took 40 s: evaluations now cost 40 s, iterations still the forecast's 100 s
    assert seen[40 + 1] == pytest.approx(99 + 3 * 100 + 2 * 40)
    assert seen[40 + 30] == pytest.approx(70 + 3 * 100 + 2 * 40)  # 30 s into iteration 1
    assert seen[40 + 100] == seen[40 + 129] == pytest.approx(3 * 100 + 2 * 40)  # its price spent: no more off
    assert seen[40 + 131] == pytest.approx(3 * 130 + 2 * 40 - 1)  # finished in 130 s: re-priced
    within = [seen[i:i + 130] for i in (41, 171)]  # the first two iterations, second by second
    assert all(a >= b for run in within for a, b in zip(run, run[1:], strict=False))
    assert seen[-1] == 0
    assert "measured: 2 min for the first iteration here; about 8 min left for the other 3 iteration(s) and " \
           "2 evaluation(s)" in capsys.readouterr().out


def test_without_a_forecast_the_first_iteration_prices_the_run():
    progress, clock = _four_iterations()
    with progress:
        progress.begin(0, None)  # score mode: no calibration up front
        seen = _play(progress, clock, iteration_s=100, evaluation_s=30)
    assert seen[:131] == [None] * 131  # the baseline and iteration 1: nothing prices an iteration yet
    assert seen[131] == pytest.approx(300 - 1 + 2 * 30)  # 3 iterations of 100 s, 2 evaluations of 30 s


def test_long_cpu_runs_point_to_the_cpu_sized_experiments():
    long = Forecast(iterations=160, rollout_s=40 * 3600, update_s=3600, eval_s=3600, machine="cpu, 2 cores")
    line = describe(long, ["quickstart", "lab-alfworld"])
    assert "about 42.0 h on this machine (cpu, 2 cores)" in line
    assert "for a CPU try `gagpo train quickstart` or `gagpo train lab-alfworld`" in line
    assert "try" not in describe(Forecast(1, 60, 0, 0, "cpu, 2 cores"), ["quickstart"])
    assert "try" not in describe(Forecast(160, 40 * 3600, 0, 0, "cuda, H200"), ["quickstart"])
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


def test_gagpo_train_prints_the_forecast_before_the_first_iteration(resume_setup, capsys):
    root, model_dir = resume_setup
    train_in_process(run_flags(root, model_dir, "estimated", 1))
    out = capsys.readouterr().out
    assert "forecast: about" in out and "(cpu, " in out
    assert out.index("forecast: about") < out.index("iter 1/1")
