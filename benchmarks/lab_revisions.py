"""The lab's hot paths at two revisions of the repository, in one process: the featurised ``bow-mlp``
scorer (``gagpo_cli/train/policies/bow_mlp.py``) and the embedded ALFWorld engine
(``environments/alfworld/world.py``), each file loaded from ``git show REV:PATH`` next to the
working tree's copy, run on the same inputs alternately (call by call), so that a busy machine's load
falls on both alike. It also checks that the two revisions compute the same thing.

1. ``bow-mlp``: the ``score_actions`` calls of a short ``lab-alfworld`` run (``--iterations``, trained
   with the working tree's code) are recorded, then replayed on a fresh policy of each revision (same
   seed, so the same weights): deduplication, feature assembly (``features``), the network's forward,
   and for the update's calls a backward pass. Scores must be equal (bitwise is reported), gradients
   allclose.
2. ALFWorld: seeded random walks (``--walks`` games of each split, 60 commands each, one in ten
   invalid) on both ``World`` classes: admissible commands, feedback, validity and ``won`` must agree.
3. Training: ``--train-iterations`` iterations of the trainer's own loop (``benchmarks/lab.py``'s
   ``Variant``: rollout, estimator, update on one in-process pool), one policy per revision from the
   same seed, alternating iteration by iteration; before each, the pool's engine class is set to that
   revision's ``World``. Per revision: seconds per iteration split into scoring, environment, update,
   estimator; every other metric of the last iteration must be equal.

    OMP_NUM_THREADS=1 python benchmarks/lab_revisions.py --rev 3ee1280 [--iterations 12] [--walks 100]
        [--train-iterations 6]

Prints one JSON line per part: seconds per phase for ``old`` (REV) and ``new`` (working tree) and
the ratios old / new. Measured numbers are recorded in ``benchmarks/README.md`` (lab speed).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # benchmarks/estimators.py would shadow
BOW_MLP = "gagpo_cli/train/policies/bow_mlp.py"
WORLD = "environments/alfworld/world.py"


def load_revision(rev: str | None, path: str, name: str, folder: Path) -> ModuleType:
    """The module at ``path`` as of git revision ``rev`` (None: the working tree), under ``name``."""
    file = ROOT / path
    if rev is not None:
        file = folder / f"{name}.py"
        file.write_text(subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True,
                                       capture_output=True, text=True).stdout)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def record_calls(iterations: int, folder: Path) -> list[tuple]:
    """(inputs, reference, grad enabled) of every ``score_actions`` call of a short lab-alfworld run."""
    from gagpo_cli.app import main
    from gagpo_cli.train.policies import bow_mlp

    calls, original = [], bow_mlp.FeaturisedPolicy.score_actions

    def recording(self, inputs, **kwargs):
        calls.append((list(inputs), kwargs.get("reference", False), torch.is_grad_enabled()))
        return original(self, inputs, **kwargs)

    bow_mlp.FeaturisedPolicy.score_actions = recording
    argv = sys.argv
    sys.argv = ["gagpo", "train", "lab-alfworld", "--iterations", str(iterations), "--output-dir", str(folder),
                "--run-name", "recorded"]
    try:
        main()
    except SystemExit as stop:
        if stop.code:
            raise
    finally:
        sys.argv = argv
        bow_mlp.FeaturisedPolicy.score_actions = original
    return calls


def input_key(module: ModuleType, inp: object) -> tuple:
    """The dedup key of a score input: the revision's own ``_input_key`` (a one-file ``bow_mlp.py``), else
    the features module's (``bow_features.input_key``, since the file was split)."""
    own = getattr(module, "_input_key", None)
    if own is None:
        from gagpo_cli.train.policies.bow_features import input_key as own
    return own(inp)


def compare_scorers(modules: dict[str, ModuleType], calls: list[tuple]) -> dict:
    policies = {k: m.FeaturisedPolicy(None, seed=0) for k, m in modules.items()}
    seconds = {k: dict.fromkeys(("dedup", "features", "forward", "backward"), 0.0) for k in modules}
    bitwise, close = True, True
    gc.collect()
    gc.freeze()
    for n, (inputs, reference, grad) in enumerate(calls):
        out = {}
        for k in (list(modules) if n % 2 else list(modules)[::-1]):
            module, policy, t = modules[k], policies[k], seconds[k]
            began = time.perf_counter()
            rows, distinct = {}, []
            for inp in inputs:  # as score_actions deduplicates
                if rows.setdefault(input_key(module, inp), len(distinct)) == len(distinct):
                    distinct.append(inp)
            deduplicated = time.perf_counter()
            feats = policy.features(distinct, list(rows))
            featurised = time.perf_counter()
            with torch.set_grad_enabled(grad):
                scores, _ = (policy.reference if reference else policy.model)(feats)
            forward = time.perf_counter()
            grads = None
            if grad:
                (scores * torch.linspace(-1, 1, len(scores))).sum().backward()
                grads = [p.grad.clone() for p in policy.model.parameters()]
                policy.model.zero_grad(set_to_none=True)
            t["dedup"] += deduplicated - began
            t["features"] += featurised - deduplicated
            t["forward"] += forward - featurised
            t["backward"] += time.perf_counter() - forward
            out[k] = (scores.detach(), grads)
        (old, old_grads), (new, new_grads) = out["old"], out["new"]
        bitwise = bitwise and torch.equal(old, new)
        close = close and torch.allclose(old, new, rtol=1e-6, atol=1e-6) and (old_grads is None or all(
            torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(old_grads, new_grads, strict=True)))
    return {"part": "bow-mlp", "calls": len(calls), "inputs": sum(len(c[0]) for c in calls),
            **_split(seconds), "scores_bitwise_equal": bitwise, "scores_and_gradients_allclose": close}


