"""One writer per run folder, one driver per sweep folder, for real: ``gagpo ablate`` and ``gagpo train``
as separate processes on the lab experiment (bow-mlp on embedded ALFWorld, a few seconds a run).

- Two identical sweeps started together, and a third one started once the first run of the sweep has
  finished (the "started 12 s apart" case, without a fixed wait): every ``metrics.jsonl`` counts its
  iterations once, in order, and every run was launched once; the sweeps that found the folder taken
  say who holds it, in one line.
- A sweep killed with SIGKILL while its run trains: the lock died with it (a new command runs), and while
  it held the run, ``gagpo train --resume`` on that folder was refused and ``gagpo report`` said so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import run_cli

# lab-alfworld (bow-mlp, score mode, one thread) cut to 2 x 2 iterations and 2 evaluation episodes
LAB = ["lab-alfworld", "--set", "train.eval_every=0", "--set", "train.eval_episodes=2",
       "--set", "rollout.tasks_per_batch=2", "--set", "rollout.group_size=2", "--set", "env.max_steps=3",
       "--set", "train.eval_max_steps=3"]
ENV = {**os.environ, "COLUMNS": "250", "OMP_NUM_THREADS": "1"}


def _gagpo(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gagpo_cli.app", *args], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _iterations(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line)["iteration"] for line in path.read_text().splitlines()] if path.is_file() else []


def _wait(condition, what: str, limit: float = 300.0) -> None:
    deadline = time.time() + limit
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_sweeps_started_together_and_apart_train_each_run_once(tmp_path):
    args = ["ablate", *LAB, "--iterations", "2", "--grid", "optim.lr=0.01,0.02", "--output-dir", str(tmp_path),
            "--name", "twice"]
    runs = [tmp_path / "twice" / f"optim.lr={lr}" / "s0" for lr in ("0.01", "0.02")]
    together = [_gagpo(*args), _gagpo(*args)]
    _wait(lambda: any((r / "eval.json").is_file() for r in runs), "the first finished run")
    later = _gagpo(*args)  # the first run is done, the other one running or pending
    results = [p.communicate(timeout=600) for p in [*together, later]]
    codes = [p.returncode for p in [*together, later]]

    for run_dir in runs:  # the records: each run trained once, its iterations in order
        assert _iterations(run_dir) == [1, 2], (run_dir, _iterations(run_dir))
        assert (run_dir / "train.log").read_text().count("\n=== ") == 1, run_dir
        assert json.loads((run_dir / "eval.json").read_text())["iteration"] == 2
    assert sorted(codes[:2]) == [0, 2], (codes, results)
    # the later driver is refused while the first one holds the folder; on a loaded machine the first one
    # may have finished both runs before the later one's interpreter started: then it trains nothing
    assert codes[2] == 2 or "2 done (skipped)" in results[2][0].replace("\n", " "), (codes, results)
    for (out, err), code in zip(results, codes, strict=True):
        if code == 2:  # the driver that found the folder taken: one line naming the holder
            (line,) = err.strip().splitlines()
            assert "is being run by pid" in line and str(tmp_path / "twice") in line.replace("\n", "")
            assert "Traceback" not in out + err


def test_a_killed_sweep_leaves_no_stale_lock_and_a_held_run_is_refused_and_noted(tmp_path):
    args = ["ablate", *LAB, "--set", "train.save_every=100000", "--output-dir", str(tmp_path), "--name", "killed"]
    run_dir = tmp_path / "killed" / "base" / "s0"
    holder = _gagpo(*args, "--iterations", "100000")
    try:
        _held_then_killed(holder, run_dir, tmp_path)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    code, out, err = run_cli([*args, "--iterations", "2"])  # no stale lock: it runs (restarting: no checkpoint)
    assert code == 0, out + err
    assert _iterations(run_dir) == [1, 2]


def _held_then_killed(holder: subprocess.Popen, run_dir: Path, tmp_path: Path) -> None:
    _wait(lambda: len(_iterations(run_dir)) >= 2, "the run's second iteration")

    # while it trains: a second writer of the run folder is refused, the report says the run is being written
    # in this process (no second interpreter to start); 2 iterations, so that a tool without the lock ends soon
    code, out, err = run_cli(["train", *LAB, "--iterations", "2", "--set", "train.save_every=100000",
                              "--output-dir", str(run_dir.parent), "--run-name", "s0", "--resume"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and not out, (code, out, err)
    assert "is being written by pid" in err, err
    code, out, err = run_cli(["report", str(tmp_path / "killed"), "--out", str(tmp_path / "report")])
    assert "being written" in out + err and str(run_dir) in (out + err).replace("\n", ""), (code, out, err)

    status = json.loads((run_dir / "sweep_status.json").read_text())
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    _wait(lambda: not _alive(status["pid"]), "the killed sweep's run to die with it", 30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False
