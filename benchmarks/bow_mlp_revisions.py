"""``bow-mlp`` at a git revision against the working tree, in one process, with a bitwise check.

The ``score_actions`` calls of a short ``lab-alfworld`` run (``--iterations``) are recorded (or read from
``--calls``, a pickle this script wrote with ``--save-calls``), then replayed alternately, call by call,
on a fresh ``FeaturisedPolicy`` of each revision (same seed, so the same weights): ``score_actions``
itself (deduplication, ``features``, forward, splitting), and for the update's calls a backward pass
through the scores and the state vectors. Scores, state vectors and every parameter's gradient must be
equal bitwise (``torch.equal``); the ``features`` dictionaries too.

    OMP_NUM_THREADS=1 python benchmarks/bow_mlp_revisions.py --rev HEAD [--iterations 6]

Prints one JSON line: seconds of each part for ``old`` (REV) and ``new`` (working tree), the ratios
old / new, and the equality checks. ``benchmarks/lab_revisions.py`` also times the ALFWorld engine and
whole training iterations.
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_revisions import BOW_MLP, _split, load_revision, record_calls  # noqa: E402


def replay(modules: dict, calls: list[tuple]) -> dict:
    """Time each revision's ``score_actions`` (of it, ``features``) and the backward pass on the recorded
    calls; check that both compute the same bits."""
    policies = {k: m.FeaturisedPolicy(None, seed=0) for k, m in modules.items()}
    seconds = {k: dict.fromkeys(("features", "score_actions", "backward"), 0.0) for k in modules}
    same = dict.fromkeys(("features", "scores", "states", "gradients"), True)
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)  # as the training loop sets it
    for k, policy in policies.items():  # time ``features`` inside ``score_actions``
        policy.features = _timed(policy.features, seconds[k])
    for n, (inputs, reference, grad) in enumerate(calls):
        out = {}
        for k in (list(modules) if n % 2 else list(modules)[::-1]):
            policy, t = policies[k], seconds[k]
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
            t["score_actions"] += scored_at - began
            t["backward"] += time.perf_counter() - scored_at
            feats = policy.features.__wrapped__(inputs)  # all cached by now: not timed
            out[k] = (feats, [s.detach() for s in scored.logits], scored.state.detach(), grads)
        (f_old, s_old, st_old, g_old), (f_new, s_new, st_new, g_new) = out["old"], out["new"]
        same["features"] &= f_old.keys() == f_new.keys() and all(torch.equal(f_old[x], f_new[x]) for x in f_old)
        same["scores"] &= len(s_old) == len(s_new) and all(map(torch.equal, s_old, s_new))
        same["states"] &= torch.equal(st_old, st_new)
        same["gradients"] &= g_old is None or all(map(torch.equal, g_old, g_new))
    for t in seconds.values():
        t["iteration"] = t["score_actions"] + t["backward"]
    return {"part": "bow-mlp", "calls": len(calls), "inputs": sum(len(c[0]) for c in calls), **_split(seconds),
            "bitwise_equal": same}


def _timed(features, seconds: dict):
    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return features(*args, **kwargs)
        finally:
            seconds["features"] += time.perf_counter() - began
    timed.__wrapped__ = features
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="git revision to compare the working tree with")
    parser.add_argument("--iterations", type=int, default=6, help="lab-alfworld iterations recorded")
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
        print(json.dumps(replay(modules, calls)))


if __name__ == "__main__":
    main()
