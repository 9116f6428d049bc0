"""``gagpo eval``: run a policy on N task instances of an environment, batched over an ``EnvPool``.

Which episodes are played, how, and the numbers reported: ``gagpo_cli.episodes``.

A training run directory (or one of its checkpoints) as the policy replays the run's own evaluation
(``eval_settings``): every setting not given is the run's, so the run's last evaluation (its
``eval.json``) comes out again, episode for episode.

A model policy acts through one of the prompting agents (``--agent``, ``gagpo_cli.prompting``):
``plain`` (the rollout's prompt), ``react`` (each episode record adds ``steps``: the thought and the
action of every step) or ``reflexion`` (failed episodes replayed up to ``trials`` times with the last
``memory`` self-reflections; the record adds ``trials``, one log per trial with its steps and the
reflection written after it, and the result adds ``per_trial``: success after each trial). The
result names the agent (``agent``, for model policies) and the model (``model``; ``run`` too when it
is a trained run), which is how ``gagpo report`` places it among Table 1's prompting rows.

The trainer's acting code (torch, transformers) is imported inside the functions that need a model,
so evaluating a built-in policy (``expert``, ``random``) starts in a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from environments.base import resolve_env_spec
from environments.pool import EnvPool
from gagpo_cli.agents import AgentPolicy, resolve_policy
from gagpo_cli.config import parse_key_value
from gagpo_cli.console import Heartbeat
from gagpo_cli.episodes import choose_split, evaluation_specs, play_episodes, record_of, summarize
from gagpo_cli.errors import UsageError, user_input, warn
from gagpo_cli.eval_checks import check_action_mode, check_caps, check_policy_path, check_request
from gagpo_cli.output_paths import output_file
from gagpo_cli.prompting import DEFAULT_MEMORY, DEFAULT_TRIALS, check_agent, prompting_agent
from gagpo_core.atomic import atomic_write_json


def parse_env_options(pairs: list[str]) -> dict[str, Any]:
    """``["KEY=VALUE", ...]`` -> environment options, each value read as YAML (as ``--set`` reads it)."""
    return dict(parse_key_value(pair, "--option", "data_dir=/data/webshop") for pair in pairs)


def evaluate(env_name: str, policy: AgentPolicy | str, episodes: int, split: str | None = None, seed: int = 0,
             options: dict[str, Any] | None = None, workers: int = 0, *, batch_size: int = 128,
             max_steps: int | None = None, step_timeout_s: float = 120.0, agent: str = "plain",
             trials: int = DEFAULT_TRIALS, memory: int = DEFAULT_MEMORY, engine: str | None = None,
             max_new_tokens: int | None = None, action_mode: str | None = None,
             say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Evaluate ``policy`` (an ``AgentPolicy`` or a spec for ``resolve_policy``) on ``episodes`` episodes
    (at most one per task of the split) of at most ``max_steps`` steps (None: the environment's budget),
    a model acting as the prompting agent ``agent`` (``trials`` and ``memory``: Reflexion's) and
    generating at most ``max_new_tokens`` tokens per answer (None: its own setting) with its own
    ``Policy.generate`` or, when ``engine`` is given, that rollout engine (``hf``, ``vllm``, ``auto``;
    generate mode), acting in ``action_mode`` (``generate`` | ``score``; None: a run's own, else
    generate; a run accepts only its own). ``say``, when given, gets a one-line time forecast of a
    generating model's evaluation before it starts (``forecast.announce_eval_forecast``). What is
    refused before a model is loaded: ``eval_checks``.

    Returns the metrics of ``gagpo_cli.episodes.summarize`` plus ``env``, ``split``, ``policy``, ``seed``,
    ``workers``, for a model ``agent`` and ``model`` (and ``run``), for Reflexion ``trials``, ``memory``
    and ``per_trial``, and ``per_episode`` (one dict per episode, in order).
    """
    check_request(policy, episodes, workers, agent, trials, memory, engine, seed)  # before loading a model
    check_caps(policy, max_steps, max_new_tokens)
    with user_input():  # `openenv:<url>`: the adapter's name, the url in its options
        env_name, options = resolve_env_spec(env_name, options)
    check_action_mode(policy, action_mode, agent)
    acting = _overridden(resolve_policy(policy, seed=seed) if isinstance(policy, str) else policy,
                         max_new_tokens, action_mode)
    if engine is not None and hasattr(acting, "policy"):
        from gagpo_cli.train.acting.agent import with_engine

        acting = with_engine(acting, engine)
    actor = prompting_agent(agent, acting)
    if getattr(actor, "action_mode", None) is not None:  # a model agent: its mode builds the environment
        from gagpo_cli.train.acting.modes import get_action_mode  # (score: finite action sets)

        options = get_action_mode(actor.action_mode).env_options(env_name, options)
    with user_input():
        pool = EnvPool(env_name, options, workers=workers, step_timeout_s=step_timeout_s)
    with pool:
        info = pool.environment_info
        split = choose_split(info, split)
        specs = evaluation_specs(pool, split, episodes, seed)
        if say is not None and getattr(actor, "action_mode", None) == "generate":
            from gagpo_cli.train.forecast import announce_eval_forecast

            announce_eval_forecast(acting, pool, split, episodes=len(specs), batch_size=batch_size,
                                   max_steps=max_steps or info.max_steps,
                                   trials=trials if agent == "reflexion" else 1, say=say)
        if agent == "reflexion":
            from gagpo_cli.prompting.reflexion import run_trials

            records, extras, per_trial, env_steps, env_seconds = run_trials(
                pool, actor, specs, trials=trials, memory=memory, batch_size=batch_size, max_steps=max_steps)
        else:
            views, env_steps, env_seconds = play_episodes(pool, actor, specs, batch_size, max_steps)
            records = [record_of(task_id, view) for (_, task_id, _), view in zip(specs, views, strict=True)]
            extras = _react_steps(views) if agent == "react" else None
    result = {"env": env_name, "split": split, "policy": policy if isinstance(policy, str) else acting.name,
              "seed": seed, "workers": workers}
    if hasattr(acting, "model_name"):  # a language model: which agent prompted which model
        result.update(agent=agent, model=acting.model_name)
        if getattr(acting, "run", ""):
            result["run"] = acting.run
    if agent == "reflexion":
        result.update(trials=trials, memory=memory, per_trial=per_trial)
    result.update({k: v for k, v in (("max_steps", max_steps), ("max_new_tokens", max_new_tokens)) if v is not None})
    result.update(summarize(records, env_steps, env_seconds, info.task_types))
    result["per_episode"] = [asdict(record) for record in records]
    if extras is not None:  # react: each step's thought and action; reflexion: each trial's log
        for entry, extra in zip(result["per_episode"], extras, strict=True):
            entry["trials" if agent == "reflexion" else "steps"] = extra
    return result






