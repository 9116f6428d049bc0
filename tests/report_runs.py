"""Finished runs written by hand for the report tests, and the report run on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import yaml

QWEN = "Qwen/Qwen2.5-1.5B-Instruct"


def write_run(path, estimator, env, success, score, *, seed=0, options=None, per_type=None, model=QWEN, extra=None,
              curve=None, evaluation=None, episodes=8):
    """A finished run under ``path`` as ``gagpo report`` reads it: config.yaml (``extra``: dotted
    ``section.field`` settings), eval.json (``success``, ``score``, ``per_type``, ``episodes``: None
    leaves it out, as a run that does not record them, so no within-seed floor applies; and
    ``evaluation``'s keys) and metrics.jsonl (``curve``: train/success_rate per iteration)."""
    path.mkdir(parents=True)
    config = {"name": "t", "estimator": {"name": estimator, "options": options or {}}, "env": {"name": env},
              "model": {"name": model}, "train": {"seed": seed}, "logging": {"output_dir": str(path.parent)}}
    for key, value in (extra or {}).items():
        section, field = key.split(".")
        config.setdefault(section, {})[field] = value
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    recorded = {} if episodes is None else {"episodes": episodes}
    (path / "eval.json").write_text(json.dumps({"success_rate": success, "score": score, "per_type": per_type or {},
                                                **recorded, **(evaluation or {})}))
    lines = [{"iteration": i, "train/success_rate": v, "adv/iqr": v / 100} for i, v in enumerate(curve or [], 1)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def table_row(frame: pd.DataFrame, method: str, kind: str = "measured") -> pd.Series:
    """The row of ``method`` (``kind``: measured or paper) in a report table."""
    return frame[(frame["method"] == method) & (frame["kind"] == kind)].iloc[0]


def run_report(*args) -> subprocess.CompletedProcess:
    """``gagpo report ARGS`` in a fresh interpreter, tables 200 columns wide."""
    return subprocess.run([sys.executable, "-m", "gagpo_cli.app", "report", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
