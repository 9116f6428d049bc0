"""The quickstart's evaluation and update at a git revision against the working tree, in one run: time
and peak memory of each phase, each measured in a fresh process.

1. Recording (working tree, this process): the experiment's greedy evaluation of ``--eval-episodes``
   episodes with every ``score_actions`` call's inputs kept; every input also becomes an update
   sample (choice and advantage drawn with a fixed seed: an update's cost does not depend on their
   values; 16 episodes make as many rows as the old quickstart's 4 x 4 training batch). Written to a
   JSON file.
2. ``git archive REV`` is unpacked to a temporary folder.
3. Per round, per phase, per revision (alternating, so a busy machine's load falls on both): a child
   process with that tree first on ``sys.path`` builds the experiment's policy (same seed, same
   weights) and replays the phase:
   - ``evaluation``: the recorded ``score_actions`` calls, no gradients;
   - ``update``: one ``ScoreUpdater.update`` (score mode) on the recorded samples, the experiment's
     ``optim`` settings;
   - ``generate-update``: one generate-mode update on ``--generate-rows`` rows of random token ids
     (``--prompt-tokens`` + ``--response-tokens`` each, 8192-token micro-batches): where the
     response tokens' log-probs over the vocabulary dominate.
   A child resets its peak resident memory (``/proc/self/clear_refs``) after loading the model and
   reports the phase's wall seconds, CPU seconds and the peak (VmHWM) during the phase, plus the
   resident memory before it. Evaluation scores must agree between revisions (printed).

    python benchmarks/quickstart_phases.py --rev ae033a1 [--experiment quickstart] [--eval-episodes 8]
        [--rounds 2] [--threads 2] [--phases evaluation,update,generate-update] [--recorded FILE]

Prints one JSON line per measurement, then per phase the medians and the ratios old / new. Linux
only (``/proc``). Measured numbers are in ``benchmarks/README.md`` (quickstart).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # benchmarks/estimators.py would shadow
PHASES = ("evaluation", "update", "generate-update")


# ---------------------------------------------------------------------------- recording (working tree)


def record(experiment: str, eval_episodes: int, out: Path) -> None:
    """The evaluation's ``score_actions`` inputs and the update samples made of them, as JSON."""
    import torch

    from environments.pool import EnvPool
    from gagpo_cli.config import load_config
    from gagpo_cli.episodes import choose_split
    from gagpo_cli.train.acting.modes import get_action_mode
    from gagpo_cli.train.acting.score_rollout import ScoringEngine
    from gagpo_cli.train.evaluation import play_evaluation
    from gagpo_cli.train.policies.kinds import load_policy

    cfg = load_config(experiment)
    cfg.train.eval_episodes = eval_episodes
    cfg.env.options = get_action_mode("score").env_options(cfg.env.name, cfg.env.options)
    policy = load_policy(cfg.model, seed=cfg.train.seed)
    calls: list[list[dict]] = []
    scorer = policy.score_actions

    def recording(inputs, **kwargs):
        calls.append([_plain(inp) for inp in inputs])
        return scorer(inputs, **kwargs)

    policy.score_actions = recording
    with EnvPool(cfg.env.name, cfg.env.options) as pool:
        split = choose_split(pool.environment_info, cfg.env.eval_split, "env.eval_split")
        play_evaluation(cfg, ScoringEngine(policy), pool, split)
    gen = torch.Generator().manual_seed(0)
    samples = [{"input": inp, "choice": int(torch.randint(len(inp["candidates"]), (1,), generator=gen)),
                "advantage": float(torch.randn(1, generator=gen))} for call in calls for inp in call]
    out.write_text(json.dumps({"experiment": str(experiment), "calls": calls, "samples": samples}))
    print(json.dumps({"recorded": {"evaluation_calls": len(calls), "scored_inputs": sum(map(len, calls)),
                                   "update_samples": len(samples)}}), flush=True)


def _plain(inp) -> dict:
    return {"env_name": inp.env_name, "goal": inp.goal, "observation": inp.observation,
            "history": [list(h) for h in inp.history], "step_count": inp.step_count,
            "candidates": list(inp.candidates), "list_actions": inp.list_actions}


# ---------------------------------------------------------------------------- one phase (child process)


