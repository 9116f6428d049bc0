"""What a training run shows from its first line to its last: the baseline and the final evaluations
run under the heartbeat and the iteration bar, and the baseline under the run's Ctrl-C handling
(gagpo_cli.train.recipe with gagpo_cli.train.forecast.RunProgress)."""

from __future__ import annotations

import json
import signal
import threading

import pytest
from train_runs import run_flags, train_in_process

from gagpo_cli import console
from gagpo_cli.train import evaluation
from gagpo_cli.train.checkpoint import checkpoint_path
from gagpo_cli.train.stopping import TrainingInterrupted


def _heartbeat_running() -> bool:
    return any(thread.name == "gagpo-heartbeat" for thread in threading.enumerate())


def test_the_baseline_and_final_evaluations_run_under_the_heartbeat_and_the_bar(resume_setup, monkeypatch, capsys):
    root, model_dir = resume_setup
    seen = []
    play = evaluation.play_evaluation

    def watched(*args, **kwargs):  # the real evaluation, noting what the run shows while it plays
        seen.append((console.status(), _heartbeat_running()))
        return play(*args, **kwargs)

    monkeypatch.setattr(evaluation, "play_evaluation", watched)
    train_in_process(run_flags(root, model_dir, "watched", 2))  # eval_every 3: the baseline and the final one
    assert seen == [("iterations 0/2", True), ("iterations 2/2", True)]
    assert not _heartbeat_running()  # stopped with the run


def test_ctrl_c_during_the_baseline_saves_iteration_0_and_resume_plays_it_again(resume_setup, monkeypatch, capsys):
    root, model_dir = resume_setup
    before = signal.getsignal(signal.SIGINT)
    play = evaluation.play_evaluation
    calls = []

    def interrupted(*args, **kwargs):  # the real evaluation, with a Ctrl-C in its first one
        if not calls and signal.getsignal(signal.SIGINT) is not before:  # only where the run handles Ctrl-C
            signal.raise_signal(signal.SIGINT)
        calls.append(1)
        return play(*args, **kwargs)

    monkeypatch.setattr(evaluation, "play_evaluation", interrupted)
    with pytest.raises(TrainingInterrupted) as stopped:
        train_in_process(run_flags(root, model_dir, "interrupted", 2))
    run_dir = stopped.value.run_dir
    assert stopped.value.checkpoint == checkpoint_path(run_dir, 0) and stopped.value.checkpoint.exists()
    assert (run_dir / "evals" / "iter_000000.json").is_file()  # the baseline in flight was finished
    assert not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text().strip()
    assert signal.getsignal(signal.SIGINT) is before
    train_in_process(run_flags(root, model_dir, "interrupted", 2), resume=True)
    assert len(calls) == 3  # the baseline again, then the final evaluation
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in lines] == [1, 2]
    assert (run_dir / "eval.json").is_file()
