"""kill -9 at any moment, then ``--resume``: the finished run's metrics equal an uninterrupted run's.

Kill points: before the first checkpoint (as soon as the run directory exists, and right after the
baseline evaluation's line), just after a checkpoint, and at a random moment. A corrupt newest
checkpoint is set aside (kept, renamed) and the newest intact one is continued. Uses the tiny model
and corridor environment of ``test_train_resume`` (the ``resume_setup`` and ``straight_run`` fixtures
of ``conftest.py``, the helpers of ``train_runs.py``).
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from train_runs import SETS, comparable, run_flags, start_train, train_args, train_in_process, wait_for

from gagpo_cli.errors import UsageError
from gagpo_cli.train.checkpoint import checkpoint_dir, list_checkpoints
from gagpo_cli.train.records import read_metrics

# printed in the test id, so a failing moment can be replayed; the xdist workers of one run share it
# (they must collect the same ids), drawn from the run's id
RANDOM_SEED = random.Random(os.environ.get("PYTEST_XDIST_TESTRUNUID")).randrange(1 << 16)


def _kill(proc) -> None:
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"


def _sleep_unless(seconds: float, path) -> None:
    """Sleep ``seconds``, or less if ``path`` appears first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.01)


def _resume_and_compare(root, model_dir, name: str, straight) -> str:
    resumed = start_train(root, [*train_args(run_flags(root, model_dir, name, 4)), "--resume"])
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "Traceback" not in err
    run_dir = root / "runs" / name
    lines = read_metrics(run_dir)
    assert [m["iteration"] for m in lines] == [m["iteration"] for m in read_metrics(straight)]
    assert comparable(lines) == comparable(read_metrics(straight))
    assert (run_dir / "eval.json").is_file()
    return err


@pytest.mark.parametrize("moment", ["run-dir-created", "baseline-recorded", "after-checkpoint-1",
                                    f"random-{RANDOM_SEED}"])
def test_kill_9_at_any_moment_then_resume_matches_an_uninterrupted_run(resume_setup, straight_run, moment):
    root, model_dir = resume_setup
    name = f"kill-{moment}"
    run_dir = root / "runs" / name
    proc = start_train(root, train_args(run_flags(root, model_dir, name, 50)))
    if moment == "run-dir-created":
        wait_for(run_dir / "config.yaml", proc)
    elif moment == "baseline-recorded":
        wait_for(run_dir / "evals" / "iter_000000.json", proc)  # the evaluation before any update
    elif moment == "after-checkpoint-1":
        wait_for(checkpoint_dir(run_dir) / "iter_000001", proc)
    else:  # a random moment before the run's iteration 4 ends (the uninterrupted run's length)
        wait_for(run_dir / "config.yaml", proc)
        _sleep_unless(random.Random(RANDOM_SEED).uniform(0.0, 6.0), checkpoint_dir(run_dir) / "iter_000003")
    _kill(proc)
    before_first_save = not list_checkpoints(run_dir)
    if moment in ("run-dir-created", "baseline-recorded"):
        assert before_first_save
    if before_first_save and (run_dir / "metrics.jsonl").is_file():
        # a plain re-run does not send the user in circles: it says what --resume will do
        with pytest.raises(UsageError, match="no checkpoint yet: --resume restarts it from iteration 1"):
            train_in_process(run_flags(root, model_dir, name, 4))
    err = _resume_and_compare(root, model_dir, name, straight_run)
    if before_first_save:
        assert "restarting it from iteration 1" in err
    else:
        assert "continuing from" in err


def test_a_corrupt_newest_checkpoint_is_kept_aside_and_the_previous_one_continued(resume_setup, straight_run, capsys):
    root, model_dir = resume_setup
    flags = run_flags(root, model_dir, "fallback", 2)
    run_dir = train_in_process(flags)
    newest = list_checkpoints(run_dir)[-1]
    assert [p.name for p in list_checkpoints(run_dir)] == ["iter_000001", "iter_000002"]
    damaged = newest / "trainer.pt"
    damaged.write_bytes(damaged.read_bytes()[:-10])
    capsys.readouterr()

    train_in_process(run_flags(root, model_dir, "fallback", 4), resume=True)
    err = capsys.readouterr().err
    kept = checkpoint_dir(run_dir) / "corrupt-iter_000002"
    assert "checkpoint iter_000002 is unusable" in err and str(damaged) in err and str(kept) in err
    assert "continuing from" in err and "iter_000001" in err
    assert (kept / "trainer.pt").is_file()  # never deleted
    assert comparable(read_metrics(run_dir)) == comparable(read_metrics(straight_run))


def test_resume_of_a_folder_without_a_run_is_an_error_that_points_to_the_plain_command(resume_setup, tmp_path):
    root, model_dir = resume_setup
    flags = {**run_flags(root, model_dir, "never-started", 2), "output_dir": str(tmp_path)}
    with pytest.raises(UsageError, match="holds no run to continue; start it without --resume"):
        train_in_process(flags, SETS, resume=True)
    assert not (tmp_path / "never-started").exists()


def test_resume_with_fewer_iterations_than_the_checkpoint_holds_is_an_error(resume_setup, straight_run):
    root, model_dir = resume_setup
    before = {p: p.read_bytes() for p in (straight_run / "config.yaml", straight_run / "metrics.jsonl",
                                          straight_run / "eval.json")}
    with pytest.raises(UsageError, match=r"already holds 4 iterations, more than --iterations 2; raise --iterations"):
        train_in_process(run_flags(root, model_dir, "straight", 2), resume=True)
    assert {p: p.read_bytes() for p in before} == before  # the finished run is left as it was
