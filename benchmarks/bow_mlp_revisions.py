"""``bow-mlp`` at a git revision against the working tree, in one process, with a bitwise check.

The ``score_actions`` calls of a short ``lab-alfworld`` run (``--iterations``) are recorded (or read from
``--calls``, a pickle this script wrote with ``--save-calls``), then replayed alternately, call by call,
on a fresh ``FeaturisedPolicy`` of each revision (same seed, so the same weights): ``score_actions``
itself (deduplication, ``features``, forward, splitting), and for the update's calls a backward pass
through the scores and the state vectors. Scores, state vectors and every parameter's gradient must be
equal bitwise (``torch.equal``); the ``features`` dictionaries too.

    OMP_NUM_THREADS=1 python benchmarks/bow_mlp_revisions.py --rev HEAD [--iterations 6] [--repeat 4]

Prints one JSON line: seconds of each part for ``old`` (REV) and ``new`` (working tree), summed over the
calls, each call's fastest of ``--repeat`` replays; the ratios old / new; the equality checks.
``benchmarks/lab_revisions.py`` also times the ALFWorld engine and whole training iterations.
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_revisions import BOW_MLP, _split, load_revision, record_calls  # noqa: E402


def replay(modules: dict, calls: list[tuple], repeat: int) -> dict:
    """Time each revision's ``score_actions`` (of it, ``features``) and the backward pass on the recorded
    calls, ``repeat`` times on fresh policies: each part's seconds are summed over the calls, taking for
    each call the fastest of its replays (the machine may be busy). Check that both compute the same bits."""
    parts = ("features", "score_actions", "backward")
    fastest = {k: [dict.fromkeys(parts, float("inf")) for _ in calls] for k in modules}
    same = dict.fromkeys(("features", "scores", "states", "gradients"), True)
    order = random.Random(0)  # which revision goes first, per call (the calls come in patterns)
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)  # as the training loop sets it
    for n in range(repeat):  # each revision's policy made first in every other replay (memory layout)
        policies = {k: modules[k].FeaturisedPolicy(None, seed=0) for k in sorted(modules, reverse=n % 2 == 1)}
        spent = dict.fromkeys(modules, 0.0)
        for k, policy in policies.items():  # time ``features`` inside ``score_actions``
            policy.features = _timed(policy.features, spent, k)
        for c, (inputs, reference, grad) in enumerate(calls):
            out = {}
            for k in sorted(modules, reverse=order.random() < 0.5):
                spent[k] = 0.0
                out[k], seconds = _call(policies[k], inputs, reference, grad)
                seconds["features"] = spent[k]
                best = fastest[k][c]
                for part in parts:
                    best[part] = min(best[part], seconds[part])
            (f_old, s_old, st_old, g_old), (f_new, s_new, st_new, g_new) = out["old"], out["new"]
            same["features"] &= f_old.keys() == f_new.keys() and all(torch.equal(f_old[x], f_new[x]) for x in f_old)
            same["scores"] &= len(s_old) == len(s_new) and all(map(torch.equal, s_old, s_new))
            same["states"] &= torch.equal(st_old, st_new)
            same["gradients"] &= g_old is None or all(map(torch.equal, g_old, g_new))
        del policies
        gc.collect()
    seconds = {k: {part: sum(call[part] for call in per_call) for part in parts} for k, per_call in fastest.items()}
    for t in seconds.values():
        t["iteration"] = t["score_actions"] + t["backward"]
    return {"part": "bow-mlp", "calls": len(calls), "inputs": sum(len(c[0]) for c in calls), "repeat": repeat,
            **_split(seconds), "bitwise_equal": same}


def _call(policy, inputs: list, reference: bool, grad: bool) -> tuple[tuple, dict]:
    """((features, scores, states, gradients), seconds of score_actions and backward) of one recorded call."""
    began = time.perf_counter()
    with torch.set_grad_enabled(grad):
        scored = policy.score_actions(inputs, reference=reference, with_state=True)
    scored_at = time.perf_counter()
    grads = None
    if grad:
        weights = torch.linspace(-1, 1, sum(len(s) for s in scored.logits))
        ((torch.cat(scored.logits) * weights).sum() + scored.state.sum()).backward()
        grads = [p.grad.clone() for p in policy.model.parameters()]
        policy.model.zero_grad(set_to_none=True)
    seconds = {"score_actions": scored_at - began, "backward": time.perf_counter() - scored_at}
    feats = policy.features.__wrapped__(inputs)  # all cached by now: not timed
    return (feats, [s.detach() for s in scored.logits], scored.state.detach(), grads), seconds


def _timed(features, spent: dict, key: str):
    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return features(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - began
    timed.__wrapped__ = features
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="git revision to compare the working tree with")
    parser.add_argument("--iterations", type=int, default=6, help="lab-alfworld iterations recorded")
    parser.add_argument("--repeat", type=int, default=4, help="replays (each call's fastest is kept)")
    parser.add_argument("--calls", type=Path, help="replay the calls saved in this pickle instead of recording")
    parser.add_argument("--save-calls", type=Path, help="save the recorded calls to this pickle")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.calls:
            calls = pickle.loads(args.calls.read_bytes())
        else:
            calls = record_calls(args.iterations, folder)
            if args.save_calls:
                args.save_calls.write_bytes(pickle.dumps(calls))
        modules = {"old": load_revision(args.rev, BOW_MLP, "bow_mlp_old", folder),
                   "new": load_revision(None, BOW_MLP, "bow_mlp_new", folder)}
        print(json.dumps(replay(modules, calls, args.repeat)))


if __name__ == "__main__":
    main()
