"""The training loop, top to bottom, as the paper's algorithm.

For each iteration:
  1. sample N task instances (deterministic in (seed, iteration)); K rollouts of each, same seed;
  2. roll out all N x K episodes together (``rollout.collect``, temperature 1.0, the rewards of
     docs/algorithms.md#rewards-and-penalties); failed episodes leave their groups (``acting.failures``:
     never scored as zero; too many stop the run with the previous iteration's checkpoint);
  3. (ppo only) critic values V(s_t) of every step row;
  4. one advantage per step row from the registered estimator (docs/algorithms.md#gagpo to #baselines)
     on the ``StepBatch``;
  5. the policy update (``PolicyUpdater.update``: old/reference log-probs, then the clipped loss in the
     estimator's ratio mode);
  6. records: one ``metrics.jsonl`` line (train/*, actor/*, adv/*, stepgroup/*, timing/*, perf/*);
  7. every ``eval_every`` iterations, an evaluation at temperature 0.4 (eval/*);
  8. every ``save_every`` iterations and at the end, a checkpoint.
After the last iteration the final policy is evaluated into ``eval.json``.

From the first line to the last, ``RunProgress`` keeps the log talking (the heartbeat; a bar on a
terminal) with the time left, the baseline and final evaluations included.

Ctrl-C finishes the iteration in flight (or abandons its rollout, which changes nothing), or the
baseline evaluation in flight (then the untrained state is saved as iteration 0), saves a checkpoint
and raises ``TrainingInterrupted``; a second Ctrl-C stops at once. A rollout engine that
fails does the same (``EngineCrashed``): mid-rollout, the previous iteration's state is saved; while
syncing weights or evaluating, the finished update is recorded and saved first. Under torchrun the
ranks agree on stopping at every rollout turn and at the end of every iteration (one collective each):
any rank's Ctrl-C or engine failure stops every rank at the same point, so all save the same iteration
(the failing rank raises ``EngineCrashed``, the others ``TrainingInterrupted``), and a resume whose
ranks' newest checkpoints differ is refused.
"""

from __future__ import annotations

