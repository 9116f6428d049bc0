"""``gagpo train --env openenv:<url>`` against real OpenEnv servers on the loopback address: the lab
policy learns the stairs game over the wire; ``gagpo serve alfworld`` trains exactly as in-process;
episodes whose server raises or dies are left out of the estimator's inputs, and too many stop the run
with one line and a checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install 'gagpo[openenv]')")

from openenv_servers import STAIRS_OPTIONS, running, stairs_app  # noqa: E402
from train_runs import comparable  # noqa: E402

from estimators.base import Estimator  # noqa: E402
from gagpo_cli.config import load_config  # noqa: E402
from gagpo_cli.train.recipe import train  # noqa: E402
from gagpo_cli.train.records import read_metrics  # noqa: E402
from gagpo_cli.train.stopping import EngineCrashed  # noqa: E402
from integrations.openenv.server import build_app  # noqa: E402

LAB = ["model.name=bow-mlp", "rollout.action_mode=score", "optim.lr=0.05", "optim.kl_coef=0.0",
       "optim.weight_decay=0.0", "train.threads=1", "train.save_every=1", "estimator.name=gagpo"]


def _stairs(tmp_path, url: str, *extra: str):
    options = [f"env.options.{key}={value}" for key, value in STAIRS_OPTIONS.items()]
    return load_config(None, [*LAB, f"env.name=openenv:{url}", *options, "rollout.tasks_per_batch=4",
                              "rollout.group_size=4", "train.eval_every=0", "train.eval_episodes=0",
                              f"logging.output_dir={tmp_path}", *extra])


@pytest.fixture
def estimator_inputs(monkeypatch):
    """Every StepBatch an estimator receives during the test."""
    seen = []
    original = Estimator.compute_output

    def recording(self, batch):
        seen.append(batch)
        return original(self, batch)

    monkeypatch.setattr(Estimator, "compute_output", recording)
    return seen


def test_the_lab_policy_learns_over_openenv(tmp_path):
    with running(stairs_app()) as url:
        run = train(_stairs(tmp_path, url, "train.iterations=4"))
    success = [m["train/success_rate"] for m in read_metrics(run)]  # measured: 0, 25, 69, 100
    assert np.mean(success[:2]) < 50 and success[-1] >= 90, success
    assert "openenv" in run.name and f"url: {url}" in (run / "config.yaml").read_text()


def test_generate_mode_writes_free_text_to_the_server(tmp_path):
    from tiny_model import tiny_policy

    with running(stairs_app()) as url:
        cfg = _stairs(tmp_path, url, "train.iterations=1", "rollout.action_mode=generate", "model.name=tiny-random",
                      "rollout.tasks_per_batch=2", "rollout.group_size=2", "env.max_steps=2",
                      "rollout.max_new_tokens=4")
        run = train(cfg, policy=tiny_policy())
    (metrics,) = read_metrics(run)
    assert metrics["train/step_rows"] == 8 and metrics["rollout/failed_episodes"] == 0  # 4 episodes x 2 steps


def test_failed_episodes_never_reach_the_estimator(tmp_path, estimator_inputs):
    # the server raises when an episode steps down at its second step: some episodes of a group fail
    with running(stairs_app(fail_action="down", fail_step=1)) as url:
        run = train(_stairs(tmp_path, url, "train.iterations=4", "rollout.max_failed_share=1.0"))
    metrics = read_metrics(run)
    assert sum(m["rollout/failed_episodes"] for m in metrics) > 0
    assert len(estimator_inputs) == 4
    for batch, m in zip(estimator_inputs, metrics, strict=True):
        kept = len(set(batch.traj_ids.tolist()))
        assert kept == 16 - m["rollout/dropped_episodes"]
        assert m["rollout/dropped_episodes"] >= m["rollout/failed_episodes"]
        for group in set(batch.group_ids.tolist()):  # every group compares at least two episodes
            assert len(set(batch.traj_ids[batch.group_ids == group].tolist())) >= 2
        # no row of a failed episode: its failing step led to no state (the crashed step's key is empty), and
        # the episodes that stepped down at step 1 are exactly the failed ones
        assert "" not in set(batch.next_state_keys.tolist())
        assert not ((batch.step_index == 1) & (batch.state_keys == "You stand on stair 1 of 3.")
                    & (batch.next_state_keys == "You stand on stair 0 of 3.")).any()


def test_too_many_failures_stop_with_one_line_and_a_checkpoint(tmp_path):
    failed = r"environment failures: \d+ of 16 episodes of iteration 1 failed, more than rollout.max_failed_share=0.1 "
    # about one episode in three steps up first, where this server fails
    with running(stairs_app(fail_action="up", fail_step=0)) as url, \
            pytest.raises(EngineCrashed, match=failed + ".*stairs broke") as caught:
        train(_stairs(tmp_path, url, "train.iterations=3", "rollout.max_failed_share=0.1"))
    assert caught.value.checkpoint.exists() and caught.value.checkpoint.name.endswith("000000")
    assert "\n" not in str(caught.value)


def test_a_server_killed_mid_run_stops_the_run_with_a_checkpoint(tmp_path):
    # killed in the second iteration (16 episodes of at most 5 steps each)
    with running({}, die_after=100) as url, pytest.raises(EngineCrashed, match="environment failures") as caught:
        train(_stairs(tmp_path, url, "train.iterations=6"))
    saved = caught.value.checkpoint
    assert saved.exists() and len(read_metrics(saved.parent.parent)) == int(saved.name[-6:]) >= 1


def test_gagpo_serve_round_trips_exactly_with_the_in_process_environment(tmp_path):
    sets = [*LAB, "rollout.tasks_per_batch=2", "rollout.group_size=3", "env.max_steps=8", "train.iterations=2",
            "train.eval_every=2", "train.eval_episodes=3", "train.eval_max_steps=8", f"logging.output_dir={tmp_path}"]
    local = train(load_config(None, [*sets, "env.name=alfworld", "logging.run_name=local"]))
    with running(build_app("alfworld")) as url:
        remote = train(load_config(None, [*sets, f"env.name=openenv:{url}", "logging.run_name=remote"]))
    ours, theirs = read_metrics(local), read_metrics(remote)
    assert len(ours) == 2 and comparable(ours) == comparable(theirs)
    assert any(m["train/step_rows"] for m in ours) and "eval/success_rate" in ours[-1]
    assert json.loads((local / "eval.json").read_text())["per_episode"] == json.loads(
        (remote / "eval.json").read_text())["per_episode"]
