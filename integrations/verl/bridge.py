"""verl's batch <-> gagpo's ``StepBatch``: one function verl's advantage registry can call.

verl's ``compute_advantage`` calls a registered estimator with ``token_level_rewards`` (bs, L),
``response_mask`` (bs, L), ``index`` (the ``uid`` of each row: its rollout group) and the algorithm
config; the other fields of the batch (``non_tensor_batch``, ``batch``) come as keywords when the caller
passes them, else from the ``DataProto`` that ``compute_advantage`` is processing (found on the call
stack by the identity of ``index`` / ``token_level_rewards``). Two layouts:

- **one row per step** (verl-agent's multi-turn rollout; ``traj_uid`` in ``non_tensor_batch``): a row
  is one environment step. Its trajectory is ``traj_uid``, its step index ``step_index`` (verl-agent
  does not record it: add ``batch.non_tensor_batch['step_index'] = np.full(batch_size, _step)`` to its
  rollout loop; without it the rows' order inside each trajectory is taken, which batch balancing
  breaks), its state key ``anchor_obs``, its environment reward ``rewards``, its validity
  ``is_action_valid`` (penalised by ``invalid_penalty`` under the estimator's ``penalty`` rule, as
  verl-agent's ``apply_invalid_action_penalty``). The advantage of a row goes to every response token.
- **one row per trajectory** (a plain verl multi-turn agent loop: no ``traj_uid``): the turns of a row
  are its runs of ``response_mask == 1`` (the model's tokens; the environment's or tool's tokens
  between them have mask 0). Turn t's reward is the sum of ``token_level_rewards`` from its first token
  to the next turn's (a reward placed on a turn's last token, or the final score on the last token);
  its state key is the token ids of what the model read before it: the prompt (``prompts`` under its
  ``attention_mask``) for the first turn, the mask-0 segment before it for the others (exact match on
  token ids is exact match on text under one tokenizer). The advantage of a turn goes to its tokens.

Estimator options come from ``algorithm.gagpo`` (e.g. ``+algorithm.gagpo.lam=0.9``); the bridge's own
keys there: ``invalid_penalty`` (0.0) and ``total_iterations`` (planpo). ``iteration`` is verl's
``meta_info['global_steps']`` when present. ``response_lengths`` are the rows' (turns') token counts;
``entropies`` come from a ``non_tensor_batch['entropies']`` per row where an estimator asks for them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from estimators import StepBatch, get_estimator
from estimators.base import Estimator

BRIDGE_KEYS = ("invalid_penalty", "total_iterations")
_SEARCH_DEPTH = 8  # frames above the estimator function searched for the DataProto in flight


def gagpo_options(config: Any) -> dict[str, Any]:
    """``algorithm.gagpo`` of verl's config (an OmegaConf node, a dataclass config or a dict) as plain
    Python values; empty when absent."""
    if config is None:
        return {}
    section = config.get("gagpo", None) if hasattr(config, "get") else getattr(config, "gagpo", None)
    if section is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(section):
            section = OmegaConf.to_container(section, resolve=True)
    except ImportError:
        pass
    return dict(section)


def _data_in_flight(index: Any, token_level_rewards: torch.Tensor) -> Any:
    """The ``DataProto`` whose ``uid`` array is ``index`` (or whose ``token_level_rewards`` is this
    tensor) among the locals of the frames that called the estimator."""
    frame = sys._getframe(2)
    for _ in range(_SEARCH_DEPTH):
        if frame is None:
            break
        for value in frame.f_locals.values():
            non_tensor = getattr(value, "non_tensor_batch", None)
            tensors = getattr(value, "batch", None)
            if not isinstance(non_tensor, Mapping) or tensors is None:
                continue
            if (index is not None and non_tensor.get("uid") is index) or (
                    "token_level_rewards" in tensors.keys()  # noqa: SIM118  (a TensorDict refuses `in`)
                    and tensors["token_level_rewards"] is token_level_rewards):
                return value
        frame = frame.f_back
    raise ValueError("gagpo's verl bridge: the batch's non-tensor fields were not passed and no DataProto holding "
                     "this batch was found on the call stack; call it with non_tensor_batch=data.non_tensor_batch")


def _runs(mask_row: np.ndarray) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the runs of 1 in a 0/1 row."""
    edges = np.diff(np.concatenate([[0], mask_row.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def _ids_key(ids: torch.Tensor) -> str:
    return "ids:" + ",".join(str(int(i)) for i in ids.tolist())


class _Rows:
    """The step rows of a verl batch: StepBatch columns plus, per step, the token span it owns."""

    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {k: [] for k in ("group_ids", "traj_ids", "step_index", "rewards",
                                                           "penalties", "state_keys", "response_lengths",
                                                           "entropies")}
        self.spans: list[tuple[int, int, int]] = []  # (batch row, first token, end token) of each step

    def add(self, span: tuple[int, int, int], **values: Any) -> None:
        self.spans.append(span)
        for key, value in values.items():
            self.cols[key].append(value)


def _per_step_rows(mask: np.ndarray, index: np.ndarray, nt: Mapping[str, Any], penalty: float) -> _Rows:
    if "rewards" not in nt:
        raise ValueError("gagpo's verl bridge: one row per step (traj_uid given) needs non_tensor_batch['rewards'], "
                         "each step's environment reward (verl-agent's rollout loop records it)")
    traj = np.asarray(nt["traj_uid"])
    if "step_index" in nt:
        step = np.asarray(nt["step_index"]).astype(np.int64)
    else:  # the rows' order inside each trajectory (valid before any reordering of the batch)
        step = np.zeros(len(traj), dtype=np.int64)
        seen: dict[Any, int] = {}
        for i, t in enumerate(traj.tolist()):
            step[i] = seen.get(t, 0)
            seen[t] = step[i] + 1
    states = nt.get("anchor_obs")
    valid = np.asarray(nt["is_action_valid"]).astype(bool) if "is_action_valid" in nt else np.ones(len(traj), bool)
    rows = _Rows()
    for i in range(len(traj)):
        tokens = np.flatnonzero(mask[i])
        first, end = (int(tokens[0]), int(tokens[-1]) + 1) if len(tokens) else (0, 0)
        rows.add((i, first, end), group_ids=index[i], traj_ids=traj[i], step_index=int(step[i]),
                 rewards=float(nt["rewards"][i]), penalties=penalty * float(not valid[i]),
                 state_keys=str(states[i]) if states is not None else "", response_lengths=int(mask[i].sum()),
                 entropies=float(nt["entropies"][i]) if "entropies" in nt else 0.0)
    return rows


def _per_trajectory_rows(mask: np.ndarray, rewards: np.ndarray, index: np.ndarray, tensors: Any) -> _Rows:
    keys = set(tensors.keys()) if tensors is not None else set()  # a TensorDict refuses `in`
    responses = tensors["responses"] if "responses" in keys else None
    prompts = tensors["prompts"] if "prompts" in keys else None
    if responses is None or prompts is None:
        raise ValueError("gagpo's verl bridge: one row per trajectory needs the batch's 'prompts' and 'responses' "
                         "(the state key of each turn is what the model read before it)")
    attention = tensors["attention_mask"][:, : prompts.shape[1]] if "attention_mask" in keys else None
    rows = _Rows()
    for i in range(mask.shape[0]):
        turns = _runs(mask[i])
        prompt = prompts[i][attention[i].bool()] if attention is not None else prompts[i]
        for t, (start, stop) in enumerate(turns):
            before = _ids_key(prompt) if t == 0 else _ids_key(responses[i, turns[t - 1][1]:start])
            until = turns[t + 1][0] if t + 1 < len(turns) else mask.shape[1]
            rows.add((i, start, stop), group_ids=index[i], traj_ids=i, step_index=t,
                     rewards=float(rewards[i, start:until].sum()), penalties=0.0, state_keys=before,
                     response_lengths=stop - start, entropies=0.0)
    return rows


def compute_advantages(estimator: Estimator, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                       index: Any, non_tensor_batch: Mapping[str, Any] | None, batch: Any = None,
                       meta_info: Mapping[str, Any] | None = None, *, invalid_penalty: float = 0.0,
                       total_iterations: int | None = None) -> tuple[torch.Tensor, StepBatch]:
    """Token-level advantages (bs, L) of verl's batch by ``estimator`` (module docstring), and the
    ``StepBatch`` it saw."""
    nt = non_tensor_batch or {}
    mask = response_mask.detach().cpu().numpy() > 0
    if index is None:
        index = nt.get("uid")
    if index is None:
        raise ValueError("gagpo's verl bridge needs the rollout group of every row: non_tensor_batch['uid']")
    index = np.asarray(index)
    if "traj_uid" in nt:
        rows = _per_step_rows(mask, index, nt, invalid_penalty)
    else:
        rows = _per_trajectory_rows(mask, token_level_rewards.detach().cpu().double().numpy(), index, batch)
    wants = set(estimator.requires)
    iteration = (meta_info or {}).get("global_steps")
    step_batch = StepBatch(
        group_ids=np.array(rows.cols["group_ids"], dtype=object),
        traj_ids=np.array(rows.cols["traj_ids"], dtype=object),
        step_index=np.array(rows.cols["step_index"], dtype=np.int64), rewards=np.array(rows.cols["rewards"]),
        terminated=np.zeros(len(rows.spans), dtype=bool), state_keys=np.array(rows.cols["state_keys"], dtype=object),
        penalties=np.array(rows.cols["penalties"]),
        response_lengths=np.array(rows.cols["response_lengths"]) if "response_lengths" in wants else None,
        entropies=np.array(rows.cols["entropies"]) if "entropies" in wants and "entropies" in nt else None,
        iteration=int(iteration) if "iteration" in wants and iteration is not None else None,
        total_iterations=int(total_iterations) if "total_iterations" in wants and total_iterations else None)
    advantages = estimator.compute(step_batch)
    out = torch.zeros(token_level_rewards.shape, dtype=torch.float32)
    for (i, first, end), value in zip(rows.spans, advantages.tolist(), strict=True):
        out[i, first:end] = value
    return out.to(token_level_rewards.device) * response_mask, step_batch


def advantage_function(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The function verl's registry holds for gagpo estimator ``name``: ``(advantages, returns)``, both
    the token-level advantages (as verl's outcome estimators return them)."""

    def compute(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None,
                config: Any = None, non_tensor_batch: Mapping[str, Any] | None = None, batch: Any = None,
                meta_info: Mapping[str, Any] | None = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if non_tensor_batch is None:
            data = _data_in_flight(index, token_level_rewards)
            non_tensor_batch, batch, meta_info = data.non_tensor_batch, data.batch, data.meta_info
        options = gagpo_options(config)
        bridge = {key: options.pop(key) for key in BRIDGE_KEYS if key in options}
        advantages, _ = compute_advantages(get_estimator(name, **options), token_level_rewards, response_mask, index,
                                           non_tensor_batch, batch, meta_info, **bridge)
        return advantages, advantages

    compute.__name__ = f"gagpo_{name.replace('-', '_')}_advantage"
    compute.__doc__ = f"gagpo's '{name}' estimator through the verl bridge (integrations.verl.bridge)."
    return compute