def _overridden(acting: Any, max_new_tokens: int | None, action_mode: str | None) -> Any:
    """A model agent with the command line's answer cap and action mode (None: its own); other policies
    as they are."""
    if max_new_tokens is not None and hasattr(acting, "acting"):
        acting.acting = replace(acting.acting, max_new_tokens=max_new_tokens)
    if action_mode is not None and hasattr(acting, "action_mode"):
        acting.action_mode = action_mode
    return acting


def _react_steps(views: list[Any]) -> list[list[dict[str, Any]]]:
    """ReAct's audit of each episode: every step's thought and action (``prompting.react.audit_steps``)."""
    from gagpo_cli.prompting.react import audit_steps

    return [audit_steps(view) for view in views]



def print_report(result: dict[str, Any], console: Console) -> None:
    """Rich tables: the headline metrics, then success per task type."""
    agent = f" / agent {result['agent']}" if result.get("agent", "plain") != "plain" else ""
    table = Table(title=f"eval {result['env']} / {result['split']} / policy {result['policy']}{agent}",
                  title_justify="left")
    table.add_column("metric", style="bold cyan")
    table.add_column("value", justify="right")
    table.add_row("episodes", str(result["episodes"]))
    table.add_row("success rate (%)", f"{result['success_rate']:.1f}")
    table.add_row("score (%)", f"{result['score']:.1f}")
    table.add_row("mean length (steps)", f"{result['mean_length']:.2f}")
    table.add_row("crashed / out of budget", f"{result['crashed']} / {result['truncated']}")
    table.add_row("env steps per s", f"{result['env_steps_per_s']:.1f}")
    console.print(table)
    types = Table(title="success rate per task type (%)", title_justify="left")
    types.add_column("task type", style="bold cyan")
    types.add_column("episodes", justify="right")
    types.add_column("success (%)", justify="right")
    for task_type, rate in result["per_type"].items():
        types.add_row(task_type, str(result["per_type_episodes"][task_type]), f"{rate:.1f}")
    console.print(types)
    if result.get("per_trial"):
        trials = Table(title=f"Reflexion: success after each trial (%; last {result['memory']} reflections "
                             "shown)", title_justify="left")
        for column in ("trial", "episodes played", "won in the trial", "success so far (%)"):
            trials.add_column(column, justify="right")
        for row in result["per_trial"]:
            trials.add_row(str(row["trial"]), str(row["played"]), str(row["won"]),
                           f"{row['success_rate']:.1f}")
        console.print(trials)
    errors = [e["error"] for e in result.get("per_episode", []) if e["crashed"]]
    if errors:
        console.print(f"[yellow]warning:[/yellow] {len(errors)} episode(s) crashed (counted as failures); "
                      f"first error: {escape(errors[0])}")


