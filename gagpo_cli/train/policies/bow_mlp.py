"""``bow-mlp``: a fast featurised policy that ranks admissible actions (score mode only, no download).

Each candidate action a in state s gets a score f(s, a); the policy is softmax(f / T) over the
admissible set (``scoring.py``). f is the sum of

* a sparse linear term over hashed features of (s, a), and
* a small MLP over [e_s, e_a, e_s * e_a], where e_s is the mean embedding of the state's hashed
  features and e_a that of the candidate's (e_s is also the state vector a ``ppo`` critic reads).

The features are ``bow_features.py``'s. Everything starts at zero output (uniform policy). The
reference policy for the KL term is a frozen copy made at construction. Weights are saved as
``model.safetensors``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from gagpo_cli.train.policies.bow_features import BUCKETS, EMBED_BUCKETS, BowFeatures, input_key
from gagpo_cli.train.policies.scoring import PackedScores, ScoreInput, ScoreOutput
from gagpo_cli.train.policies.training_mode import training

WEIGHTS_FILE = "model.safetensors"
EMBED = 32  # state / candidate embedding size (= hidden_size, what a critic reads)
HIDDEN = 64
CHUNK = 8192  # candidates per block of the per-candidate computation


class BowMLP(nn.Module):
    """The network: sparse linear scores + an MLP over state and candidate embeddings.

    ``forward`` takes the batch in factored form (``bow_features.BowFeatures``): bags that many
    candidates share (a (goal, candidate) pair's static features and embedding, an (action skeleton,
    past skeletons) or (verb, observation) cross) are summed once and gathered per candidate. The
    first MLP layer on [e_s, e_a, e_s * e_a] is applied as W_s e_s (once per state) + W_a e_a (once per
    pair) + W_sa (e_s * e_a) (per candidate), the same function as one layer on the concatenation."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.EmbeddingBag(BUCKETS, 1, mode="sum", padding_idx=0)  # bucket 0 = padding
        self.state_embed = nn.EmbeddingBag(EMBED_BUCKETS, EMBED, mode="mean")
        self.action_embed = nn.EmbeddingBag(EMBED_BUCKETS, EMBED, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(3 * EMBED, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
        nn.init.zeros_(self.linear.weight)
        nn.init.normal_(self.state_embed.weight, std=0.1)
        nn.init.normal_(self.action_embed.weight, std=0.1)
        nn.init.zeros_(self.mlp[2].weight)
        nn.init.zeros_(self.mlp[2].bias)

    def forward(self, feats: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores of all candidates (C,), state embeddings (B, EMBED))."""
        # pair / skeleton / verb bags (no index is the padding bucket 0: EmbeddingBag is much faster without)
        shared = F.embedding_bag(feats["bag_idx"], self.linear.weight, feats["bag_off"], mode="sum").squeeze(-1)
        weights = self.linear.weight.squeeze(-1)
        # state: mean embedding of its goal, observation and recent features, from one sum per part
        parts = F.embedding_bag(feats["state_idx"], self.state_embed.weight, feats["state_off"], mode="sum")
        state = (parts.index_select(0, feats["state_goal"]) + parts.index_select(0, feats["state_obs"])
                 + parts.index_select(0, feats["state_recent"])) / feats["state_size"][:, None]  # (B, E)
        action = self.action_embed(feats["act_idx"], feats["act_off"])  # (U, E), one per pair
        first, out = self.mlp[0], self.mlp[2]
        w_s, w_a, w_sa = first.weight.split(EMBED, dim=1)
        per_state, per_pair = state @ w_s.T, torch.addmm(first.bias, action, w_a.T)
        scores = []
        for lo in range(0, len(feats["owner"]), CHUNK):  # candidates by chunks: small temporaries are fast
            owner, pair = feats["owner"][lo:lo + CHUNK], feats["pair"][lo:lo + CHUNK]
            lin = (shared[feats["pair_bag"][lo:lo + CHUNK]] + shared[feats["past_bag"][lo:lo + CHUNK]]
                   + shared[feats["obs_bag"][lo:lo + CHUNK]]
                   + weights[feats["own"][lo:lo + CHUNK]].sum(-1))  # own features: never the padding bucket
            both = state.index_select(0, owner) * action.index_select(0, pair)
            h = torch.addmm(per_state.index_select(0, owner) + per_pair.index_select(0, pair), both, w_sa.T)
            scores.append(lin + out(torch.relu(h)).squeeze(-1))
        return torch.cat(scores), state


class FeaturisedPolicy:
    """The ``bow-mlp`` policy: an ``ActionScorer`` with the trainer's Policy-like surface."""

    action_modes = ("score",)
    hidden_size = EMBED
    label = "featurised policy bow-mlp"  # CPU, no download, not a transformers model (kinds.POLICY_FACTS)
    description = "a bag-of-words MLP that ranks the admissible actions (CPU, no download)"

    def __init__(self, cfg: Any = None, *, seed: int = 0) -> None:
        self.cfg = cfg
        self.device = torch.device("cpu")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = BowMLP()
        self.reference = copy.deepcopy(self.model).eval()
        for p in self.reference.parameters():
            p.requires_grad_(False)
        self.features = BowFeatures()  # the hashed features, cached across batches

    @classmethod
    def load(cls, cfg: Any, *, seed: int = 0) -> FeaturisedPolicy:
        return cls(cfg, seed=seed)

    @classmethod
    def device_for(cls, cfg: Any) -> torch.device:
        """Where it runs, before loading: always the CPU."""
        return torch.device("cpu")

    # ------------------------------------------------------------------------------ ActionScorer

    def score_actions(self, inputs: Sequence[ScoreInput], *, norm: str = "token", reference: bool = False,
                      with_state: bool = False) -> ScoreOutput:
        """One score per candidate (``norm`` has no meaning here: candidates are not token sequences).
        Equal inputs (the K rollouts of a group share their first states) are scored once; their
        outputs are the same tensor."""
        if not inputs:
            return ScoreOutput(logits=[], state=torch.zeros((0, EMBED)) if with_state else None)
        if any(not inp.candidates for inp in inputs):
            raise ValueError("score_actions: every input needs at least one candidate")
        rows: dict[tuple, int] = {}
        distinct: list[ScoreInput] = []
        inverse = []
        for inp in inputs:
            key = input_key(inp)
            row = rows.setdefault(key, len(distinct))
            if row == len(distinct):
                distinct.append(inp)
            inverse.append(row)
        net = self.reference if reference else self.model
        scores, state = net(self.features(distinct, list(rows)))
        rows_of = torch.tensor(inverse)
        if with_state and len(distinct) < len(inputs):
            state = state[rows_of]
        sizes = torch.tensor([len(inp.candidates) for inp in distinct])
        return ScoreOutput(packed=PackedScores(scores, sizes, rows_of), state=state if with_state else None)

    def score_cost(self, inp: ScoreInput) -> int:
        """Units one input costs in a micro-batch: its number of candidates."""
        return max(len(inp.candidates), 1)

    # ------------------------------------------------------------------------------ Policy-like surface

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def train_mode(self) -> contextlib.AbstractContextManager[None]:
        return training(self.model)

    def save(self, directory: Path) -> None:
        """Write the weights as ``model.safetensors`` into ``directory`` (replaced atomically)."""
        from safetensors.torch import save_model

        from gagpo_core.atomic import atomic_write_dir

        atomic_write_dir(directory, lambda tmp: save_model(self.model, str(tmp / WEIGHTS_FILE)))

    def load_weights(self, directory: Path) -> None:
        """Load weights written by ``save``; a damaged file is a ``weight_files.DamagedWeightsError``."""
        from safetensors.torch import load_model

        from gagpo_cli.weight_files import read_weights

        path = Path(directory) / WEIGHTS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no bow-mlp weights at {path}")
        read_weights(path, lambda file: load_model(self.model, file))
