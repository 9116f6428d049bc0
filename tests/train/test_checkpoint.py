"""Checkpoints: round trip of weights, optimizer and random states; corruption is a named error."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from tiny_model import tiny_policy

from estimators import get_estimator
from gagpo_cli.config import OptimConfig
from gagpo_cli.errors import UsageError
from gagpo_cli.train.checkpoint import (
    KEEP,
    capture_rng,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    newest_intact_checkpoint,
    restore_rng,
    save_checkpoint,
)
from gagpo_cli.train.learning.generate_update import GenerateSample, GenerateUpdater
from gagpo_cli.train.records import read_metrics, truncate_metrics


def _trained(seed: int = 0):
    policy = tiny_policy(seed=seed)
    updater = GenerateUpdater(policy, get_estimator("gagpo"), OptimConfig(lr=1e-2))
    ids = policy.chat_prompt("go east")
    updater.update([GenerateSample(ids, [5, 6, 7], advantage=1.0), GenerateSample(ids, [8, 9], advantage=-1.0)])
    return policy, updater


def _adapter(policy):
    return {k: v.clone() for k, v in policy.model.state_dict().items() if "lora_" in k}


def test_round_trip_restores_weights_optimizer_and_rng(tmp_path):
    policy, updater = _trained()
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    rng = capture_rng()
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    path = save_checkpoint(tmp_path, 1, policy, updater, rng)
    assert path.name == "iter_000001" and latest_checkpoint(tmp_path) == path
    assert {"manifest.json", "trainer.pt", "rng.json"} <= {p.name for p in path.iterdir()}

    fresh = tiny_policy()
    fresh_updater = GenerateUpdater(fresh, get_estimator("gagpo"), OptimConfig(lr=1e-2))
    assert any(not torch.equal(a, b) for a, b in zip(_adapter(fresh).values(), _adapter(policy).values(), strict=True))
    restored = load_checkpoint(path, fresh, fresh_updater)
    assert restored.iteration == 1
    for key, value in _adapter(policy).items():
        assert torch.equal(_adapter(fresh)[key], value), key
    state, fresh_state = updater.optimizer.state_dict()["state"], fresh_updater.optimizer.state_dict()["state"]
    assert state.keys() == fresh_state.keys()
    for k in state:
        assert torch.equal(state[k]["exp_avg"], fresh_state[k]["exp_avg"])
    restore_rng(restored.rng_state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_only_the_newest_checkpoints_are_kept_and_tmp_folders_ignored(tmp_path):
    policy, updater = _trained()
    (tmp_path / "checkpoints" / ".tmp-iter_000009").mkdir(parents=True)  # a save killed half-way
    for iteration in (1, 2, 3):
        save_checkpoint(tmp_path, iteration, policy, updater, capture_rng())
    assert [p.name for p in list_checkpoints(tmp_path)] == ["iter_000002", "iter_000003"][-KEEP:]
    assert not (tmp_path / "checkpoints" / ".tmp-iter_000009").exists()


@pytest.mark.parametrize("damage", ["flip_weights", "drop_trainer", "bad_manifest"])
def test_corrupt_checkpoint_names_the_file(tmp_path, damage):
    policy, updater = _trained()
    path = save_checkpoint(tmp_path, 4, policy, updater, capture_rng())
    if damage == "flip_weights":
        target = next((path / "policy").glob("*.safetensors"))
        data = bytearray(target.read_bytes())
        data[-1] ^= 0xFF
        target.write_bytes(bytes(data))
    elif damage == "drop_trainer":
        target = path / "trainer.pt"
        target.unlink()
    else:
        target = path / "manifest.json"
        target.write_text("{not json")
    fresh = tiny_policy()
    with pytest.raises(UsageError, match="corrupt checkpoint") as err:
        load_checkpoint(path, fresh, GenerateUpdater(fresh, get_estimator("gagpo"), OptimConfig()))
    assert str(target) in str(err.value)


def test_truncate_metrics_keeps_checkpointed_iterations_and_drops_a_torn_line(tmp_path):
    lines = [json.dumps({"iteration": i, "x": i}) for i in (1, 2, 3, 4)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"iteration": 5, "x"')
    truncate_metrics(tmp_path, 2)
    assert [m["iteration"] for m in read_metrics(tmp_path)] == [1, 2]


def test_newest_intact_checkpoint_sets_corrupt_ones_aside_and_never_deletes_them(tmp_path):
    policy, updater = _trained()
    for iteration in (1, 2):
        save_checkpoint(tmp_path, iteration, policy, updater, capture_rng())
    (tmp_path / "checkpoints" / "iter_000002" / "rng.json").write_text("{}")
    said = []
    found = newest_intact_checkpoint(tmp_path, say=said.append)
    assert found == tmp_path / "checkpoints" / "iter_000001"
    kept = tmp_path / "checkpoints" / "corrupt-iter_000002"
    assert (kept / "rng.json").read_text() == "{}"  # kept as it was, for inspection
    assert len(said) == 1 and "iter_000002" in said[0] and str(kept) in said[0] and "rng.json" in said[0]
    assert [p.name for p in list_checkpoints(tmp_path)] == ["iter_000001"]
    # a later save of the same iteration, and the pruning of old checkpoints, leave it alone
    for iteration in (2, 3, 4):
        save_checkpoint(tmp_path, iteration, policy, updater, capture_rng())
    assert kept.is_dir()


def test_no_intact_checkpoint_gives_none_and_a_second_corrupt_copy_gets_its_own_name(tmp_path):
    policy, updater = _trained()
    for _ in range(2):
        path = save_checkpoint(tmp_path, 1, policy, updater, capture_rng())
        (path / "manifest.json").unlink()
        assert newest_intact_checkpoint(tmp_path, say=lambda _m: None) is None
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["corrupt-iter_000001", "corrupt-iter_000001-2"]