DEFAULT_EPISODES = 20  # ``gagpo eval --episodes`` when neither the command line nor a run says


@dataclass(frozen=True)
class EvalSettings:
    """What one ``gagpo eval`` plays (the arguments of ``evaluate``) and, when replaying, which run."""

    env: str
    split: str | None
    episodes: int
    seed: int
    options: dict[str, Any]
    workers: int
    batch_size: int = 128
    max_steps: int | None = None
    replaying: str = ""  # the run whose evaluation this replays ("" for none)


def eval_settings(policy: str, env: str | None, episodes: int | None, split: str | None, seed: int | None,
                  workers: int | None, options: dict[str, Any]) -> EvalSettings:
    """The command line's settings (None: not given). A run directory or checkpoint as ``policy`` supplies
    every one not given, as its own evaluations used them: ``env.name``; on that environment, its
    ``env.options`` (given ``--option`` keys override) and ``env.eval_split``; ``train.eval_episodes``,
    ``train.seed``, ``env.workers``, ``train.eval_max_steps`` and a batch of ``rollout.tasks_per_batch x
    group_size`` episodes (the model's ``rollout.eval_temperature`` comes with it, ``agent.load_agent``).
    Without a run: ``--env`` is required, then 20 episodes, seed 0, in-process, batches of 128."""
    run = None
    if Path(policy).exists():
        from gagpo_cli.train.acting.agent import run_config

        check_policy_path(policy)  # a set-aside checkpoint, a run whose config.yaml is not a file

        run = run_config(policy)
    if run is None:
        if env is None:
            raise UsageError("--env is required (it is optional only when --policy is a training run directory)")
        return EvalSettings(env, split, _given(episodes, DEFAULT_EPISODES), _given(seed, 0), options,
                            _given(workers, 0))
    from gagpo_cli.train.evaluation import eval_batch_size

    own_env = env is None or env == run.env.name
    if not own_env:  # a documented choice: transfer is a question one may ask, but never silently
        warn(f"--policy {policy} was trained on {run.env.name}; evaluating it on {env} (not a replay of the run's "
             "own evaluation: the environment's own split, episodes and options)")
    return EvalSettings(
        env=run.env.name if env is None else env,
        split=split if split is not None or not own_env else run.env.eval_split,
        episodes=_given(episodes, run.train.eval_episodes or DEFAULT_EPISODES),
        seed=_given(seed, run.train.seed),
        options={**run.env.options, **options} if own_env else options,
        workers=_given(workers, run.env.workers),
        batch_size=eval_batch_size(run),
        max_steps=run.train.eval_max_steps,
        replaying=policy if own_env else "",
    )


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value


def eval_command(env: str | None, policy: str, episodes: int | None, split: str | None, seed: int | None,
                 json_out: str | Path | None, workers: int | None, option: list[str], agent: str = "plain",
                 trials: int = DEFAULT_TRIALS, memory: int = DEFAULT_MEMORY, engine: str | None = None, *,
                 max_steps: int | None = None, max_new_tokens: int | None = None,
                 action_mode: str | None = None) -> dict[str, Any]:
    """What ``gagpo eval`` does: settle the settings (``eval_settings``; ``max_steps`` overrides a run's
    ``train.eval_max_steps``), evaluate, print the tables, write the JSON (``json_out``, checked first)."""
    check_agent(agent, trials=trials, memory=memory)  # before anything is loaded
    json_path = None if json_out is None else output_file(str(json_out), "--json", "eval.json")
    settings = eval_settings(policy, env, episodes, split, seed, workers, parse_env_options(option))
    console = Console()
    if settings.replaying:
        console.print(f"replaying the evaluation of {settings.replaying}: up to {settings.episodes} episodes, "
                      f"seed {settings.seed}, batches of {settings.batch_size}", highlight=False)
    with Heartbeat(f"gagpo eval of {policy} on {settings.env}"):
        result = evaluate(settings.env, policy, settings.episodes, settings.split, settings.seed, settings.options,
                          settings.workers, batch_size=settings.batch_size,
                          max_steps=settings.max_steps if max_steps is None else max_steps,
                          agent=agent, trials=trials, memory=memory, engine=engine, max_new_tokens=max_new_tokens,
                          action_mode=action_mode,
                          say=lambda line: console.print(line, highlight=False))
    if result["episodes"] < settings.episodes:
        console.print(f"note: {result['split']} has {result['episodes']} tasks; each was played once", highlight=False)
    print_report(result, console)
    if json_path is not None:
        try:
            atomic_write_json(json_path, result)
        except OSError as exc:
            raise UsageError(f"could not write --json {json_path}: {exc.strerror or exc}") from None
        console.print(f"wrote {json_path}", highlight=False)
    return result