def compare_worlds(modules: dict[str, ModuleType], walks: int) -> dict:
    from environments.alfworld import embedded

    seconds = {k: dict.fromkeys(("admissible", "act"), 0.0) for k in modules}
    rng, steps, agree = random.Random(0), 0, True
    for split in ("train", "valid_seen", "valid_unseen"):
        for task_id in range(walks):
            game = embedded.game(split, task_id)
            worlds = {k: m.World(game) for k, m in modules.items()}
            for _ in range(60):
                answers = {}
                for k, world in worlds.items():
                    began = time.perf_counter()
                    answers[k] = world.admissible()
                    seconds[k]["admissible"] += time.perf_counter() - began
                agree = agree and answers["old"] == answers["new"]
                command = rng.choice(answers["new"]) if rng.random() < 0.9 else "take nothing from nowhere"
                for k, world in worlds.items():
                    began = time.perf_counter()
                    answers[k] = (*world.act(command), world.won)
                    seconds[k]["act"] += time.perf_counter() - began
                agree = agree and answers["old"] == answers["new"]
                steps += 1
    return {"part": "alfworld", "steps": steps, **_split(seconds), "same_games": agree}


def compare_training(scorers: dict[str, ModuleType], worlds: dict[str, ModuleType], iterations: int) -> dict:
    from environments.alfworld import embedded
    from environments.base import score_mode_env_options
    from environments.pool import EnvPool
    from estimators import get_estimator
    from gagpo_cli.config import load_config
    from gagpo_cli.episodes import choose_split
    from gagpo_cli.train.recipe import seed_everything

    spec = importlib.util.spec_from_file_location("lab_benchmark", HERE / "lab.py")
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    cfg = load_config("lab-alfworld", [])
    cfg.env.options = score_mode_env_options(cfg.env.name, cfg.env.options)
    engine = embedded.World
    variants = {}
    with EnvPool(cfg.env.name, cfg.env.options, workers=0) as pool:
        train_tasks = pool.num_tasks(choose_split(pool.environment_info, cfg.env.train_split, "env.train_split"))
        for k, module in scorers.items():
            seed_everything(cfg.train.seed)
            variants[k] = lab.Variant(k, module.FeaturisedPolicy(cfg.model, seed=cfg.train.seed), cfg,
                                      get_estimator(cfg.estimator.name, **cfg.estimator.options))
        gc.collect()
        gc.freeze()
        try:
            for iteration in range(1, iterations + 1):
                for k in (list(variants) if iteration % 2 else list(variants)[::-1]):
                    embedded.World = worlds[k].World
                    variants[k].iterate(iteration, pool, train_tasks)
        finally:
            embedded.World = engine
    seconds = {k: {part: v.seconds[part] / iterations for part in (*lab.SPLIT, "iteration")}
               for k, v in variants.items()}
    old, new = ({m: value for m, value in variants[k].last.items() if not m.startswith(("timing/", "perf/"))}
                for k in ("old", "new"))
    return {"part": "training", "iterations": iterations, **_split(seconds), "same_metrics": old == new}


def _split(seconds: dict[str, dict[str, float]]) -> dict:
    total = {k: v.get("iteration", sum(v.values())) for k, v in seconds.items()}
    return {"seconds": {k: {**{p: round(s, 4) for p, s in v.items()}, "total": round(total[k], 4)}
                        for k, v in seconds.items()},
            "old/new": {**{p: round(seconds["old"][p] / max(seconds["new"][p], 1e-9), 2) for p in seconds["old"]},
                        "total": round(total["old"] / max(total["new"], 1e-9), 2)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="git revision to compare the working tree with")
    parser.add_argument("--iterations", type=int, default=12, help="lab-alfworld iterations recorded")
    parser.add_argument("--walks", type=int, default=100, help="random-walk games per ALFWorld split")
    parser.add_argument("--train-iterations", type=int, default=6, help="training iterations per revision")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        calls = record_calls(args.iterations, folder)
        scorers = {"old": load_revision(args.rev, BOW_MLP, "bow_mlp_old", folder),
                   "new": load_revision(None, BOW_MLP, "bow_mlp_new", folder)}
        print(json.dumps(compare_scorers(scorers, calls)))
        worlds = {"old": load_revision(args.rev, WORLD, "world_old", folder),
                  "new": load_revision(None, WORLD, "world_new", folder)}
        print(json.dumps(compare_worlds(worlds, args.walks)))
        print(json.dumps(compare_training(scorers, worlds, args.train_iterations)))


if __name__ == "__main__":
    main()
