"""Rollout generation throughput per engine, against one-prompt-at-a-time transformers generation,
on the same prompts in the same run; and where an iteration's time goes.

Prompts are real first-turn agent prompts: ``--prompts`` WebShop (embedded) task instances rendered by
``gagpo_cli.train.prompts.render_prompt`` through the policy's chat template. Each engine answers
all of them in one batched call (temperature 1.0, seeded, ``--max-new-tokens``); the baseline
calls ``Policy.generate`` with one prompt at a time. Throughput = generated tokens / wall seconds
(EOS included; answers may stop early, so each engine's own token count is used). Each engine is
warmed up first (vLLM compiles/allocates on its first call). Target (issue): >= 5x for the best
engine on this CPU.

With ``--iteration`` (default on), one training iteration of a small WebShop GAGPO run per engine
(``experiments/quickstart-webshop.yaml`` settings in generate mode, evaluation off) reports the share
of the iteration spent in rollout, estimator and update (``timing/*`` of its metrics line).

    python benchmarks/rollout.py [--engines hf,vllm] [--prompts 16] [--max-new-tokens 48] [--no-iteration]
    ~/.venvs/gagpo-vllm/bin/python benchmarks/rollout.py      # with vLLM (bash scripts/setup_vllm.sh)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path, and its estimators.py would shadow the package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402

from gagpo_cli.config import ModelConfig, load_config  # noqa: E402
from gagpo_cli.train.acting.engines import build_engine, vllm_problem  # noqa: E402
from gagpo_cli.train.policies.lm import Policy  # noqa: E402
from gagpo_cli.train.prompts import render_prompt  # noqa: E402
from gagpo_core.atomic import atomic_write_json  # noqa: E402


def webshop_prompts(policy: Policy, n: int) -> list[list[int]]:
    """First-turn prompts of ``n`` WebShop task instances (train split), as token ids."""
    from environments.pool import EnvPool
    from gagpo_cli.agents import SlotView

    with EnvPool("webshop", {}, workers=0) as pool:
        resets = pool.reset([("train", i, i) for i in range(n)])
    views = [SlotView.start(i, r) for i, r in enumerate(resets)]
    return [policy.chat_prompt(render_prompt("webshop", goal=v.goal, observation=v.observation,
                                             admissible_actions=v.admissible_actions, history=[], step_count=0))
            for v in views]


def timed(fn: Any) -> tuple[Any, float]:
    began = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - began


def one_at_a_time(policy: Policy, prompts: list[list[int]], max_new_tokens: int) -> dict[str, float]:
    generator = torch.Generator().manual_seed(0)
    policy.generate(prompts[:1], temperature=1.0, max_new_tokens=4, generator=generator)  # warm-up
    gens, seconds = timed(lambda: [policy.generate([p], temperature=1.0, max_new_tokens=max_new_tokens,
                                                   generator=generator)[0] for p in prompts])
    tokens = sum(len(g.response_ids) for g in gens)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def batched(engine: Any, prompts: list[list[int]], max_new_tokens: int) -> dict[str, float]:
    generator = torch.Generator().manual_seed(0)
    engine.generate(prompts[:2], temperature=1.0, max_new_tokens=4, generator=generator)  # warm-up
    gens, seconds = timed(lambda: engine.generate(prompts, temperature=1.0, max_new_tokens=max_new_tokens,
                                                  generator=generator))
    tokens = sum(len(g.response_ids) for g in gens)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def iteration_shares(engine: str, model: str) -> dict[str, float]:
    """One quickstart-sized training iteration with ``engine``; seconds and shares of its phases."""
    from gagpo_cli.train.recipe import train
    from gagpo_cli.train.records import read_metrics

    with tempfile.TemporaryDirectory(prefix="gagpo-bench-") as out:
        overrides = [f"model.name={model}", f"rollout.engine={engine}", "train.iterations=1",
                     "rollout.action_mode=generate",  # engines generate; score mode has none
                     "train.eval_every=0", "train.eval_episodes=0", f"logging.output_dir={out}"]
        cfg = load_config("quickstart-webshop", overrides)
        line = read_metrics(train(cfg))[-1]
    total = line["timing/iteration_s"]
    phases = {"rollout": line["timing/rollout_s"], "estimator": line["timing/estimate_s"],
              "update": line["timing/update_s"]}
    return {"iteration_s": total, **{f"{k}_s": v for k, v in phases.items()},
            **{f"{k}_share": v / total for k, v in phases.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--engines", default=None, help="comma-separated (default: hf, and vllm where it imports)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--iteration", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    engines = args.engines.split(",") if args.engines else ["hf"] + ([] if vllm_problem() else ["vllm"])

    cfg = ModelConfig(name=args.model)
    policy = Policy.load(cfg)
    prompts = webshop_prompts(policy, args.prompts)
    print(f"{len(prompts)} WebShop prompts ({sum(map(len, prompts)) / len(prompts):.0f} tokens on average), "
          f"up to {args.max_new_tokens} new tokens each, temperature 1.0, {torch.get_num_threads()} torch threads")
    results: dict[str, Any] = {"prompts": len(prompts), "max_new_tokens": args.max_new_tokens}
    results["hf-one-at-a-time"] = base = one_at_a_time(policy, prompts, args.max_new_tokens)
    print(f"{'hf, one prompt at a time':28s} {base['tokens_per_s']:8.1f} tokens/s "
          f"({base['tokens']} tokens in {base['seconds']:.1f}s)")
    for name in engines:
        engine = build_engine(name, policy, args.model)
        try:
            r = batched(engine, prompts, args.max_new_tokens)
        finally:
            engine.close()
        r["speedup"] = r["tokens_per_s"] / base["tokens_per_s"]
        results[name] = r
        print(f"{name + ', batched':28s} {r['tokens_per_s']:8.1f} tokens/s ({r['tokens']} tokens in "
              f"{r['seconds']:.1f}s): {r['speedup']:.1f}x")
    if args.iteration:
        for name in engines:
            shares = iteration_shares(name, args.model)
            results[f"iteration-{name}"] = shares
            print(f"one iteration with {name}: {shares['iteration_s']:.1f}s = rollout {shares['rollout_share']:.0%}, "
                  f"estimator {shares['estimator_share']:.1%}, update {shares['update_share']:.0%}")
    if args.json:
        atomic_write_json(args.json, results)
        print(f"wrote {args.json}")
    else:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
