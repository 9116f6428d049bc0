"""The README's main job, for real: `gagpo train quickstart` with SmolLM2 on embedded WebShop."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml


@pytest.mark.slow
def test_quickstart_trains_the_default_model_end_to_end(tmp_path):
    # One iteration and one evaluation episode of the built-in quickstart (the file's other settings kept).
    command = [
        sys.executable, "-m", "gagpo_cli.app", "train", "quickstart", "--output-dir", str(tmp_path),
        "--iterations", "1", "--set", "train.eval_every=1", "--set", "train.eval_episodes=1",
        "--set", "train.save_every=1",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = tmp_path.iterdir()
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["name"] == "smollm2-135m-instruct" and config["env"]["name"] == "webshop"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 1
    metrics = lines[0]
    for key in ("train/success_rate", "train/valid_action_ratio", "actor/pg_loss", "actor/kl", "actor/grad_norm",
                "adv/iqr", "stepgroup/singleton_share", "timing/rollout_s", "perf/tokens_per_s", "eval/success_rate"):
        assert key in metrics, key
    assert metrics["actor/kl"] == pytest.approx(0.0, abs=1e-6)  # iteration 0: the LoRA adapter starts at zero
    assert (run / "eval.json").is_file()
    assert any((run / "checkpoints").iterdir())
