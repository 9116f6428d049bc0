"""The ``bow-mlp`` scorer computed the straightforward way, as a reference for the factored one in
``gagpo_cli/train/policies/bow_mlp.py`` (its features: ``bow_features.py``): every input featurised on
its own, every candidate with its own bags of all its features, one MLP row per candidate on the
concatenation [e_s, e_a, e_s * e_a]. Same hashing, same parameters (it reads the policy's ``BowMLP``), so
its scores must equal the policy's up to float rounding. Also the naive baseline of ``benchmarks/lab.py``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch

from gagpo_cli.train.policies.bow_features import (
    _COUNT,
    _HS,
    _HX,
    _MASK,
    _SEEN,
    _START,
    EMBED_BUCKETS,
    HISTORY_SKELETONS,
    OBS_WORDS,
    _cross,
    _FeatureCache,
)
from gagpo_cli.train.policies.bow_mlp import BowMLP, FeaturisedPolicy
from gagpo_cli.train.policies.scoring import ScoreInput, ScoreOutput


def _bags(arrays: list[np.ndarray], buckets: int) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    offsets = np.zeros(len(arrays), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return torch.from_numpy(np.concatenate(arrays) & (buckets - 1)), torch.from_numpy(offsets)


def reference_features(cache: _FeatureCache, inputs: Sequence[ScoreInput]) -> dict[str, torch.Tensor]:
    """Per candidate: its static bag, and one row of all its memory and observation features (a
    (candidates, width) block per input, padded with bucket 0)."""
    static, act, state, dyn, owner = [], [], [], [], []
    for b, inp in enumerate(inputs):
        goal = cache.goal(inp.goal)
        obs = cache.observation(inp.observation)
        past = inp.past_actions if inp.past_actions else tuple(a for _, a in inp.history)
        taken = Counter(past)
        past_skel = np.array(sorted({cache.candidate(inp.goal, a).role for a in set(past)}) or [0], dtype=np.int64)
        recent = [cache.candidate(inp.goal, a).role for a in past[-HISTORY_SKELETONS:]]
        last = recent[-1] if recent else _START
        state.append(np.concatenate([goal.ids, obs.ids, _cross(_HS, np.array(recent or [0]))]))
        cands = [cache.candidate(inp.goal, t) for t in inp.candidates]
        skel = np.array([c.role for c in cands], dtype=np.int64)
        verb = np.array([c.verb for c in cands], dtype=np.int64)
        count = _COUNT[np.array([min(taken.get(t, 0), 3) for t in inp.candidates], dtype=np.int64)]
        seen = _SEEN[np.array([obs.words.issuperset(c.content) for c in cands], dtype=np.int64)]
        dyn.append(np.concatenate([
            count[:, None], _cross(skel, count)[:, None], _cross(skel, last)[:, None], _cross(verb, seen)[:, None],
            _cross(_cross(skel, _HX)[:, None], past_skel[None, :]), _cross(verb[:, None], obs.ids[None, :OBS_WORDS]),
        ], axis=1))
        static.extend(c.static_ids for c in cands)
        act.extend(c.deep_ids for c in cands)
        owner.extend([b] * len(cands))
    block = np.zeros((len(owner), max(d.shape[1] for d in dyn)), dtype=np.int64)
    row = 0
    for d in dyn:
        d = d & _MASK
        d[d == 0] = 1  # a real feature hashed to the padding bucket moves next door
        block[row:row + d.shape[0], : d.shape[1]] = d
        row += d.shape[0]
    lin_idx, lin_off = _bags(static, _MASK + 1)
    act_idx, act_off = _bags(act, EMBED_BUCKETS)
    state_idx, state_off = _bags(state, EMBED_BUCKETS)
    return {"lin_idx": lin_idx, "lin_off": lin_off, "act_idx": act_idx, "act_off": act_off,
            "state_idx": state_idx, "state_off": state_off, "dyn": torch.from_numpy(block),
            "owner": torch.tensor(owner, dtype=torch.long)}


def reference_forward(net: BowMLP, feats: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores of all candidates, state embeddings): sparse linear sum + MLP([e_s, e_a, e_s * e_a])."""
    lin = net.linear(feats["lin_idx"], feats["lin_off"]).squeeze(-1) + net.linear(feats["dyn"]).squeeze(-1)
    state = net.state_embed(feats["state_idx"], feats["state_off"])
    action = net.action_embed(feats["act_idx"], feats["act_off"])
    s = state[feats["owner"]]
    return lin + net.mlp(torch.cat([s, action, s * action], dim=-1)).squeeze(-1), state


class ReferencePolicy(FeaturisedPolicy):
    """A ``FeaturisedPolicy`` whose ``score_actions`` is the straightforward computation above, on
    ``policy``'s own weights (the same model object: training one trains the other)."""

    def __init__(self, policy: FeaturisedPolicy) -> None:
        self.__dict__.update(policy.__dict__)
        self._reference_cache = _FeatureCache()

    def score_actions(self, inputs: Sequence[ScoreInput], *, norm: str = "token", reference: bool = False,
                      with_state: bool = False) -> ScoreOutput:
        net = self.reference if reference else self.model
        scores, state = reference_forward(net, reference_features(self._reference_cache, inputs))
        sizes = [len(inp.candidates) for inp in inputs]
        return ScoreOutput(logits=list(torch.split(scores, sizes)), state=state if with_state else None)
