"""Failed episodes: left out of their rollout group, never scored as zero.

An episode fails when its environment raises, times out or drops its connection mid-episode (the pool
reports such a step as ``Step.crashed``; ``StepRow.crashed`` marks the row). A failed episode says
nothing about the policy, so its rows leave the batch before the estimator sees it: the baseline and
normalisation of its group use the other episodes, and a group left with fewer than 2 episodes is
dropped whole (its advantages would compare nothing). A group that never had more than one episode
(``rollout.group_size: 1``) and did not fail stays.

A run whose share of failed episodes in one iteration exceeds ``rollout.max_failed_share`` stops
(``EnvironmentFailures``; the trainer saves the previous iteration's checkpoint), and so does an
iteration with no usable episode left.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class EnvironmentFailures(Exception):
    """Too many episodes of an iteration failed (or the environment could not start them)."""


@dataclass(frozen=True)
class FailureReport:
    """What ``drop_failed`` removed: episodes, failed ones, dropped groups, and the first error seen."""

    episodes: int
    failed: int
    dropped_groups: int
    dropped_episodes: int  # failed ones plus the healthy ones of dropped groups
    first_error: str = ""

    @property
    def share(self) -> float:
        return self.failed / self.episodes if self.episodes else 0.0

    def metrics(self) -> dict[str, float]:
        """``rollout/*`` counts for the iteration's metrics line."""
        return {"rollout/failed_episodes": float(self.failed), "rollout/failed_share": self.share,
                "rollout/dropped_groups": float(self.dropped_groups),
                "rollout/dropped_episodes": float(self.dropped_episodes)}


def drop_failed(rows: Sequence[Any], own: slice) -> tuple[list[Any], slice, FailureReport]:
    """The rows of ``rows`` (``StepRow``s) that an estimator may see, the slice of them this process
    trains on (``own`` narrowed to the kept rows; its rows are contiguous), and what was dropped.

    A trajectory with a crashed row is failed; its rows go, and so do the rows of every group that lost
    an episode and has fewer than 2 left.
    """
    traj_group = {row.traj_id: row.group_id for row in rows}
    failed = {row.traj_id for row in rows if row.crashed}
    first_error = next((row.error for row in rows if row.crashed and row.error), "")
    left = Counter(group for traj, group in traj_group.items() if traj not in failed)
    lost = {traj_group[traj] for traj in failed}
    dropped_groups = {group for group in lost if left[group] < 2}
    keep = [row.traj_id not in failed and row.group_id not in dropped_groups for row in rows]
    kept = [row for row, k in zip(rows, keep, strict=True) if k]
    narrowed = slice(sum(keep[:own.start]), sum(keep[:own.stop]))
    report = FailureReport(
        episodes=len(traj_group), failed=len(failed), dropped_groups=len(dropped_groups),
        dropped_episodes=len(failed) + sum(left[group] for group in dropped_groups), first_error=first_error)
    return kept, narrowed, report


def check_failures(report: FailureReport, kept_rows: int, max_share: float, iteration: int) -> None:
    """Raise ``EnvironmentFailures`` (one line) when more than ``max_share`` of the iteration's episodes
    failed, or when no row is left to learn from."""
    if report.failed and report.share > max_share:
        raise EnvironmentFailures(
            f"environment failures: {report.failed} of {report.episodes} episodes of iteration {iteration} failed, "
            f"more than rollout.max_failed_share={max_share:g} (first error: {report.first_error or 'unknown'})")
    if report.failed and not kept_rows:
        raise EnvironmentFailures(
            f"environment failures: {report.failed} of {report.episodes} episodes of iteration {iteration} failed "
            f"and no rollout group kept 2 episodes to compare (first error: {report.first_error or 'unknown'})")
