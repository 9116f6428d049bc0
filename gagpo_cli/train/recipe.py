"""The training loop, top to bottom, as the paper's algorithm.

For each iteration:
  1. sample N task instances (deterministic in (seed, iteration)); K rollouts of each, same seed;
  2. roll out all N x K episodes together (``rollout.collect``, temperature 1.0, docs/algorithms.md#rewards-and-penalties rewards);
  3. (ppo only) critic values V(s_t) of every step row;
  4. one advantage per step row from the registered estimator (docs/algorithms.md#gagpo to #baselines) on the ``StepBatch``;
  5. the policy update (``Updater.update``: old/reference log-probs, then the clipped loss in the
     estimator's ratio mode);
  6. records: one ``metrics.jsonl`` line (train/*, actor/*, adv/*, stepgroup/*, timing/*, perf/*);
  7. every ``eval_every`` iterations, an evaluation at temperature 0.4 (eval/*);
  8. every ``save_every`` iterations and at the end, a checkpoint.
After the last iteration the final policy is evaluated into ``eval.json``.

Ctrl-C finishes the iteration in flight (or abandons its rollout, which changes nothing), saves a
checkpoint and raises ``TrainingInterrupted``; a second Ctrl-C stops at once. A rollout engine that
fails does the same (``EngineCrashed``): mid-rollout, the previous iteration's state is saved; while
syncing weights or evaluating, the finished update is recorded and saved first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import random
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from environments.base import score_mode_env_options
from gagpo_cli.config import LORA_SCOPES, ExperimentConfig, load_config, write_resolved_config
from gagpo_cli.console import Heartbeat
from gagpo_cli.episodes import choose_split
from gagpo_cli.errors import UsageError
from gagpo_cli.estimate import RunProgress, announce_estimate
from gagpo_cli.models import check_model_source
from gagpo_cli.threads import apply_threads
from gagpo_cli.train import distributed
from gagpo_cli.train.acting.engines import EngineError, check_engine, open_engine
from gagpo_cli.train.acting.rollout import (
    TRAINING_REWARDS,
    RolloutInterrupted,
    TaskSpec,
    collect,
    summary_metrics,
)
from gagpo_cli.train.checkpoint import (
    capture_rng,
    checkpoint_iteration,
    checkpoint_path,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    newest_intact_checkpoint,
    restore_rng,
    save_checkpoint,
)
from gagpo_cli.train.config_match import RESUMABLE_CHANGES, config_changes
from gagpo_cli.train.config_match import flat as _flat
from gagpo_cli.train.learning.loss import KL_ENTROPY_AGGS
from gagpo_cli.train.policies.bow_mlp import ALIAS as FEATURISED
from gagpo_cli.train.policies.scoring import check_action_mode
from gagpo_cli.train.policies.scoring import check_norm as check_norm_setting
from gagpo_cli.train.records import METRICS_FILE, WANDB_MODES, RunRecords, truncate_metrics
from gagpo_core import plugins
from gagpo_core.atomic import atomic_write_json
from gagpo_core.plugins import unknown_name_message


class TrainingInterrupted(Exception):
    """Ctrl-C stopped the run after saving ``checkpoint`` (resume with ``--resume``)."""

    def __init__(self, run_dir: Path, checkpoint: Path) -> None:
        super().__init__(f"interrupted; saved {checkpoint}; continue with --resume")
        self.run_dir = run_dir
        self.checkpoint = checkpoint


class EngineCrashed(TrainingInterrupted):
    """The rollout engine failed; ``checkpoint`` holds the newest state: the previous iteration's when
    it failed mid-rollout, the current one's when it failed syncing weights or evaluating after the
    update (the update is kept, that evaluation is lost)."""

    def __init__(self, run_dir: Path, checkpoint: Path, error: Exception) -> None:
        super().__init__(run_dir, checkpoint)
        self.args = (f"{error}; saved {checkpoint}; continue with --resume",)


# ---------------------------------------------------------------------------- setup


def run_name(cfg: ExperimentConfig) -> str:
    """``logging.run_name``, or ``<experiment>-<estimator>-<env>-s<seed>``."""
    return cfg.logging.run_name or f"{cfg.name}-{cfg.estimator.name}-{cfg.env.name}-s{cfg.train.seed}"


def _check_settings(cfg: ExperimentConfig) -> None:
    """Values the config types allow but training cannot use."""
    positive = {"train.iterations": cfg.train.iterations, "train.save_every": cfg.train.save_every,
                "rollout.tasks_per_batch": cfg.rollout.tasks_per_batch, "rollout.group_size": cfg.rollout.group_size,
                "rollout.max_new_tokens": cfg.rollout.max_new_tokens, "optim.epochs": cfg.optim.epochs,
                "optim.mini_batches": cfg.optim.mini_batches, "optim.token_budget": cfg.optim.token_budget}
    at_least_zero = {"train.eval_every": cfg.train.eval_every, "train.eval_episodes": cfg.train.eval_episodes,
                     "env.history": cfg.env.history, "rollout.eval_temperature": cfg.rollout.eval_temperature}
    estimator = plugins.load(plugins.ESTIMATORS, cfg.estimator.name)
    if getattr(estimator, "needs_groups", False) and cfg.rollout.group_size < 2:
        raise UsageError(f"rollout.group_size must be at least 2 for estimator '{cfg.estimator.name}': it compares "
                         f"the rollouts of a task with each other, got {cfg.rollout.group_size}")
    if cfg.logging.wandb not in WANDB_MODES:
        raise UsageError(f"logging.wandb must be one of {', '.join(WANDB_MODES)}, got '{cfg.logging.wandb}'")
    if cfg.env.max_steps is not None:
        positive["env.max_steps"] = cfg.env.max_steps
    if cfg.train.eval_max_steps is not None:
        positive["train.eval_max_steps"] = cfg.train.eval_max_steps
    for key, value in positive.items():
        if value < 1:
            raise UsageError(f"{key} must be at least 1, got {value}")
    for key, value in at_least_zero.items():
        if value < 0:
            raise UsageError(f"{key} must be >= 0, got {value}")
    if cfg.rollout.temperature <= 0:
        raise UsageError(f"rollout.temperature must be > 0: training samples from softmax(logits / T) and "
                         f"takes its log-probs there, got {cfg.rollout.temperature}")
    check_action_mode(cfg.rollout.action_mode, cfg.model.name)
    check_norm_setting(cfg.rollout.score_norm)
    if cfg.rollout.action_mode == "score" and cfg.rollout.engine == "vllm":
        raise UsageError("rollout.engine=vllm generates text, but in score mode the policy itself ranks the "
                         "actions; use rollout.action_mode=generate to generate with vLLM")
    if cfg.rollout.reward not in TRAINING_REWARDS:
        raise UsageError(unknown_name_message("rollout.reward", cfg.rollout.reward, list(TRAINING_REWARDS)))
    if cfg.optim.kl_entropy_agg not in KL_ENTROPY_AGGS:
        raise UsageError(unknown_name_message("optim.kl_entropy_agg", cfg.optim.kl_entropy_agg, list(KL_ENTROPY_AGGS)))
    if cfg.model.lora_scope not in LORA_SCOPES:
        raise UsageError(unknown_name_message("model.lora_scope", cfg.model.lora_scope, list(LORA_SCOPES)))
    if cfg.model.lora_scope == "action" and (cfg.rollout.action_mode != "score" or not cfg.model.lora):
        raise UsageError("model.lora_scope=action needs rollout.action_mode=score and model.lora=true "
                         "(the adapter reads the scored action tokens)")


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _holds_records(run_dir: Path) -> bool:
    """True when ``run_dir`` has something a resume can use or a user may want: a checkpoint or a
    recorded iteration."""
    metrics = run_dir / METRICS_FILE
    return bool(list_checkpoints(run_dir)) or (metrics.is_file() and metrics.stat().st_size > 0)


def _prepare_run_dir(cfg: ExperimentConfig, resume: bool) -> tuple[Path, bool]:
    """Create (or, on resume, check) the run directory and write the resolved ``config.yaml``.

    Returns (run directory, whether a checkpoint is continued). Resume semantics:
    - the newest checkpoint that verifies is continued (corrupt newer ones are set aside as
      ``checkpoints/corrupt-iter_*`` with a warning, never deleted); the config must match the
      saved one except ``RESUMABLE_CHANGES``;
    - a run with no usable checkpoint (killed before its first save) restarts from iteration 1,
      with a warning; its earlier ``metrics.jsonl`` lines, ``evals/`` and ``eval.json`` are dropped;
    - a directory holding no run at all is an error (nothing to continue).
    Without ``--resume`` a directory that already holds a run is an error that says what
    ``--resume`` would do there.
    """
    run_dir = Path(cfg.logging.output_dir) / run_name(cfg)
    checkpoint = None
    if resume:
        if not (run_dir / "config.yaml").is_file() and not _holds_records(run_dir):
            raise UsageError(f"--resume: {run_dir} holds no run to continue; start it without --resume")
        checkpoint = newest_intact_checkpoint(run_dir, say=_warn)
        if checkpoint is not None:
            _check_same_config(cfg, run_dir)
            done = checkpoint_iteration(checkpoint)
            if done > cfg.train.iterations:
                raise UsageError(f"--resume: {checkpoint} already holds {done} iterations, more than "
                                 f"--iterations {cfg.train.iterations}; raise --iterations to continue it, "
                                 f"or evaluate it with `gagpo eval --policy {checkpoint} --env {cfg.env.name}`")
            print(f"continuing from {checkpoint}", file=sys.stderr, flush=True)
        else:
            _warn(f"--resume: {run_dir} has no usable checkpoint yet (the run stopped before its first save); "
                  "restarting it from iteration 1 and discarding its earlier records")
            truncate_metrics(run_dir, -1)
            (run_dir / "eval.json").unlink(missing_ok=True)
            shutil.rmtree(run_dir / "evals", ignore_errors=True)
    elif _holds_records(run_dir):
        action = ("continue it with --resume" if list_checkpoints(run_dir)
                  else "it has no checkpoint yet: --resume restarts it from iteration 1")
        raise UsageError(f"run directory {run_dir} already holds a run; {action}, "
                         "or choose another --run-name / --output-dir")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_resolved_config(cfg, run_dir)
    except OSError as exc:
        raise UsageError(f"cannot create the run directory {run_dir}: {exc.strerror or exc}") from None
    return run_dir, checkpoint is not None


def _check_same_config(cfg: ExperimentConfig, run_dir: Path) -> None:
    """A resumed run's config must equal the saved one, except ``RESUMABLE_CHANGES``."""
    saved_file = run_dir / "config.yaml"
    try:
        saved = _flat(yaml.safe_load(saved_file.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, AttributeError) as exc:
        raise UsageError(f"--resume: cannot read {saved_file} ({type(exc).__name__})") from None
    changed = list(config_changes(cfg, saved, RESUMABLE_CHANGES))
    if changed:
        raise UsageError(f"--resume: the config differs from the run's {saved_file} in {', '.join(changed)}")


@contextlib.contextmanager
def _removed_on_failure(run_dir: Path) -> Iterator[None]:
    """If the body fails before the run recorded anything, remove the folders this call created
    (the run directory and any output folder above it that did not exist), so a failed start
    (a model that cannot be loaded, a bad environment option) leaves no empty run behind."""
    created = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
    try:
        yield
    except BaseException:
        if created and not _holds_records(run_dir):
            shutil.rmtree(created[-1], ignore_errors=True)
        raise


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) global generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def sample_tasks(cfg: ExperimentConfig, num_tasks: int, iteration: int) -> tuple[list[TaskSpec], int]:
    """The batch of ``iteration``: N distinct task instances (while the split has N) x K rollouts with a
    shared seed per group; plus the seed of the iteration's sampling generator. Deterministic in
    (train.seed, iteration)."""
    rng = np.random.default_rng([cfg.train.seed, iteration])
    n, k = cfg.rollout.tasks_per_batch, cfg.rollout.group_size
    task_ids = rng.choice(num_tasks, size=n, replace=n > num_tasks)
    env_seeds = rng.integers(0, 2**31 - 1, size=n)
    specs = [TaskSpec(cfg.env.train_split, int(task_ids[g]), int(env_seeds[g]), g) for g in range(n) for _ in range(k)]
    return specs, int(rng.integers(0, 2**63 - 1))