def child(phase: str, data_file: Path, threads: int, generate: tuple[int, int, int]) -> None:
    """Replay ``phase`` with whatever ``gagpo_cli`` is first on ``sys.path``; print one JSON line."""
    import torch

    from estimators import get_estimator
    from gagpo_cli.config import load_config
    from gagpo_cli.train.acting.modes import get_action_mode
    from gagpo_cli.train.policies.kinds import load_policy
    from gagpo_cli.train.policies.scoring import ScoreInput

    torch.set_num_threads(threads)
    data = json.loads(data_file.read_text())
    cfg = load_config(data["experiment"])
    policy = load_policy(cfg.model, seed=cfg.train.seed)
    estimator = get_estimator(cfg.estimator.name, **cfg.estimator.options)

    def score_input(d: dict) -> ScoreInput:
        return ScoreInput(d["env_name"], d["goal"], d["observation"], [tuple(h) for h in d["history"]],
                          d["step_count"], tuple(d["candidates"]), list_actions=d["list_actions"])

    if phase == "evaluation":
        work = [[score_input(d) for d in call] for call in data["calls"]]

        def run() -> list[float]:
            with torch.no_grad():
                return [float(x) for call in work
                        for row in policy.score_actions(call, norm=cfg.rollout.score_norm).logits for x in row]
    elif phase == "update":
        from gagpo_cli.train.learning.score_update import ScoreSample

        updater = get_action_mode("score").updater(policy, estimator, cfg, None)
        samples = [ScoreSample(score_input(s["input"]), s["choice"], advantage=s["advantage"])
                   for s in data["samples"]]

        def run() -> list[float]:
            metrics = updater.update(samples)
            return [metrics["actor/pg_loss"]]
    else:
        from gagpo_cli.train.learning.generate_update import GenerateSample

        rows, prompt, response = generate
        cfg.optim.token_budget = 8192
        updater = get_action_mode("generate").updater(policy, estimator, cfg, None)
        gen = torch.Generator().manual_seed(0)
        vocab = policy.base_model.config.vocab_size
        samples = [GenerateSample(torch.randint(100, vocab, (prompt,), generator=gen).tolist(),
                                  torch.randint(100, vocab, (response,), generator=gen).tolist(),
                                  advantage=float(torch.randn(1, generator=gen))) for _ in range(rows)]

        def run() -> list[float]:
            metrics = updater.update(samples)
            return [metrics["actor/pg_loss"]]

    rss_before = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    values = run()
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - start
    print(json.dumps({"wall_s": wall, "cpu_s": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
                      "peak_mb": _status_kb("VmHWM") / 1024, "rss_before_mb": rss_before / 1024,
                      "values": values}))


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


# ---------------------------------------------------------------------------- the comparison


def export_revision(rev: str, folder: Path) -> Path:
    """The tree of ``rev`` unpacked into ``folder``."""
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def run_child(tree: Path, phase: str, data: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(args.threads)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", phase, "--data", str(data),
                          "--threads", str(args.threads), "--generate-rows", str(args.generate_rows),
                          "--prompt-tokens", str(args.prompt_tokens), "--response-tokens", str(args.response_tokens)],
                         cwd=tree, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="ae033a1", help="the revision to compare with (today's code: ae033a1)")
    parser.add_argument("--experiment", default="quickstart")
    parser.add_argument("--eval-episodes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--generate-rows", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=400)
    parser.add_argument("--response-tokens", type=int, default=200)
    parser.add_argument("--recorded", type=Path,
                        help="keep the recording in this JSON file; when it exists, replay it instead of recording")
    parser.add_argument("--child", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.data, args.threads, (args.generate_rows, args.prompt_tokens, args.response_tokens))
        return
    phases = [p for p in args.phases.split(",") if p]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"old": export_revision(args.rev, Path(tmp) / "old"), "new": ROOT}
        data = (args.recorded or Path(tmp) / "recorded.json").resolve()
        if not data.is_file():
            record(args.experiment, args.eval_episodes, data)
        results: dict[tuple[str, str], list[dict]] = {}
        for _ in range(args.rounds):
            for phase in phases:
                for name, tree in trees.items():
                    got = run_child(tree, phase, data, args)
                    results.setdefault((phase, name), []).append(got)
                    print(json.dumps({"phase": phase, "revision": args.rev if name == "old" else "working tree",
                                      "load": round(os.getloadavg()[0], 2),
                                      **{k: v for k, v in got.items() if k != "values"}}), flush=True)
        for phase in phases:
            old, new = results[(phase, "old")], results[(phase, "new")]

            def median(runs: list[dict], key: str) -> float:
                return statistics.median(r[key] for r in runs)

            gap = max(abs(a - b) for a, b in zip(old[0]["values"], new[0]["values"], strict=True))
            print(json.dumps({"phase": phase, **{f"{k}_old_over_new": round(median(old, k) / median(new, k), 2)
                                                  for k in ("wall_s", "cpu_s", "peak_mb")},
                              "peak_mb_old": round(median(old, "peak_mb")),
                              "peak_mb_new": round(median(new, "peak_mb")),
                              "largest_value_difference": gap}))


if __name__ == "__main__":
    main()