import contextlib
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from environments.base import resolve_env_spec
from gagpo_cli.config import ExperimentConfig
from gagpo_cli.episodes import choose_split
from gagpo_cli.errors import UsageError, user_input
from gagpo_cli.folder_locks import writing
from gagpo_cli.models import check_model_source, describe_model
from gagpo_cli.threads import apply_threads
from gagpo_cli.train import distributed
from gagpo_cli.train.acting.engines import EngineError
from gagpo_cli.train.acting.failures import EnvironmentFailures, check_failures, drop_failed
from gagpo_cli.train.acting.modes import ActionMode, get_action_mode
from gagpo_cli.train.acting.rollout import (
    RolloutInterrupted,
    RolloutSettings,
    TaskSpec,
    collect,
    summary_metrics,
)
from gagpo_cli.train.checkpoint import (
    capture_rng,
    checkpoint_iteration,
    checkpoint_path,
    latest_checkpoint,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from gagpo_cli.train.collector import loop_collector
from gagpo_cli.train.config_checks import check_settings
from gagpo_cli.train.determinism import apply_determinism
from gagpo_cli.train.evaluation import (
    evaluate_baseline,
    evaluate_policy,
    print_success_change,
    write_eval_record,
    write_final_eval,
)
from gagpo_cli.train.forecast import RunProgress, announce_forecast
from gagpo_cli.train.memory_plan import check_before_training
from gagpo_cli.train.policies.kinds import PolicyKind, policy_kind
from gagpo_cli.train.records import RunRecords, progress_line, truncate_metrics
from gagpo_cli.train.run_dir import prepare_run_dir, removed_on_failure, run_name
from gagpo_cli.train.stopping import StopFlag, stop_on_sigint, stopped_by
from gagpo_core import plugins

if TYPE_CHECKING:
    from environments.pool import EnvPool
    from estimators import Estimator
    from gagpo_cli.train.acting.engines.base import ActingEngine
    from gagpo_cli.train.learning.updater import PolicyUpdater
    from gagpo_cli.train.policies.protocol import TrainablePolicy


def train(cfg: ExperimentConfig, *, resume: bool = False, policy: TrainablePolicy | None = None,
          env_pool: EnvPool | None = None) -> Path:
    """Train ``cfg``'s model on its environment with its estimator; returns the run directory.

    ``policy`` (a ``Policy``) and ``env_pool`` (an ``EnvPool``) replace the ones the config names
    (tests, custom environments); the caller keeps owning a pool it passes. ``resume`` continues
    from the run's newest checkpoint. Unknown estimator/environment names and bad settings raise
    ``ValueError``/``UsageError`` before any model is loaded. Ctrl-C raises ``TrainingInterrupted``.
    """
    from estimators import get_estimator

    with user_input():  # unknown names, refused options: one line listing the valid ones
        estimator = get_estimator(cfg.estimator.name, **cfg.estimator.options)
        if env_pool is None:  # `openenv:<url>`: the adapter's name, the url in its options
            cfg.env.name, cfg.env.options = resolve_env_spec(cfg.env.name, cfg.env.options)
            plugins.load(plugins.ENVIRONMENTS, cfg.env.name)
    check_settings(cfg)
    mode = get_action_mode(cfg.rollout.action_mode)
    if policy is not None:
        mode.check_policy(policy, cfg.model.name)
    apply_threads(cfg.train.threads)  # before any model is built (oversubscription ruins CPU runs)
    apply_determinism(cfg.train.deterministic)  # before any CUDA work (cuBLAS reads its setting once)
    if env_pool is None:
        cfg.env.options = mode.env_options(cfg.env.name, cfg.env.options)
    mode.check_engine(cfg.rollout.engine)  # e.g. vllm asked for but not installed: before any loading
    kind = policy_kind(cfg.model.name)
    if policy is None and kind.model_source:
        check_model_source(cfg.model.name)  # a missing or unreadable local model: before any folder is made
    # torchrun: join the process group, its backend following the policy's device (one process: a no-op)
    ctx = distributed.init_from_env(kind.device(cfg.model))
    if kind.shardable:  # on a GPU: the memory plan, refused when it cannot fit
        check_before_training(cfg, ctx.world_size, kind.device(cfg.model),
                              say=print if ctx.is_main else lambda line: None)
    if ctx.rank > 0:  # ranks > 0 keep their own records under <run>/ranks/ (distributed.rank_config)
        cfg = distributed.rank_config(cfg, run_name(cfg), ctx)
    planned = Path(cfg.logging.output_dir) / run_name(cfg)
    with removed_on_failure(planned), contextlib.ExitStack() as lock:
        problem = None
        try:
            lock.enter_context(writing(planned))  # one writer per run folder, from before anything is read
            run_dir, resume = prepare_run_dir(cfg, resume)
        except UsageError as exc:  # e.g. one rank's folder holds no run to resume: every rank refuses
            problem = exc
        distributed.fail_together(problem, ctx)
        print(f"{'resuming' if resume else 'training'} {cfg.estimator.name} on {cfg.env.name} "
              f"with {describe_model(cfg.model.name) if policy is None else cfg.model.name} "
              f"for {cfg.train.iterations} iterations (seed {cfg.train.seed}) in {run_dir}", flush=True)
        seed_everything(cfg.train.seed)
        with RunProgress(cfg.train) as progress:  # the heartbeat, from this line to the run's last
            if env_pool is not None:
                return _train(cfg, run_dir, resume, kind, mode, estimator, policy, env_pool, progress)
            from environments.pool import EnvPool

            progress.phase("starting the environment")
            with user_input():  # a refused environment option, missing data
                pool = EnvPool(cfg.env.name, cfg.env.options, workers=cfg.env.workers)
            with pool:
                return _train(cfg, run_dir, resume, kind, mode, estimator, policy, pool, progress)


def _train(cfg: ExperimentConfig, run_dir: Path, resume: bool, kind: PolicyKind, mode: ActionMode,
           estimator: Estimator, policy: TrainablePolicy | None, pool: EnvPool, progress: RunProgress) -> Path:
    info = pool.environment_info
    train_tasks = pool.num_tasks(choose_split(info, cfg.env.train_split, "env.train_split"))
    eval_split = choose_split(info, cfg.env.eval_split, "env.eval_split")
    progress.phase("loading the model")
    if policy is None:
        policy = kind.load(cfg.model, seed=cfg.train.seed)
    if kind.shardable:  # model.parallel (fsdp), activation checkpointing:
        with user_input():  # before the updater builds its optimizer over the (sharded) parameters
            policy.shard(distributed.current(), cfg.model)
    ctx = distributed.current()
    updater = mode.updater(policy, estimator, cfg, ctx)
    newest = latest_checkpoint(run_dir) if resume else None
    # every rank continues the same iteration (each keeps its own checkpoints: distributed.rank_config)
    distributed.agree_same(checkpoint_iteration(newest) if newest else 0, "the iteration to resume from", ctx)
    start = _restore(run_dir, policy, updater) if resume else 0
    engine = mode.open_engine(policy, cfg)  # generate: a rollout engine; score: the policy itself ranks
    progress.phase("measuring this machine's speed")
    forecast = announce_forecast(cfg, engine, pool, start=start, device=getattr(policy, "device", "cpu"),
                                 ctx=ctx)
    records = RunRecords(run_dir, wandb_mode=cfg.logging.wandb, project=cfg.logging.wandb_project,
                         run_name=run_dir.name, config=cfg.to_dict())
    evaluation: dict[str, Any] | None = None
    progress.begin(start, forecast)  # the bar and the time left: the baseline is the first unit of work
    try:
        with (loop_collector(on_cpu=torch.device(getattr(policy, "device", "cpu")).type == "cpu"),
              stop_on_sigint() as stop):
            if start == 0 and cfg.train.eval_every and cfg.train.eval_episodes:  # the run's own baseline
                _baseline(cfg, run_dir, engine, pool, eval_split, policy, updater, stop, progress, ctx)
            for iteration in range(start + 1, cfg.train.iterations + 1):
                rng_before = capture_rng()
                try:
                    metrics = _iteration(cfg, iteration, mode, engine, pool, estimator, updater, train_tasks,
                                         stop, ctx)
                except (RolloutInterrupted, EngineError, EnvironmentFailures) as exc:  # nothing changed yet
                    saved = _keep_previous(run_dir, iteration - 1, policy, updater, rng_before)
                    raise stopped_by(exc, run_dir, saved) from None
                evaluation, failure = _after_update(cfg, run_dir, iteration, engine, pool, eval_split, metrics,
                                                    progress, ctx)
                records.log(iteration, metrics)
                print(progress_line(iteration, cfg.train.iterations, metrics), flush=True)
                progress.finished(iteration)
                last = iteration == cfg.train.iterations
                # the iteration boundary: any rank's Ctrl-C stops every rank, all saving this iteration
                stopping = distributed.agree_stop(stop.requested, ctx) or failure is not None
                if iteration % cfg.train.save_every == 0 or last or stopping:
                    saved = save_checkpoint(run_dir, iteration, policy, updater, capture_rng())
                if stopping:
                    raise stopped_by(failure, run_dir, saved)
    finally:
        records.close()
    _final_evaluation(cfg, run_dir, engine, pool, eval_split, evaluation, progress, ctx)
    return run_dir


def _baseline(cfg: ExperimentConfig, run_dir: Path, engine: ActingEngine, pool: EnvPool, split: str,
              policy: TrainablePolicy, updater: PolicyUpdater, stop: StopFlag, progress: RunProgress,
              ctx: distributed.Dist) -> None:
    """The run's own baseline (``evals/iter_000000.json``), handled like an iteration's evaluation: a
    Ctrl-C while it plays, or an engine failing in it, saves the untrained state as iteration 0
    (``--resume`` plays the baseline again) and stops the run; the ranks agree on stopping."""
    failure: Exception | None = None
    try:
        with progress.evaluation():
            evaluate_baseline(cfg, run_dir, engine, pool, split, ctx)
    except (EngineError, distributed.StoppedElsewhere) as exc:  # raised on every rank alike
        failure = exc
    if distributed.agree_stop(stop.requested, ctx) or failure is not None:
        saved = _keep_previous(run_dir, 0, policy, updater, capture_rng())
        raise stopped_by(failure, run_dir, saved)


def _iteration(cfg: ExperimentConfig, iteration: int, mode: ActionMode, engine: ActingEngine, pool: EnvPool,
               estimator: Estimator, updater: PolicyUpdater, train_tasks: int, stop: StopFlag,
               ctx: distributed.Dist) -> dict[str, float]:
    """Steps 1-6 of the module docstring for one iteration; returns its metrics."""
    began = time.perf_counter()
    tasks, sampling_seed = sample_tasks(cfg, train_tasks, iteration)
    tasks, offset = distributed.shard_tasks(tasks, ctx)  # several processes: this rank's whole rollout groups
    sampling_seed += ctx.rank
    settings = RolloutSettings.from_config(cfg, cfg.env.max_steps or pool.environment_info.max_steps)
    rollout = collect(engine, pool, tasks, settings, generator=torch.Generator().manual_seed(sampling_seed),
                      should_stop=lambda: stop.requested, ctx=ctx)  # ranks agree at every turn boundary
    rollout, own = distributed.gather_rollout(rollout, offset, ctx)  # the estimator sees the whole batch
    release = getattr(engine, "release", None)  # an engine frees what generation holds (vLLM sleeps)
    if release is not None:
        release()
    metrics: dict[str, float] = rollout.metrics("train", pool.environment_info.task_types)
    # failed episodes leave their groups before the estimator (same on every rank: the whole batch)
    rollout.rows, own, failures = drop_failed(rollout.rows, own)
    check_failures(failures, len(rollout.rows), cfg.rollout.max_failed_share, iteration)
    metrics.update(failures.metrics())
    rollout_s = time.perf_counter() - began

    began = time.perf_counter()
    samples = mode.samples(rollout.rows)
    values = updater.values(samples) if estimator.needs_critic else None  # docs/algorithms.md#baselines ppo: V_phi(s_t)
    if "entropies" in estimator.requires:  # generate mode: a no-grad pass at the rollout temperature
        rollout.fill_entropies(lambda: updater.step_entropies(samples))
    advantages = estimator.compute_output(rollout.step_batch(values, estimator.requires, iteration=iteration,
                                                       total_iterations=cfg.train.iterations))
    for i, sample in enumerate(samples):
        # every token of the action shares it (docs/algorithms.md#step-batch)
        sample.advantage = float(advantages.advantages[i])
        if advantages.returns is not None:
            sample.value_target = float(advantages.returns[i])
    advantage_s = time.perf_counter() - began

    metrics["train/step_rows"] = float(len(rollout.rows))
    metrics.update(advantages.diagnostics)
    metrics.update(updater.update(samples, own))  # this rank's rows of each mini-batch; gradients summed
    metrics.update({
        "timing/rollout_s": rollout_s,
        "timing/generate_s": rollout.generate_s,
        "timing/env_s": rollout.env_s,
        "timing/advantage_s": advantage_s,
        "timing/iteration_s": time.perf_counter() - began + rollout_s,
        "perf/generate_tokens_per_s": rollout.generated_tokens / max(rollout.generate_s, 1e-9),
    })
    return metrics


def _after_update(cfg: ExperimentConfig, run_dir: Path, iteration: int, engine: ActingEngine, pool: EnvPool,
                  split: str,
                  metrics: dict[str, float], progress: RunProgress,
                  ctx: distributed.Dist) -> tuple[dict[str, Any] | None, Exception | None]:
    """Step 7 after the update: the engine takes the new weights, then the scheduled evaluation (its
    record written, its metrics added to ``metrics``). Returns (the evaluation, None) or (None, the
    failure that stops the run: the update is kept, the evaluation lost). The ranks agree whether any
    engine failed, so every rank returns a failure or none (``StoppedElsewhere`` where another failed)."""
    failure: Exception | None = None
    try:
        engine.sync()  # the next generation uses the updated weights
    except EngineError as exc:
        failure = exc
    if distributed.agree_stop(failure is not None, ctx):  # no rank evaluates with a broken engine
        return None, failure or distributed.StoppedElsewhere("another training process's engine failed")
    if not (cfg.train.eval_every and iteration % cfg.train.eval_every == 0 and cfg.train.eval_episodes):
        return None, None
    try:
        with progress.evaluation():
            evaluation = evaluate_policy(cfg, engine, pool, split, ctx)
    except (EngineError, distributed.StoppedElsewhere) as exc:  # raised on every rank alike
        return None, exc
    write_eval_record(run_dir, iteration, evaluation)
    metrics.update(summary_metrics(evaluation, "eval"))
    metrics["timing/eval_s"] = evaluation["seconds"]
    return evaluation, None


def _restore(run_dir: Path, policy: TrainablePolicy, updater: PolicyUpdater) -> int:
    """Load the run's newest checkpoint into ``policy`` and ``updater``, restore the random states
    and cut ``metrics.jsonl`` back to it; returns the iterations it holds."""
    restored = load_checkpoint(latest_checkpoint(run_dir), policy, updater)
    restore_rng(restored.rng_state)
    truncate_metrics(run_dir, restored.iteration)
    return restored.iteration


def _keep_previous(run_dir: Path, iteration: int, policy: TrainablePolicy, updater: PolicyUpdater,
                   rng_state: dict[str, Any]) -> Path:
    """The checkpoint of ``iteration`` (the state before an abandoned one), saved now unless it exists."""
    saved = checkpoint_path(run_dir, iteration)
    return saved if saved.exists() else save_checkpoint(run_dir, iteration, policy, updater, rng_state)


def _final_evaluation(cfg: ExperimentConfig, run_dir: Path, engine: ActingEngine, pool: EnvPool, split: str,
                      evaluation: dict[str, Any] | None, progress: RunProgress, ctx: distributed.Dist) -> None:
    """``eval.json``: the last iteration's evaluation, run now unless the loop's schedule just ran it;
    closes the engine. An engine failing here is ``EngineCrashed`` with the trained policy saved
    (``--resume`` runs only this evaluation again)."""
    try:
        if cfg.train.eval_episodes and evaluation is None:
            with progress.evaluation():
                evaluation = evaluate_policy(cfg, engine, pool, split, ctx)
            write_eval_record(run_dir, cfg.train.iterations, evaluation)
    except (EngineError, distributed.StoppedElsewhere) as exc:
        raise stopped_by(exc, run_dir, latest_checkpoint(run_dir)) from None
    finally:
        engine.close()
    if cfg.train.eval_episodes:
        write_final_eval(run_dir, cfg.train.iterations, evaluation)
        print_success_change(run_dir, cfg.train.iterations, evaluation)  # against the run's own baseline


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
    specs = [TaskSpec(cfg.env.train_split, int(task_ids[g]), int(env_seeds[g]), g)
             for g in range(n) for _ in range(k)]
    return specs, int(rng.integers(0, 2**63 - 1))
