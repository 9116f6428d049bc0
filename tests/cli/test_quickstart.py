"""The README's main job, for real: `gagpo train quickstart` with SmolLM2 on one-push Sokoban in words (score mode)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml


@pytest.mark.slow
def test_quickstart_trains_the_default_model_end_to_end(tmp_path):
    # One iteration of 2 levels x 8 rollouts and 8 evaluation episodes of the built-in quickstart (the rest kept).
    command = [
        sys.executable, "-m", "gagpo_cli.app", "train", "quickstart", "--output-dir", str(tmp_path),
        "--iterations", "1", "--set", "train.eval_every=1", "--set", "train.eval_episodes=8",
        "--set", "train.save_every=1", "--set", "rollout.tasks_per_batch=2",  # a small slice of it: CI's time
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "with smollm2-135m-instruct (SmolLM2-135M-Instruct de-quantised from its 4-bit Q4_1 GGUF)" in result.stdout
    (run,) = tmp_path.iterdir()
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["name"] == "smollm2-135m-instruct" and config["env"]["name"] == "sokoban"
    assert config["rollout"]["action_mode"] == "score"  # the model ranks the four moves
    assert config["env"]["max_steps"] == config["env"]["options"]["max_steps"] == 1  # levels one push solves
    assert config["env"]["options"]["render"] == "words"  # the board in words, from the player
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in lines] == [1]  # one line per training iteration
    metrics = lines[0]
    for key in ("train/success_rate", "train/score", "train/valid_action_ratio", "actor/pg_loss", "actor/grad_norm",
                "adv/iqr", "timing/rollout_s", "perf/tokens_per_s", "eval/success_rate", "eval/score"):
        assert key in metrics, key
    assert metrics["train/malformed_ratio"] == 0.0  # score mode only sends admissible actions
    assert 0.0 <= metrics["train/valid_action_ratio"] <= 1.0  # Sokoban: the share of moves that changed the board
    # The baseline evaluation before any update and the one after it, on the same episodes.
    before, after = (json.loads((run / "evals" / f"iter_{i:06d}.json").read_text()) for i in (0, 1))
    assert [e["task_id"] for e in before["per_episode"]] == [e["task_id"] for e in after["per_episode"]]
    assert all(e["length"] == 1 for e in before["per_episode"] + after["per_episode"])
    # The last line: the change against the run's own baseline, with its paired standard error.
    assert "before training ->" in result.stdout and "paired standard error" in result.stdout
    assert (run / "eval.json").is_file()
    assert any((run / "checkpoints").iterdir())
