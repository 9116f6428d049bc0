"""``benchmarks/gpu_probe.py --cpu``: every part of the GPU probe runs at small shapes on the CPU and
passes, and the report holds each part's checks and figures (docs/scaling.md#gpu-probe)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIGURES = {"A": ("full_update_s", "moved_fraction", "measured_per_token_layer_bytes", "plan_total_gib"),
           "B": ("lora_b_max_abs", "lora_dropout_checkpointing_update_s"),
           "C": ("tokens_per_s", "sampling_share", "logprob_gap_mean", "logprob_gap_p99", "logprob_gap_max"),
           "D": ("max_weight_difference", "checkpoint_mib"),
           "E": ("relative_gap", "sharded_generate_s_per_step", "sharded_logprob_gap_p99"),
           "F": ("full_ft_refusal", "lora_7b_update_s")}


def test_cpu_mode_passes_every_part(tmp_path):
    out = tmp_path / "probe.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # the probe finds the repository from its own folder
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_probe.py"), "--cpu", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["mode"] == "cpu" and list(report["parts"]) == list("ABCDEF")
    for letter, part in report["parts"].items():
        assert part["status"] == "pass" and part["checks"] and all(part["checks"].values()), (letter, part)
        assert set(FIGURES[letter]) <= set(part["figures"]), (letter, part["figures"])
    assert len(done.stdout.splitlines()) == 6  # one line per part
