"""Crash safety through the real command line: kill -9 then --resume reproduces an uninterrupted run;
Ctrl-C saves a checkpoint and exits 130; a corrupt checkpoint is named."""

from __future__ import annotations

import json
import signal

from train_runs import SETS, comparable, run_flags, start_train, train_args, train_in_process, wait_for

from gagpo_cli.train.checkpoint import latest_checkpoint
from gagpo_cli.train.records import read_metrics


def test_kill_9_then_resume_matches_an_uninterrupted_run(resume_setup, straight_run):
    root, model_dir = resume_setup

    killed = start_train(root, train_args(run_flags(root, model_dir, "killed", 50)))
    wait_for(root / "runs" / "killed" / "checkpoints" / "iter_000002", killed)
    killed.kill()  # SIGKILL: no chance to clean up
    killed.wait(30)
    assert killed.returncode == -signal.SIGKILL

    resumed = start_train(root, [*train_args(run_flags(root, model_dir, "killed", 4)), "--resume"])
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "resuming" in out
    lines = read_metrics(root / "runs" / "killed")
    assert [m["iteration"] for m in lines] == [1, 2, 3, 4]  # nothing lost, nothing duplicated
    # CPU, same seed: exactly the same numbers, for the iterations after the checkpoint too
    assert comparable(lines) == comparable(read_metrics(straight_run))
    assert (root / "runs" / "killed" / "eval.json").is_file()


def test_ctrl_c_saves_a_checkpoint_and_exits_130(resume_setup):
    root, model_dir = resume_setup
    proc = start_train(root, train_args(run_flags(root, model_dir, "interrupted", 50)))
    wait_for(root / "runs" / "interrupted" / "metrics.jsonl", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted; saved" in err and "--resume" in err and "Traceback" not in err
    run_dir = root / "runs" / "interrupted"
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None
    # the checkpoint covers every recorded iteration: a resume continues right after the last line
    assert read_metrics(run_dir)[-1]["iteration"] == int(checkpoint.name.split("_")[1])


def test_resume_from_a_corrupt_checkpoint_names_the_file(resume_setup, capsys):
    """The only checkpoint is corrupt: it is named, kept aside, and the run restarts from iteration 1."""
    root, model_dir = resume_setup
    flags, sets = run_flags(root, model_dir, "corrupt", 1), [*SETS, "train.eval_episodes=0"]
    train_in_process(flags, sets)
    trainer_state = latest_checkpoint(root / "runs" / "corrupt") / "trainer.pt"
    trainer_state.write_bytes(trainer_state.read_bytes()[:-10])
    capsys.readouterr()
    train_in_process(flags, sets, resume=True)
    err = capsys.readouterr().err
    assert "corrupt checkpoint" in err and str(trainer_state) in err and "restarting it from iteration 1" in err
    assert (root / "runs" / "corrupt" / "checkpoints" / "corrupt-iter_000001" / "trainer.pt").is_file()


def test_gagpo_eval_of_the_run_directory_replays_its_final_evaluation(straight_run):
    """`gagpo eval --policy <run dir>` loads the newest checkpoint and acts at the evaluation
    temperature; with the run's seed it plays the very episodes of the run's eval.json."""
    from gagpo_cli.evaluate import evaluate

    final = json.loads((straight_run / "eval.json").read_text())
    result = evaluate("corridor", str(straight_run), episodes=final["episodes"], split=final["split"], seed=3)
    assert result["policy"] == str(straight_run)
    assert result["per_episode"] == final["per_episode"]
    assert result["success_rate"] == final["success_rate"]
