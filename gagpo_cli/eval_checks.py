"""What ``gagpo eval`` refuses before it loads a model or starts an environment: each check raises a
``UsageError`` whose one line names the problem and what to give instead."""

from __future__ import annotations

from pathlib import Path

from gagpo_cli.agents import BUILTIN_POLICIES, AgentPolicy
from gagpo_cli.errors import UsageError
from gagpo_cli.prompting import check_agent, check_generates
from gagpo_cli.run_layout import CHECKPOINTS_DIR, RunLayout, iteration_of
from gagpo_cli.train.checkpoint import CORRUPT_PREFIX
from gagpo_cli.train.config_checks import MAX_SEED
from gagpo_core.plugins import unknown_name_message


def check_request(policy: AgentPolicy | str, episodes: int, workers: int, agent: str, trials: int,
                   memory: int, engine: str | None, seed: int = 0) -> None:
    """The ``UsageError`` of a request ``evaluate`` cannot play, before any model is loaded."""
    if episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {episodes}")
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be between 0 and {MAX_SEED} (numpy's seed range, as train.seed), got {seed}")
    if workers < 0:
        raise UsageError(f"--workers must be 0 (in-process) or more, got {workers}")
    check_agent(agent, trials=trials, memory=memory)
    if isinstance(policy, str):
        check_policy_path(policy)
        check_run_generates(policy, agent)
        if agent != "plain" and policy in BUILTIN_POLICIES:
            raise UsageError(f"--agent {agent} prompts a language model; policy '{policy}' is not one "
                             "(give a model folder, hub id or run directory)")
    if engine is not None:
        from gagpo_cli.train.acting.engines import check_engine, engine_names

        if engine != "auto" and engine not in engine_names():
            raise UsageError(unknown_name_message("--engine", engine, ["auto", *engine_names()]))
        check_engine(engine)
        if isinstance(policy, str) and policy in BUILTIN_POLICIES:
            raise UsageError(f"--engine generates a language model's answers; policy '{policy}' is not one")

def check_policy_path(policy: str) -> None:
    """A file, or a run's ``checkpoints`` folder, given as ``--policy``: the ``UsageError`` saying what to give."""
    if not policy.strip():
        raise UsageError("--policy is empty; give expert, random, a training run directory or a model")
    path = Path(policy)
    if path.is_file():
        raise UsageError(f"--policy {path} is a file; give a training run directory, one of its checkpoints "
                         "(RUN/checkpoints/iter_NNNNNN) or a model folder")
    if path.is_dir() and path.name == CHECKPOINTS_DIR and RunLayout(path.parent).config.is_file():
        raise UsageError(f"--policy {path} is a run's checkpoints folder; give the run directory {path.parent} "
                         "or one checkpoint in it")
    if path.is_dir() and path.parent.name == CHECKPOINTS_DIR and iteration_of(path.name) is None:
        what = ("a checkpoint set aside as corrupt (its files failed their sha256 check)"
                if path.name.startswith(CORRUPT_PREFIX) else "not a checkpoint of the run (checkpoints/iter_NNNNNN)")
        raise UsageError(f"--policy {path} is {what}; give the run directory {path.parent.parent} (its newest "
                         "checkpoint) or one of its iter_* folders")
    config = RunLayout(path).config
    if config.exists() and not config.is_file():
        raise UsageError(f"--policy {path}: its {config.name} is not a file, so the run's settings cannot be read")

def check_caps(policy: AgentPolicy | str, max_steps: int | None, max_new_tokens: int | None) -> None:
    """The ``UsageError`` of a step or token cap that cannot apply, before any model is loaded."""
    if max_steps is not None and max_steps < 1:
        raise UsageError(f"--max-steps must be at least 1, got {max_steps}")
    if max_new_tokens is not None:
        if max_new_tokens < 1:
            raise UsageError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")
        if isinstance(policy, str) and policy in BUILTIN_POLICIES:
            raise UsageError(f"--max-new-tokens caps a language model's answers; policy '{policy}' is not one")

def check_action_mode(policy: AgentPolicy | str, action_mode: str | None, agent: str) -> None:
    """The ``UsageError`` of an ``--action-mode`` that cannot apply, before any model is loaded: an unknown
    mode, a built-in policy, a training run in another mode, or a prompting agent that needs thoughts."""
    if action_mode is None:
        return
    from gagpo_cli.train.acting.modes import action_mode_names

    if action_mode not in action_mode_names():
        raise UsageError(unknown_name_message("--action-mode", action_mode, action_mode_names()))
    if isinstance(policy, str) and policy in BUILTIN_POLICIES:
        raise UsageError(f"--action-mode sets how a language model acts; policy '{policy}' is not one")
    run = None
    if isinstance(policy, str) and Path(policy).exists():
        from gagpo_cli.train.acting.agent import run_config

        run = run_config(policy)
    if run is not None and run.rollout.action_mode != action_mode:
        raise UsageError(f"{policy} is a run trained in {run.rollout.action_mode} mode, which it replays; "
                         "--action-mode applies to a model folder or hub id")
    check_generates(agent, action_mode, run.model.name if run is not None else "")

def check_run_generates(policy: str, agent: str) -> None:
    """A score-mode run (or bow-mlp) with ``--agent react|reflexion``: the ``UsageError`` before loading."""
    if agent == "plain" or not Path(policy).exists():
        return
    from gagpo_cli.train.acting.agent import run_config

    run = run_config(policy)
    if run is not None:
        check_generates(agent, run.rollout.action_mode, run.model.name)
