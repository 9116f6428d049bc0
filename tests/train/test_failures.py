"""``acting.failures``: failed episodes leave their groups before the estimator; a group left with
fewer than 2 episodes is dropped; too many failures is one line."""

from __future__ import annotations

import pytest

from estimators.base import Estimator
from gagpo_cli.config import load_config
from gagpo_cli.train.acting.failures import EnvironmentFailures, check_failures, drop_failed
from gagpo_cli.train.acting.rollout import Rollout, StepRow
from gagpo_cli.train.recipe import train
from gagpo_cli.train.records import read_metrics


def _rows(spec: list[tuple[int, int, int, bool]]) -> list[StepRow]:
    """(group, trajectory, steps, failed on its last step) -> rows."""
    rows = []
    for group, traj, steps, failed in spec:
        for t in range(steps):
            crashed = failed and t == steps - 1
            rows.append(StepRow(group_id=group, traj_id=traj, step_index=t, state_key=f"s{t}", acted=None,
                                reward=0.0 if t < steps - 1 else float(traj % 2), penalty=0.0, terminated=False,
                                valid=True, malformed=False, truncated=False, crashed=crashed,
                                error="boom" if crashed else ""))
    return rows


def test_failed_episodes_leave_and_lonely_groups_are_dropped():
    rows = _rows([(0, 0, 2, False), (0, 1, 3, True), (0, 2, 2, False),  # group 0 keeps two episodes
                  (1, 3, 2, True), (1, 4, 1, False),  # group 1 keeps one: dropped whole
                  (2, 5, 2, False)])  # a group of one that did not fail (group_size 1) stays
    kept, own, report = drop_failed(rows, slice(0, len(rows)))
    assert sorted({r.traj_id for r in kept}) == [0, 2, 5] and own == slice(0, len(kept))
    assert (report.episodes, report.failed, report.dropped_groups, report.dropped_episodes) == (6, 2, 1, 3)
    assert report.first_error == "boom" and report.metrics()["rollout/failed_share"] == pytest.approx(2 / 6)
    batch = Rollout(rows=kept).step_batch()  # what the estimator sees: the healthy episodes only
    assert set(batch.traj_ids.tolist()) == {0, 2, 5}


def test_this_rank_s_slice_follows_the_kept_rows():
    rows = _rows([(0, 0, 2, False), (0, 1, 2, True), (0, 2, 2, False), (1, 3, 2, False), (1, 4, 2, False)])
    kept, own, _ = drop_failed(rows, slice(4, 10))  # this rank generated trajectories 2..4
    assert [r.traj_id for r in kept[own]] == [2, 2, 3, 3, 4, 4]


def test_too_many_failures_or_nothing_left_is_one_line():
    _, _, report = drop_failed(_rows([(0, 0, 1, True), (0, 1, 1, True), (0, 2, 1, False)]), slice(0, 3))
    with pytest.raises(EnvironmentFailures, match=r"^environment failures: 2 of 3 episodes of iteration 7 failed, "
                                                  r"more than rollout.max_failed_share=0.5 \(first error: boom\)$"):
        check_failures(report, 0, 0.5, 7)
    with pytest.raises(EnvironmentFailures, match="no rollout group kept 2 episodes"):
        check_failures(report, 0, 0.9, 7)
    check_failures(report, 1, 0.9, 7)  # under the share, rows left: the iteration goes on


def test_a_training_run_keeps_failed_episodes_from_the_estimator(plugin, tmp_path, monkeypatch):
    # the in-process engine raises when an episode looks around at its second step: some episodes of a group
    # fail, the others go on (the path an OpenEnv server's failures take too: tests/train/test_openenv_train.py)
    seen = []
    original = Estimator.compute_output
    monkeypatch.setattr(Estimator, "compute_output", lambda self, batch: seen.append(batch) or original(self, batch))
    cfg = load_config(None, ["model.name=bow-mlp", "rollout.action_mode=score", "env.name=corridor-faulty",
                             "env.options.raise_action=look", "env.options.raise_step=1", "env.max_steps=2",
                             "rollout.tasks_per_batch=4", "rollout.group_size=4", "rollout.max_failed_share=1.0",
                             "train.iterations=1", "train.eval_every=0", "train.eval_episodes=0", "train.threads=1",
                             f"logging.output_dir={tmp_path}"])
    (metrics,) = read_metrics(train(cfg))
    (batch,) = seen
    assert 0 < metrics["rollout/failed_episodes"] <= metrics["rollout/dropped_episodes"] < 16
    assert len(set(batch.traj_ids.tolist())) == 16 - metrics["rollout/dropped_episodes"]
    for group in set(batch.group_ids.tolist()):  # every group left compares at least two episodes
        assert len(set(batch.traj_ids[batch.group_ids == group].tolist())) >= 2
    assert "" not in set(batch.next_state_keys.tolist())  # no crashed step (it led to no state)
