"""The trainer's evaluations: the policy at the evaluation temperature on a fixed set of episodes
(the same tasks and seeds at every evaluation of a run), each kept as ``evals/iter_NNNNNN.json``.

Under torchrun rank 0 plays the episodes while the other ranks wait in one collective that hands them
its result (or its failure), so N processes evaluate once and every rank records what one process
would. The episodes are not sharded over ranks: the evaluation agent samples every episode's actions
from one generator, so a sharded evaluation would draw other samples than one process. A sharded
model (``model.parallel: fsdp``) cannot compute on one rank alone (every forward gathers the other
ranks' shards): there every rank plays the same episodes, its engine's forwards in lock-step, and
takes rank 0's actions at every turn (``LockStepAgent``), so no rank's episodes end on their own.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from gagpo_cli.config import ExperimentConfig
from gagpo_cli.episodes import evaluation_specs, run_episodes, summarize
from gagpo_cli.run_layout import RunLayout
from gagpo_cli.train.acting.agent import ModelAgent
from gagpo_cli.train.distributed import Dist, StoppedElsewhere, from_main
from gagpo_cli.write_errors import refused_on_full_disk
from gagpo_core.atomic import atomic_write_json


def evaluate_policy(cfg: ExperimentConfig, policy: Any, pool: Any, split: str,
                    ctx: Dist | None = None) -> dict[str, Any]:
    """``play_evaluation`` on rank 0, its result on every rank of ``ctx`` (module docstring). A failure
    on rank 0 is raised there and stops the others with ``StoppedElsewhere``: no rank is left waiting."""
    ctx = ctx or Dist()
    if cfg.model.parallel == "fsdp" and ctx.enabled:  # every rank's forwards are needed (module docstring)
        return play_evaluation(cfg, policy, pool, split, ctx)
    evaluation, problem = None, None
    if ctx.is_main:
        try:
            evaluation = play_evaluation(cfg, policy, pool, split)
        except Exception as exc:
            from_main((None, f"{type(exc).__name__}: {exc}"), ctx)  # the waiting ranks stop too
            raise
    evaluation, problem = from_main((evaluation, problem), ctx)
    if problem is not None:
        raise StoppedElsewhere(f"the evaluation on training process 0 failed ({problem})")
    return evaluation


def play_evaluation(cfg: ExperimentConfig, policy: Any, pool: Any, split: str,
                    lock_step: Dist | None = None) -> dict[str, Any]:
    """Evaluate the policy at the evaluation temperature on ``train.eval_episodes`` episodes of
    ``split`` (the same tasks and seeds at every evaluation of a run:
    ``gagpo_cli.episodes.evaluation_specs``);
    ``gagpo eval --policy <run>`` replays the last one. ``lock_step``: the ranks of a sharded model,
    each playing the same episodes (``LockStepAgent``)."""
    began = time.perf_counter()
    agent: Any = ModelAgent.from_config(policy, cfg, name="training policy", seed=cfg.train.seed)
    if lock_step is not None and lock_step.enabled:
        agent = LockStepAgent(agent, lock_step)
    specs = evaluation_specs(pool, split, cfg.train.eval_episodes, cfg.train.seed)
    episodes, env_steps, env_s = run_episodes(pool, agent, specs, batch_size=eval_batch_size(cfg),
                                              max_steps=cfg.train.eval_max_steps)
    summary = summarize(episodes, env_steps, env_s, pool.environment_info.task_types)
    return {"env": pool.environment_info.name, "split": split, "seed": cfg.train.seed, **summary,
            "per_episode": [dataclasses.asdict(e) for e in episodes], "seconds": time.perf_counter() - began}


class LockStepAgent:
    """An agent played by every rank of a sharded model on the same episodes: each turn every rank
    generates (a sharded forward is a collective) and then every rank takes rank 0's actions, so the
    episodes, and with them the number of turns and of ``generate`` calls, are the same on every rank
    even where sampling differs by a bit between ranks (one collective per turn)."""

    def __init__(self, agent: Any, ctx: Dist) -> None:
        self.agent, self.ctx = agent, ctx
        self.name = agent.name

    def act(self, pool: Any, views: Any) -> list[str]:
        return from_main(self.agent.act(pool, views), self.ctx)


def write_eval_record(run_dir: Path, iteration: int, evaluation: dict[str, Any]) -> Path:
    """``<run>/evals/iter_NNNNNN.json``: one evaluation's summary and per-episode records (``eval.json``'s
    format), written atomically, so that evaluations at different iterations can be compared."""
    record = {"iteration": iteration, **evaluation}
    path = RunLayout(run_dir).eval_record(iteration)
    with refused_on_full_disk(path, None, _KEPT):
        return atomic_write_json(path, record)


def write_final_eval(run_dir: Path, iteration: int, evaluation: dict[str, Any]) -> Path:
    """``<run>/eval.json``: the evaluation of the trained policy after ``iteration`` iterations (what
    ``gagpo report`` reads and a sweep counts as done), written atomically."""
    path = RunLayout(run_dir).final_eval
    with refused_on_full_disk(path, None, _KEPT):
        return atomic_write_json(path, {"iteration": iteration, **evaluation})


_KEPT = "the trained policy is in the run's newest checkpoint: free some space and run again with --resume"


def eval_batch_size(cfg: ExperimentConfig) -> int:
    """Episodes an evaluation plays together: a training batch, N tasks x K rollouts."""
    return cfg.rollout.tasks_per_batch * cfg.rollout.group_size


def evaluate_baseline(cfg: ExperimentConfig, run_dir: Path, policy: Any, pool: Any, split: str,
                      ctx: Dist | None = None) -> None:
    """The run's own baseline, before any update: ``evals/iter_000000.json`` (``metrics.jsonl`` keeps one
    line per training iteration) and one log line."""
    baseline = evaluate_policy(cfg, policy, pool, split, ctx)
    write_eval_record(run_dir, 0, baseline)
    print(f"iter 0/{cfg.train.iterations}: before training | eval success {baseline['success_rate']:.1f}% "
          f"score {baseline['score']:.1f} ({baseline['seconds']:.1f}s)", flush=True)


def success_change(baseline: dict[str, Any], final: dict[str, Any]) -> dict[str, float] | None:
    """The change in success from ``baseline`` to ``final``, two evaluations of the same episodes (same
    tasks in the same order): the mean of the per-episode differences d_i = won_i(final) -
    won_i(baseline) in points and its paired standard error sd(d) / sqrt(n) (sample sd). None when the
    two did not play the same episodes."""
    before, after = baseline.get("per_episode", []), final.get("per_episode", [])
    if not before or [e["task_id"] for e in before] != [e["task_id"] for e in after]:
        return None
    diffs = [100.0 * (float(b["won"]) - float(a["won"])) for a, b in zip(before, after, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = (sum((d - mean) ** 2 for d in diffs) / (n - 1)) ** 0.5 if n > 1 else 0.0
    return {"episodes": float(n), "before": baseline["success_rate"], "after": final["success_rate"],
            "change": mean, "standard_error": sd / n**0.5}


def print_success_change(run_dir: Path, iteration: int, final: dict[str, Any]) -> None:
    """One line comparing ``final`` with the run's own baseline (``evals/iter_000000.json``), when the
    run has one and both played the same episodes."""
    path = RunLayout(run_dir).eval_record(0)
    change = success_change(json.loads(path.read_text()), final) if iteration > 0 and path.is_file() else None
    if change is None:
        return
    se = change["standard_error"]
    ratio = f"{change['change'] / se:.1f} standard errors" if se > 0 else "no spread"
    print(f"eval success {change['before']:.1f}% before training -> {change['after']:.1f}% after iteration "
          f"{iteration}: {change['change']:+.1f} points, paired standard error {se:.1f} over the same "
          f"{int(change['episodes'])} episodes ({ratio})", flush=True)
