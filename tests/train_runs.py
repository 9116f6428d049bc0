"""Training runs through the real command line, shared by the resume, crash, engine and forecast tests.

The helpers build ``gagpo train`` command lines for the ``resume_setup`` fixture of ``conftest.py``
(a tiny model saved as a folder, the corridor plugin on ``sys.path``), run them in-process or as a
child process, and compare metrics without their wall-clock entries.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from gagpo_cli.train.command import config_from_cli
from gagpo_cli.train.recipe import train

SETS = ["rollout.tasks_per_batch=2", "rollout.group_size=2", "env.max_steps=3", "rollout.max_new_tokens=6",
        "train.save_every=1", "train.eval_every=3", "train.eval_episodes=1", "model.dtype=float32",
        "model.lora_rank=4", "optim.lr=1e-3"]


def run_flags(root: Path, model_dir: Path, run_name: str, iterations: int) -> dict:
    """The ``gagpo train`` flags of a corridor run named ``run_name`` under ``root / "runs"``."""
    return {"model": str(model_dir), "env": "corridor", "seed": 3, "iterations": iterations,
            "output_dir": str(root / "runs"), "run_name": run_name}


def train_args(flags: dict, sets: list[str] = SETS) -> list[str]:
    """The ``gagpo train`` command line of ``flags`` and ``--set`` overrides."""
    args = ["train"]
    for name, value in flags.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    for item in sets:
        args += ["--set", item]
    return args


def train_in_process(flags: dict, sets: list[str] = SETS, resume: bool = False) -> Path:
    """What ``gagpo train`` runs, called directly; returns the run directory."""
    return train(config_from_cli(None, sets, flags), resume=resume)


def start_train(root: Path, args: list[str]) -> subprocess.Popen:
    """``gagpo ARGS`` as a child process with the plugin of ``resume_setup`` on its PYTHONPATH."""
    path = os.pathsep.join(filter(None, [str(root / "plugin"), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-m", "gagpo_cli.app", *args],
                            env={**os.environ, "PYTHONPATH": path},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Return once ``path`` exists; fail when ``proc`` ends first or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"run ended before {path} appeared: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path} did not appear in {timeout}s")
        time.sleep(0.05)


def comparable(lines: list[dict]) -> list[dict]:
    """Metrics without wall-clock measurements (timing/*, perf/*), which differ between any two runs."""
    return [{k: v for k, v in m.items() if not k.startswith(("timing/", "perf/"))} for m in lines]
