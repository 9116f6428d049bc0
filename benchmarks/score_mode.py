"""Cost of one score-mode step: the language model scores every admissible action.

States come from expert episodes on the embedded ALFWorld and WebShop (the prompt shows the
default two-step history). For each environment, with and without the admissible actions listed
in the prompt, it times:

- ``packed``: ``Policy.score_actions`` (one forward of the prompt, then all its candidates continue
  from the cached keys and values in ONE row under a 4D mask);
- ``rows``: the same with one row per candidate over repeated cache rows (``score_packing=False``,
  the layout for attention kernels that take no 4D mask);
- ``re-encode``: the naive way, one padded batch of prompt + candidate rows per step (the prompt
  is encoded again for every candidate), through the generate-mode log-prob path.

All are timed one step at a time (batch 1); ``packed`` and ``rows`` also over all the collected
states at once (batched over live episodes, as the rollout calls it). The scores of the methods
are checked to agree. Times are CPU seconds of this process (``time.process_time``: with one
thread, the work done, which a busy machine distorts less than wall time; with N threads it sums
them). Numbers are ratios on whatever machine runs it, not a test.

    python benchmarks/score_mode.py [--tiny] [--states 4] [--repeats 1] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from environments.alfworld import ALFWorldEnvironment
from environments.webshop import WebShopEnvironment
from gagpo_cli.agents import SEARCH_TEMPLATE
from gagpo_cli.config import ModelConfig
from gagpo_cli.train.policies.lm import Policy
from gagpo_cli.train.policies.scoring import ScoreInput

HISTORY = 2  # EnvConfig.history's default


def expert_states(env_name: str, count: int) -> list[ScoreInput]:
    """``count`` score inputs from expert episodes (test / valid_unseen tasks 0, 1, ...), in order.

    A step whose only admissible action is WebShop's search template is skipped (the free-text
    step is scored over the environment's query candidates when it offers them)."""
    env, split = (ALFWorldEnvironment(), "valid_unseen") if env_name == "alfworld" else (WebShopEnvironment(), "test")
    episode = env.new_episode()
    states: list[ScoreInput] = []
    task = 0
    while len(states) < count:
        reset = episode.reset(split, task)
        goal, observation, actions = reset.goal, reset.observation, reset.admissible_actions
        history: list[tuple[str, str]] = []
        for _ in range(50):
            if actions and not all(SEARCH_TEMPLATE.match(a) for a in actions):
                states.append(ScoreInput(env_name, goal, observation, list(history[-HISTORY:]), len(history),
                                         tuple(actions)))
            action = episode.expert_action()
            step = episode.step(action)
            history.append((observation, action))
            observation, actions = step.observation, step.admissible_actions
            if step.done or len(states) >= count:
                break
        task += 1
    return states


def reencode_scores(policy: Policy, inputs: list[ScoreInput]) -> list[torch.Tensor]:
    """Token-normalised candidate scores with the prompt re-encoded for every candidate (one batch per call)."""
    rows, owners = [], []
    for i, inp in enumerate(inputs):
        prompt, candidates = policy.score_tokens(inp)
        rows += [(list(prompt), list(c)) for c in candidates]
        owners += [i] * len(candidates)
    batch = policy.collate(rows)
    logprobs = policy.forward(batch).logprobs.sum(-1) / batch.response_mask.sum(-1)
    owner = torch.tensor(owners)
    return [logprobs[owner == i] for i in range(len(inputs))]


def cached_scores(policy: Policy, inputs: list[ScoreInput], packed: bool = True) -> list[torch.Tensor]:
    policy.score_packing = packed
    try:
        return policy.score_actions(inputs, norm="token").logits
    finally:
        policy.score_packing = True


def seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median CPU time of ``fn`` over ``repeats`` runs."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def load_policy(tiny: bool) -> Policy:
    if tiny:
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testkit"))
        from tiny_model import tiny_policy

        return tiny_policy()
    return Policy.load(ModelConfig(name="smollm2-135m-instruct", device="cpu"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the tiny random test model instead of SmolLM2-135M")
    parser.add_argument("--states", type=int, default=4, help="expert states per environment")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy(args.tiny)
    print(f"model: {'tiny random' if args.tiny else 'SmolLM2-135M-Instruct'}, {args.threads} thread(s), "
          f"dtype {next(policy.model.parameters()).dtype}, autocast {policy.autocast_dtype}")
    header = (f"{'env':9} {'actions':8} {'prompt tok':>10} {'cands':>6} {'cand tok':>8} | s/step: {'packed':>7} "
              f"{'rows':>7} {'re-encode':>9} {'re-enc/packed':>13} | batched s/step: {'packed':>7} {'rows':>7}")
    print(header)
    print("-" * len(header))
    listed_cost: dict[str, float] = {}
    with torch.no_grad():
        for env_name in ("alfworld", "webshop"):
            base = expert_states(env_name, args.states)
            for listed in (True, False):
                inputs = [ScoreInput(**{**inp.__dict__, "list_actions": listed}) for inp in base]
                tokens = [policy.score_tokens(inp) for inp in inputs]
                prompt_tok = statistics.mean(len(p) for p, _ in tokens)
                cands = statistics.mean(len(c) for _, c in tokens)
                cand_tok = statistics.mean(sum(len(x) for x in c) for _, c in tokens)
                cached_scores(policy, inputs[:1])  # warm-up
                one_packed = sum(seconds(lambda i=i: cached_scores(policy, [i]), args.repeats) for i in inputs)
                one_rows = sum(seconds(lambda i=i: cached_scores(policy, [i], False), args.repeats) for i in inputs)
                one_naive = 0.0
                for inp in inputs:
                    start = time.process_time()
                    slow = reencode_scores(policy, [inp])[0]
                    one_naive += time.process_time() - start
                    for packed in (True, False):  # the same scores (bf16 tolerance)
                        torch.testing.assert_close(cached_scores(policy, [inp], packed)[0], slow, atol=0.05, rtol=0.02)
                all_packed = seconds(lambda inputs=inputs: cached_scores(policy, inputs), args.repeats)
                all_rows = seconds(lambda inputs=inputs: cached_scores(policy, inputs, False), args.repeats)
                n = len(inputs)
                print(f"{env_name:9} {'listed' if listed else 'unlisted':8} {prompt_tok:10.0f} {cands:6.1f} "
                      f"{cand_tok:8.0f} | s/step: {one_packed / n:7.3f} {one_rows / n:7.3f} {one_naive / n:9.3f} "
                      f"{one_naive / one_packed:13.1f} | batched s/step: {all_packed / n:7.3f} {all_rows / n:7.3f}",
                      flush=True)
                one_cached = one_packed
                if listed:
                    listed_cost[env_name] = one_cached
                else:
                    print(f"{'':9} unlisted / listed cached cost per step: {one_cached / listed_cost[env_name]:.2f}")


if __name__ == "__main__":
    main()