@dataclass
class StopFlag:
    """Set by the first Ctrl-C."""

    requested: bool = False


@contextlib.contextmanager
def stop_on_sigint() -> Iterator[StopFlag]:
    """The first SIGINT asks the loop to stop at a safe point; the second one interrupts at once."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        flag.requested = True
        signal.signal(signal.SIGINT, previous)
        print("\nstopping: saving a checkpoint at the next safe point (Ctrl-C again to quit now)", file=sys.stderr)

    signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


# ---------------------------------------------------------------------------- the loop


def train(cfg: ExperimentConfig, *, resume: bool = False, policy: Any = None, env_pool: Any = None) -> Path:
    """Train ``cfg``'s model on its environment with its estimator; returns the run directory.

    ``policy`` (a ``Policy``) and ``env_pool`` (an ``EnvPool``) replace the ones the config names
    (tests, custom environments); the caller keeps owning a pool it passes. ``resume`` continues
    from the run's newest checkpoint. Unknown estimator/environment names and bad settings raise
    ``ValueError``/``UsageError`` before any model is loaded. Ctrl-C raises ``TrainingInterrupted``.
    """
    from estimators import get_estimator

    estimator = get_estimator(cfg.estimator.name, **cfg.estimator.options)
    if env_pool is None:
        plugins.load(plugins.ENVIRONMENTS, cfg.env.name)  # unknown name: ValueError listing the valid ones
    _check_settings(cfg)
    if policy is not None:
        check_action_mode(cfg.rollout.action_mode, cfg.model.name, policy)
    apply_threads(cfg.train.threads)  # before any model is built (oversubscription ruins CPU runs)
    if cfg.rollout.action_mode == "score" and env_pool is None:  # e.g. WebShop's candidate search queries
        cfg.env.options = score_mode_env_options(cfg.env.name, cfg.env.options)
    if cfg.rollout.action_mode != "score":
        check_engine(cfg.rollout.engine)  # vllm asked for but not installed: the setup line, before any loading
    if policy is None and cfg.model.name != FEATURISED:
        check_model_source(cfg.model.name)  # a missing or unreadable local model: before any folder is made
    ctx = distributed.init_from_env()  # torchrun: join the process group (one process: a no-op)
    if ctx.rank > 0:  # ranks > 0 keep their own records under <run>/ranks/ (distributed.rank_config)
        cfg = distributed.rank_config(cfg, run_name(cfg), ctx)
    planned = Path(cfg.logging.output_dir) / run_name(cfg)
    with _removed_on_failure(planned):
        run_dir, resume = _prepare_run_dir(cfg, resume)
        print(f"{'resuming' if resume else 'training'} {cfg.estimator.name} on {cfg.env.name} with {cfg.model.name} "
              f"for {cfg.train.iterations} iterations (seed {cfg.train.seed}) in {run_dir}", flush=True)
        seed_everything(cfg.train.seed)
        if env_pool is not None:
            return _train(cfg, run_dir, resume, estimator, policy, env_pool)
        from environments.pool import EnvPool

        with EnvPool(cfg.env.name, cfg.env.options, workers=cfg.env.workers) as pool:
            return _train(cfg, run_dir, resume, estimator, policy, pool)


def _train(cfg: ExperimentConfig, run_dir: Path, resume: bool, estimator: Any, policy: Any, pool: Any) -> Path:
    from gagpo_cli.train.acting.score_rollout import ScoringEngine
    from gagpo_cli.train.learning.score_update import ScoreUpdater
    from gagpo_cli.train.learning.update import Updater
    from gagpo_cli.train.policies.bow_mlp import load_policy

    info = pool.environment_info
    train_tasks = pool.num_tasks(choose_split(info, cfg.env.train_split, "env.train_split"))
    eval_split = choose_split(info, cfg.env.eval_split, "env.eval_split")
    score_mode = cfg.rollout.action_mode == "score"
    if policy is None:
        policy = load_policy(cfg.model, seed=cfg.train.seed)
    if score_mode:
        updater = ScoreUpdater(policy, estimator, cfg.optim, temperature=cfg.rollout.temperature,
                               norm=cfg.rollout.score_norm, dist=distributed.current())
    else:
        updater = Updater(policy, estimator, cfg.optim, dist=distributed.current(),
                          temperature=cfg.rollout.temperature)
    start = 0
    if resume:
        restored = load_checkpoint(latest_checkpoint(run_dir), policy, updater)
        restore_rng(restored.rng_state)
        truncate_metrics(run_dir, restored.iteration)
        start = restored.iteration
    engine = (ScoringEngine(policy) if score_mode  # score mode: the policy itself ranks the actions
              else open_engine(cfg.rollout.engine, policy, cfg.model.name, cfg.rollout.engine_options))  # generates
    estimate = announce_estimate(cfg, engine, pool, start=start, device=getattr(policy, "device", "cpu"))
    records = RunRecords(run_dir, wandb_mode=cfg.logging.wandb, project=cfg.logging.wandb_project,
                         run_name=run_dir.name, config=cfg.to_dict())
    evaluation: dict[str, Any] | None = None
    if start == 0 and cfg.train.eval_every and cfg.train.eval_episodes:  # the run's own baseline
        baseline = evaluate_policy(cfg, engine, pool, eval_split)
        write_eval_record(run_dir, 0, baseline)
        # metrics.jsonl keeps one line per training iteration; the baseline lives in evals/iter_000000.json
        print(f"iter 0/{cfg.train.iterations}: before training | eval success {baseline['success_rate']:.1f}% "
              f"score {baseline['score']:.1f} ({baseline['seconds']:.1f}s)", flush=True)
    gc.collect()  # what exists now (policy, pool, caches) lives through the loop: the cyclic garbage
    gc.freeze()  # collector need not rescan it at every full collection (a quarter of a lab iteration)
    try:
        with stop_on_sigint() as stop, RunProgress(cfg.train.iterations, start, estimate) as run_progress:
            for iteration in range(start + 1, cfg.train.iterations + 1):
                rng_before = capture_rng()
                try:
                    metrics = _iteration(cfg, iteration, engine, pool, estimator, updater, train_tasks, stop)
                except (RolloutInterrupted, EngineError) as exc:  # nothing changed yet: the previous state
                    saved = checkpoint_path(run_dir, iteration - 1)
                    if not saved.exists():
                        saved = save_checkpoint(run_dir, iteration - 1, policy, updater, rng_before)
                    if isinstance(exc, EngineError):
                        raise EngineCrashed(run_dir, saved, exc) from None
                    raise TrainingInterrupted(run_dir, saved) from None
                evaluation = None
                try:
                    engine.sync()  # the next generation uses the updated weights
                    if cfg.train.eval_every and iteration % cfg.train.eval_every == 0 and cfg.train.eval_episodes:
                        evaluation = evaluate_policy(cfg, engine, pool, eval_split)
                        write_eval_record(run_dir, iteration, evaluation)
                        metrics.update(summary_metrics(evaluation, "eval"))
                        metrics["timing/eval_s"] = evaluation["seconds"]
                except EngineError as exc:  # the update is done: record and keep it (this evaluation is lost)
                    records.log(iteration, metrics)
                    raise EngineCrashed(run_dir, save_checkpoint(run_dir, iteration, policy, updater, capture_rng()),
                                        exc) from None
                records.log(iteration, metrics)
                print(progress_line(iteration, cfg.train.iterations, metrics), flush=True)
                run_progress.finished(iteration)
                last = iteration == cfg.train.iterations
                if iteration % cfg.train.save_every == 0 or last or stop.requested:
                    saved = save_checkpoint(run_dir, iteration, policy, updater, capture_rng())
                if stop.requested:
                    raise TrainingInterrupted(run_dir, saved)
    finally:
        records.close()
        gc.unfreeze()
    try:
        if cfg.train.eval_episodes and evaluation is None:
            with Heartbeat("final evaluation"):
                evaluation = evaluate_policy(cfg, engine, pool, eval_split)
            write_eval_record(run_dir, cfg.train.iterations, evaluation)
    except EngineError as exc:  # the trained policy is saved: --resume runs only this evaluation again
        raise EngineCrashed(run_dir, latest_checkpoint(run_dir), exc) from None
    finally:
        engine.close()
    if cfg.train.eval_episodes:
        atomic_write_json(run_dir / "eval.json", {"iteration": cfg.train.iterations, **evaluation})
    return run_dir


def _iteration(cfg: ExperimentConfig, iteration: int, policy: Any, pool: Any, estimator: Any, updater: Any,
               train_tasks: int, stop: StopFlag) -> dict[str, float]:
    """Steps 1-6 of the module docstring for one iteration; returns its metrics."""
    from gagpo_cli.train.learning.score_update import ScoreSample
    from gagpo_cli.train.learning.update import StepSample

    began = time.perf_counter()
    tasks, sampling_seed = sample_tasks(cfg, train_tasks, iteration)
    ctx = distributed.current()  # several processes: this rank rolls out its whole rollout groups
    tasks, offset = distributed.shard_tasks(tasks, ctx)
    sampling_seed += ctx.rank
    rollout = collect(
        policy, pool, tasks, max_steps=cfg.env.max_steps or pool.environment_info.max_steps,
        history=cfg.env.history, temperature=cfg.rollout.temperature, max_new_tokens=cfg.rollout.max_new_tokens,
        success_reward=cfg.rollout.success_reward, invalid_penalty=cfg.rollout.invalid_penalty,
        reward=cfg.rollout.reward,
        generator=torch.Generator().manual_seed(sampling_seed), should_stop=lambda: stop.requested,
        action_mode=cfg.rollout.action_mode, score_norm=cfg.rollout.score_norm,
        list_actions=cfg.rollout.list_actions,
    )
    rollout, own = distributed.gather_rollout(rollout, offset, ctx)  # the estimator sees the whole batch
    rollout_s = time.perf_counter() - began

    began = time.perf_counter()
    if cfg.rollout.action_mode == "score":
        samples = [ScoreSample(score_input=r.score_input, choice=r.choice, rollout_logp=r.old_logp)
                   for r in rollout.rows]
    else:
        samples = [StepSample(prompt_ids=r.prompt_ids, response_ids=r.response_ids,
                              rollout_logprobs=r.rollout_logprobs) for r in rollout.rows]
    values = updater.values(samples) if estimator.needs_critic else None  # docs/algorithms.md#baselines ppo: V_phi(s_t)
    if "entropies" in estimator.requires:  # generate mode: a no-grad pass at the rollout temperature
        rollout.fill_entropies(lambda: updater.step_entropies(samples))
    estimate = estimator.estimate(rollout.step_batch(values, estimator.requires, iteration=iteration,
                                                     total_iterations=cfg.train.iterations))
    for i, sample in enumerate(samples):
        sample.advantage = float(estimate.advantages[i])  # every token of the action shares it (docs/algorithms.md#step-batch)
        if estimate.returns is not None:
            sample.value_target = float(estimate.returns[i])
    estimate_s = time.perf_counter() - began

    metrics: dict[str, float] = rollout.metrics("train", pool.environment_info.task_types)
    metrics["train/step_rows"] = float(len(rollout.rows))
    metrics.update(estimate.diagnostics)
    metrics.update(updater.update(samples[own]))  # this rank's rows; gradients summed over ranks
    metrics.update({
        "timing/rollout_s": rollout_s,
        "timing/generate_s": rollout.generate_s,
        "timing/env_s": rollout.env_s,
        "timing/estimate_s": estimate_s,
        "timing/iteration_s": time.perf_counter() - began + rollout_s,
        "perf/generate_tokens_per_s": rollout.generated_tokens / max(rollout.generate_s, 1e-9),
    })
    return metrics


def progress_line(iteration: int, iterations: int, metrics: dict[str, float]) -> str:
    """One line per iteration for the log: success, score, KL, time (and evaluation success when run)."""
    line = (f"iter {iteration}/{iterations}: success {metrics['train/success_rate']:.1f}% "
            f"score {metrics['train/score']:.1f} valid {metrics['train/valid_action_ratio']:.2f} "
            f"kl {metrics.get('actor/kl', 0.0):.4f} ({metrics['timing/iteration_s']:.1f}s)")
    if "eval/success_rate" in metrics:
        line += f" | eval success {metrics['eval/success_rate']:.1f}% score {metrics['eval/score']:.1f}"
    return line


def write_eval_record(run_dir: Path, iteration: int, evaluation: dict[str, Any]) -> Path:
    """``<run>/evals/iter_NNNNNN.json``: one evaluation's summary and per-episode records (``eval.json``'s
    format), written atomically, so that evaluations at different iterations can be compared."""
    return atomic_write_json(run_dir / "evals" / f"iter_{iteration:06d}.json", {"iteration": iteration, **evaluation})


def evaluate_policy(cfg: ExperimentConfig, policy: Any, pool: Any, split: str) -> dict[str, Any]:
    """Evaluate the policy at the evaluation temperature on ``train.eval_episodes`` episodes of
    ``split`` (the same tasks and seeds at every evaluation of a run: ``gagpo_cli.episodes.evaluation_specs``);
    ``gagpo eval --policy <run>`` replays the last one."""
    from gagpo_cli.episodes import evaluation_specs, run_episodes, summarize
    from gagpo_cli.train.acting.agent import ModelAgent

    began = time.perf_counter()
    agent = ModelAgent.from_config(policy, cfg, name="training policy", seed=cfg.train.seed)
    specs = evaluation_specs(pool, split, cfg.train.eval_episodes, cfg.train.seed)
    episodes, env_steps, env_s = run_episodes(pool, agent, specs, batch_size=eval_batch_size(cfg),
                                              max_steps=cfg.train.eval_max_steps)
    summary = summarize(episodes, env_steps, env_s, pool.environment_info.task_types)
    return {"env": pool.environment_info.name, "split": split, "seed": cfg.train.seed, **summary,
            "per_episode": [dataclasses.asdict(e) for e in episodes], "seconds": time.perf_counter() - began}


def eval_batch_size(cfg: ExperimentConfig) -> int:
    """Episodes an evaluation plays together: a training batch, N tasks x K rollouts."""
    return cfg.rollout.tasks_per_batch * cfg.rollout.group_size


# ---------------------------------------------------------------------------- command line

# `gagpo train` flags -> the config field each one sets
FLAG_FIELDS = {"estimator": "estimator.name", "env": "env.name", "model": "model.name", "lora": "model.lora",
               "iterations": "train.iterations", "seed": "train.seed", "output_dir": "logging.output_dir",
               "run_name": "logging.run_name", "wandb": "logging.wandb", "action_mode": "rollout.action_mode",
               "threads": "train.threads"}


def config_from_cli(experiment: str | None, sets: list[str], flags: dict[str, Any]) -> ExperimentConfig:
    """The experiment file (or built-in name), then ``--set KEY=VALUE`` overrides, then the named flags
    (``FLAG_FIELDS``; None = not given)."""
    cfg = load_config(experiment, sets)
    for flag, value in flags.items():
        if value is not None:
            section, key = FLAG_FIELDS[flag].split(".")
            setattr(getattr(cfg, section), key, value)
    return cfg


def train_command(experiment: str | None, sets: list[str], flags: dict[str, Any], resume: bool) -> Path:
    """What ``gagpo train`` does: build the config, train, print where the results are."""
    from rich.console import Console

    run_dir = train(config_from_cli(experiment, sets, flags), resume=resume)
    Console().print(f"done: {run_dir} (config.yaml, metrics.jsonl, checkpoints/, eval.json)", highlight=False)
    return run_dir
