"""The ``gagpo`` command line: parse, validate, call one function, print.

Every command's logic lives in a module a test can call directly; this file only wires them.
Bad input (a ``UsageError``: the commands convert a library's ``ValueError`` on the user's input
into one, ``gagpo_cli.errors.user_input``) becomes one red line on stderr and exit code 2; any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from gagpo_cli import __version__
from gagpo_cli.errors import UsageError, one_line_warnings, warn
from gagpo_cli.prompting import DEFAULT_MEMORY, DEFAULT_TRIALS

app = typer.Typer(
    name="gagpo",
    help="RL of LLM agents in multi-turn text environments: GAGPO and the methods it is compared with.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gagpo {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """RL of LLM agents in multi-turn text environments."""


@app.command("list")
def list_command(
    kind: Annotated[
        str | None, typer.Argument(help="What to list: estimators, environments, policy-kinds, engines, "
                                   "action-modes or experiments (default: all).")
    ] = None,
) -> None:
    """List the registered plugins (estimators, environments, policy kinds, rollout engines, action modes:
    entry points) and the built-in experiments and sweeps."""
    from gagpo_cli.listing import print_listing

    print_listing(kind)


_ENV_OPTION = typer.Option("--option", "-o", help="Environment option KEY=VALUE (e.g. data_dir=...), repeatable.")


@app.command("eval")
def eval_command(
    env: Annotated[str | None, typer.Option("--env", help="Environment name (see `gagpo list environments`); "
                                            "a run's own when --policy is a run directory.")] = None,
    policy: Annotated[str, typer.Option(help="expert, random, or a model (run directory / path).")] = "expert",
    episodes: Annotated[int | None, typer.Option(
        help="Episodes, at most one per task, in the environment's evaluation order (task types interleaved) "
             "[default: 20, or the run's train.eval_episodes]")] = None,
    split: Annotated[str | None, typer.Option(help="Task split (default: test, else the last one).")] = None,
    seed: Annotated[int | None, typer.Option(
        help="Seed of episodes and of the policy's sampling [default: 0, or the run's train.seed]")] = None,
    json_out: Annotated[str | None, typer.Option("--json", help="Write the metrics JSON to this file.")] = None,
    workers: Annotated[int | None, typer.Option(
        help="Environment worker processes, 0: in-process [default: 0, or the run's env.workers]")] = None,
    option: Annotated[list[str] | None, _ENV_OPTION] = None,
    agent: Annotated[str, typer.Option(
        help="How a model is prompted: plain (the training prompt), react (a thought, then the action; "
             "thoughts kept in the history) or reflexion (ReAct, failed tasks retried with "
             "self-reflections).")]
    = "plain",
    trials: Annotated[int | None, typer.Option(
        help=f"Reflexion: trials per task (the paper's runs: 10) [default: {DEFAULT_TRIALS}]")] = None,
    memory: Annotated[int | None, typer.Option(
        help="Reflexion: reflections shown in the prompt, the most recent ones (the paper's: 3) "
             f"[default: {DEFAULT_MEMORY}]")] = None,
    engine: Annotated[str | None, typer.Option(
        help="Generate a model's answers with this rollout engine: hf, vllm or auto (vllm where usable) "
             "[default: the model's own transformers generation]")] = None,
    max_steps: Annotated[int | None, typer.Option(
        help="Steps per episode at most [default: the environment's budget, or the run's train.eval_max_steps]")
    ] = None,
    max_new_tokens: Annotated[int | None, typer.Option(
        help="Tokens per answer of a model at most (generate mode) [default: the run's rollout.max_new_tokens, "
             "512 for a model folder]")] = None,
    action_mode: Annotated[str | None, typer.Option(
        "--action-mode", help="How a model folder or hub id acts: generate (writes the action) or score (ranks "
                              "the admissible ones), as it was trained [default: a run's own, else generate]")
    ] = None,
) -> None:
    """Evaluate a policy on an environment: success rate, score, per task type, speed. A training run as
    --policy replays the run's own evaluation (its settings fill in every option not given). --agent
    react | reflexion gives Table 1's prompting rows."""
    from gagpo_cli.evaluate import eval_command as run_eval
    from gagpo_cli.train.acting.engines import EngineError

    unused = [flag for flag, value in (("--trials", trials), ("--memory", memory)) if value is not None]
    if unused and agent != "reflexion":
        verb = "apply" if len(unused) > 1 else "applies"
        warn(f"{' and '.join(unused)} {verb} to --agent reflexion only; ignored with --agent {agent}")
    try:
        run_eval(env, policy, episodes, split, seed, json_out, workers, option or [], agent,
                 DEFAULT_TRIALS if trials is None else trials, DEFAULT_MEMORY if memory is None else memory,
                 engine, max_steps=max_steps, max_new_tokens=max_new_tokens, action_mode=action_mode)
    except EngineError as exc:  # the engine failed, not the user's input: one line, exit 1
        err.print(f"[red]error:[/red] {escape(' '.join(str(exc).split()))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


@app.command("play")
def play_command(
    env: Annotated[str, typer.Option("--env", help="Environment name (see `gagpo list environments`).")],
    task: Annotated[int | None, typer.Option(help="Task id (default: a random one).")] = None,
    split: Annotated[str | None, typer.Option(help="Task split (default: test, else the last one).")] = None,
    seed: Annotated[int, typer.Option(help="Episode seed.")] = 0,
    option: Annotated[list[str] | None, _ENV_OPTION] = None,
) -> None:
    """Play one task yourself in the terminal (numbered actions, `expert` for a hint)."""
    from gagpo_cli.play import play_command as run_play

    run_play(env, task, split, seed, option or [])


@app.command("serve")
def serve_command(
    env: Annotated[str, typer.Argument(help="Environment to serve (see `gagpo list environments`).")],
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    option: Annotated[list[str] | None, _ENV_OPTION] = None,
    action_mode: Annotated[str, typer.Option(
        "--action-mode", help="generate, or score: the environment's options for ranked actions (finite action "
                              "sets, e.g. WebShop's candidate queries), as `gagpo train --action-mode score` "
                              "builds it.")] = "generate",
    max_sessions: Annotated[int, typer.Option(help="WebSocket sessions (live episodes) at once.")] = 256,
) -> None:
    """Serve an environment as an OpenEnv server (reset/step/state over WebSocket, the Task API): every
    observation carries its state key and the step's reward, for any OpenEnv trainer or `--env openenv:URL`."""
    from gagpo_cli.serve import serve_command as run_serve

    run_serve(env, host, port, option or [], action_mode, max_sessions)


@app.command("train")
def train_command(
    experiment: Annotated[str | None, typer.Argument(help="Experiment YAML file or built-in name.")] = None,
    config: Annotated[str | None, typer.Option("--config", "-c", help="Same as EXPERIMENT.")] = None,
    estimator: Annotated[str | None, typer.Option(help="Estimator (gagpo list estimators).")] = None,
    env: Annotated[str | None, typer.Option("--env", help="Environment (gagpo list environments).")] = None,
    model: Annotated[str | None, typer.Option(help="Model alias, local folder or hub id.")] = None,
    lora: Annotated[bool | None, typer.Option("--lora/--full", help="LoRA adapter or full fine-tuning.")] = None,
    iterations: Annotated[int | None, typer.Option(help="Training iterations.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the run.")] = None,
    output_dir: Annotated[str | None, typer.Option(help="Folder holding run directories.")] = None,
    run_name: Annotated[str | None, typer.Option(help="Run directory name.")] = None,
    wandb: Annotated[str | None, typer.Option(help="disabled | offline | online.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the run's newest checkpoint.")] = False,
    action_mode: Annotated[str | None, typer.Option(
        "--action-mode", help="generate (the model writes the action) | score (it ranks the admissible ones) | "
                              "another registered mode (gagpo list action-modes).")] = None,
    threads: Annotated[int | None, typer.Option(help="Torch CPU threads (default: the cores free to the process).")]
    = None,
    sets: Annotated[list[str] | None, typer.Option("--set", help="KEY=VALUE config override, repeatable.")] = None,
) -> None:
    """Train a policy with an estimator on an environment (metrics.jsonl, checkpoints, eval.json)."""
    from gagpo_cli.train.command import train_command as run_train
    from gagpo_cli.train.stopping import EngineCrashed, TrainingInterrupted

    if experiment and config:
        raise UsageError("give the experiment either as an argument or with --config, not both")
    flags = {"estimator": estimator, "env": env, "model": model, "lora": lora, "iterations": iterations,
             "seed": seed, "output_dir": output_dir, "run_name": run_name, "wandb": wandb,
             "action_mode": action_mode, "threads": threads}
    try:
        run_train(experiment or config, sets or [], flags, resume)
    except EngineCrashed as exc:  # a failure, not a Ctrl-C: exit 1 (a sweep reports it and retries with --resume)
        err.print(f"[red]error:[/red] {escape(' '.join(str(exc).split()))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except TrainingInterrupted as exc:
        err.print(f"[yellow]{exc}[/yellow]", highlight=False)
        raise typer.Exit(130) from None


@app.command("ablate")
def ablate_command(
    sweep: Annotated[str | None, typer.Argument(
        help="Sweep file or name (experiments/sweeps/), or a base experiment.")] = None,
    grid: Annotated[list[str] | None, typer.Option(help=(
        "Axes, repeatable: lambda,norm (default values) | lambda=0,0.8,1 | optim.lr=1e-6,3e-6; axes: lambda, norm, "
        "gamma, estimator, env, model, lora, seed, or any dotted config key."))] = None,
    preset: Annotated[str | None, typer.Option(
        help="table1 (methods x environments) or table2 (GAGPO ablations).")] = None,
    seeds: Annotated[int | None, typer.Option(
        help="Seeds per cell: 0..N-1 (default: the sweep file's, else 1).")] = None,
    jobs: Annotated[int, typer.Option(help=(
        "Runs at once (local launcher); each gets at most cores/N threads (a higher train.threads is lowered)."))] = 1,
    launcher: Annotated[str, typer.Option(help="local (child processes) or ray (Ray tasks).")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster address (default: a local Ray instance).")] = None,
    cpus_per_cell: Annotated[float, typer.Option(help="Ray: CPUs per run.")] = 1.0,
    gpus_per_cell: Annotated[float, typer.Option(help="Ray: GPUs per run.")] = 0.0,
    dry_run: Annotated[bool, typer.Option(help="Print the cells (overrides, run directories) and exit.")] = False,
    status: Annotated[bool, typer.Option(help="Print the state of every run and exit.")] = False,
    name: Annotated[str | None, typer.Option(help="Sweep folder name (default: from the sweep / axes).")] = None,
    estimator: Annotated[str | None, typer.Option(help="Estimator of every cell.")] = None,
    env: Annotated[str | None, typer.Option("--env", help="Environment of every cell.")] = None,
    model: Annotated[str | None, typer.Option(help="Model of every cell.")] = None,
    lora: Annotated[bool | None, typer.Option("--lora/--full", help="LoRA adapter or full fine-tuning.")] = None,
    iterations: Annotated[int | None, typer.Option(help="Training iterations.")] = None,
    output_dir: Annotated[str | None, typer.Option(help="Folder holding the sweep folder.")] = None,
    wandb: Annotated[str | None, typer.Option(help="disabled | offline | online.")] = None,
    action_mode: Annotated[str | None, typer.Option("--action-mode", help="generate | score | a plugin's.")] = None,
    sets: Annotated[list[str] | None, typer.Option(
        "--set", help="KEY=VALUE override of every cell, repeatable.")] = None,
    until_decided: Annotated[bool, typer.Option(
        "--until-decided", help="Run seeds in rounds (4, then 2 more each) until every cell's comparison with "
                                "--baseline is decided (group-sequential test, docs/sequential.md).")] = False,
    baseline: Annotated[str | None, typer.Option(
        help="--until-decided: the cell every other cell is compared with (default: the first cell).")] = None,
    max_seeds: Annotated[int | None, typer.Option(
        help="--until-decided: most seeds per cell (default 10; larger later continues).")] = None,
    min_effect: Annotated[float | None, typer.Option(
        help="--until-decided: stop a comparison as 'no difference' once its interval is inside "
             "+-POINTS.")] = None,
    metric: Annotated[str | None, typer.Option(
        help="--until-decided: eval.json number compared: success_rate, score, per_type.<type>.")] = None,
    alpha: Annotated[float | None, typer.Option(
        help="--until-decided: error rate over all comparisons (default 0.05).")] = None,
) -> None:
    """Run a sweep: one `gagpo train` run per cell and seed in <output_dir>/<sweep>/<cell>/s<seed>/.

    Re-running skips done runs and resumes the rest; a run trained with other settings is refused.
    """
    from gagpo_cli.sweep.ablate import ablate_command as run_ablate
    from gagpo_cli.sweep.rounds import until_decided_command

    flags = {"estimator": estimator, "env": env, "model": model, "lora": lora, "iterations": iterations,
             "output_dir": output_dir, "wandb": wandb, "action_mode": action_mode}
    decide = {"baseline": baseline, "max_seeds": max_seeds, "min_effect": min_effect, "metric": metric, "alpha": alpha}
    launch = {"launcher": launcher, "jobs": jobs, "address": address, "cpus_per_cell": cpus_per_cell,
              "gpus_per_cell": gpus_per_cell}
    if until_decided:
        code = until_decided_command(sweep, grid or [], preset, seeds, sets or [], flags, decide, launch_options=launch,
                                     dry_run=dry_run, status=status, name=name)
    else:
        code = run_ablate(sweep, grid or [], preset, seeds, sets or [], flags, dry_run=dry_run, status=status,
                          name=name, decide=decide, **launch)
    if code:
        raise typer.Exit(code)


@app.command("report")
def report_command(
    run_dirs: Annotated[list[str] | None, typer.Argument(
        help="Run directories and sweep folders, searched recursively "
             "(default: runs, the default output_dir).")] = None,
    table: Annotated[int | None, typer.Option(help="1: methods x benchmarks; 2: GAGPO and its ablations.")] = None,
    out: Annotated[str | None, typer.Option(
        help="Folder for the CSV / Markdown / LaTeX / PNG files (default: ./report).")] = None,
    paper: Annotated[bool, typer.Option(help="Add the published rows (marked, never mixed with measured).")] = False,
    figures: Annotated[bool, typer.Option(
        help="Write PNG figures: training and evaluation curves with bands, interval plots with every seed, "
             "differences to the reference row with their intervals and decisions.")] = False,
    baseline: Annotated[str | None, typer.Option(
        help="Reference row each row is tested against (paired t where seeds are shared, else Welch; "
             "default: GRPO in Table 1, GAGPO in Table 2).")] = None,
    min_effect: Annotated[float | None, typer.Option(
        help="Size 'seeds needed' to detect a difference of this many points (default: the observed one).")] = None,
) -> None:
    """Aggregate finished runs over seeds into tables and figures: mean [95 % Student-t interval], std, n,
    tests against --baseline (Holm-adjusted), P(improvement), area under the evaluation curve."""
    from gagpo_cli.config import LoggingConfig
    from gagpo_cli.report.command import report_command as run_report

    if run_dirs is not None and not all(name.strip() for name in run_dirs):
        raise UsageError("an empty run directory name was given; name run directories or sweep folders")
    paths = [Path(name) for name in run_dirs] if run_dirs else [Path(LoggingConfig.output_dir)]
    run_report(paths, table, out, paper, figures, baseline=baseline, min_effect=min_effect)


@app.command("export")
def export_command(
    run_dir: Annotated[str, typer.Argument(help="Training run directory (or one of its checkpoints).")],
    out: Annotated[str, typer.Option("--out", help="Folder to write (new, or empty).")],
    iteration: Annotated[int | None, typer.Option(
        help="Checkpoint to export [default: the newest one that matches its sha256 manifest]")] = None,
    adapter_only: Annotated[bool, typer.Option(
        "--adapter-only", help="Write the PEFT LoRA adapter instead of merged weights (LoRA runs only).")] = False,
    dtype: Annotated[str, typer.Option(
        help="Weights dtype: auto (the base model's), float32, bfloat16 or float16.")] = "auto",
) -> None:
    """Export a run as a standard transformers folder (config, safetensors with the LoRA merged, tokenizer,
    generation config, model card) that transformers, vLLM or another harness loads."""
    from gagpo_cli.export import export_command as run_export

    if not run_dir.strip():
        raise UsageError("the run directory is empty; name a training run directory (or one of its checkpoints)")
    run_export(Path(run_dir), out, iteration, adapter_only, dtype)


@app.command("plan")
def plan_command(
    experiment: Annotated[str | None, typer.Argument(help="Experiment YAML file or built-in name.")] = None,
    model: Annotated[str | None, typer.Option(help="Model: a local folder (config.json) or a known name.")] = None,
    lora: Annotated[bool | None, typer.Option("--lora/--full", help="LoRA adapter or full fine-tuning.")] = None,
    gpus: Annotated[str, typer.Option(help="GPU counts, one row each, e.g. 1,2,4,8.")] = "1,2,4,8",
    gpu_gib: Annotated[float | None, typer.Option(help="Memory per GPU (default: the visible GPU's, else 80).")]
    = None,
    parallel: Annotated[str | None, typer.Option(help="ddp | fsdp (model.parallel).")] = None,
    sets: Annotated[list[str] | None, typer.Option("--set", help="KEY=VALUE config override, repeatable.")] = None,
    prompt_tokens: Annotated[int, typer.Option(help="A rollout prompt's tokens (the rollout's KV cache and "
                                                    "prompt pass).")] = 1024,
) -> None:
    """Print the memory per GPU of an experiment for each GPU count, whether it fits, and what would."""
    from gagpo_cli.plan import plan_command as run_plan

    run_plan(experiment, model, lora, gpus, gpu_gib, parallel, sets or [], prompt_tokens)


def _click_exception_types() -> tuple[type[BaseException], ...]:
    """Command-line parsing errors: typer's vendored click (typer >= 0.2x) and click itself."""
    import click
    from typer.exceptions import TyperException

    return (TyperException, click.exceptions.ClickException)


def main() -> None:
    """Console-script entry: run the app, turning user errors into one line and exit code 2."""
    try:
        with one_line_warnings():  # an option a library ignores: one `warning:` line, like an error
            code = app(standalone_mode=False)  # click returns an Exit's code instead of raising it here
    except UsageError as exc:  # libraries' ValueErrors on user input arrive as UsageError (errors.user_input)
        err.print(f"[red]error:[/red] {escape(' '.join(str(exc).split()))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        sys.exit(130)
    except _click_exception_types() as exc:  # bad or missing arguments, found while parsing: one line too
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        err.print(f"[red]error:[/red] {escape(' '.join(message.split()) + hint)}", highlight=False, soft_wrap=True)
        sys.exit(getattr(exc, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
