"""gagpo's estimators inside verl: real verl's ``compute_advantage`` through the bridge
(``integrations.verl``) equals our estimators on the same steps, and the GiGPO row equals verl-agent's
own ``core_gigpo``. The numbers were made once with the real packages by
``tests/fixtures/verl_bridge/make_fixture.py`` (its docstring says how); this test rebuilds the same
batches from ``cases.json`` and needs neither verl nor verl-agent.

verl works in float32: the tolerance is 1e-5 on advantages of order 1 (the worst differences measured
are printed with ``pytest -s``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from estimators import StepBatch, get_estimator
from integrations.verl.bridge import BRIDGE_KEYS, advantage_function

CASES = json.loads((Path(__file__).parents[1] / "fixtures" / "verl_bridge" / "cases.json").read_text())
TOL = 1e-5


def _gagpo_name(verl_name: str) -> str:
    return verl_name.removeprefix("gagpo.")


def _estimator(case: dict):
    options = {k: v for k, v in case["options"].items() if k not in BRIDGE_KEYS}
    return get_estimator(_gagpo_name(case["verl_name"]), **options)


def _per_step_inputs() -> tuple[list[dict], list[int], list[int]]:
    rows, order = CASES["per_step"]["rows"], CASES["per_step"]["order"]
    lengths = [2 + (i * 7) % 4 for i in range(len(rows))]  # as the script made them
    return [rows[i] for i in order], [lengths[i] for i in order], order


def _our_per_step(case: dict) -> np.ndarray:
    """Our estimator on the verl-agent batch's steps, each row's advantage on its response tokens."""
    rows, lengths, order = _per_step_inputs()
    estimator = _estimator(case)
    wants = set(estimator.requires)
    batch = StepBatch(group_ids=[r["group"] for r in rows], traj_ids=[r["traj"] for r in rows],
                      step_index=[r["step"] for r in rows], rewards=[r["reward"] for r in rows],
                      terminated=[False] * len(rows), state_keys=[r["anchor"] for r in rows],
                      penalties=[case["options"].get("invalid_penalty", 0.0) * (not r["valid"]) for r in rows],
                      response_lengths=lengths if "response_lengths" in wants else None,
                      entropies=[0.5 + 0.1 * (i % 7) for i in order] if "entropies" in wants else None,
                      iteration=3 if "iteration" in wants else None,
                      total_iterations=case["options"].get("total_iterations") if "total_iterations" in wants else None)
    adv = estimator.compute(batch)
    out = np.zeros((len(rows), max(lengths)))
    for i, (value, length) in enumerate(zip(adv, lengths, strict=True)):
        out[i, :length] = value
    return out


def _turns(mask: list[int]) -> list[tuple[int, int]]:
    runs, start = [], None
    for k, m in enumerate([*mask, 0]):
        if m and start is None:
            start = k
        elif not m and start is not None:
            runs.append((start, k))
            start = None
    return runs


def _our_per_trajectory(case: dict) -> np.ndarray:
    """Our estimator on a plain verl batch's turns (a turn: a run of model tokens; its state: what the
    model read before it), each turn's advantage on its tokens."""
    rows = [CASES["per_trajectory"]["rows"][i] for i in CASES["per_trajectory"]["order"]]
    steps = []  # (row, start, stop, group, step, reward, state)
    for i, r in enumerate(rows):
        turns = _turns(r["mask"])
        for t, (start, stop) in enumerate(turns):
            until = turns[t + 1][0] if t + 1 < len(turns) else len(r["mask"])
            state = "prompt" if t == 0 else str(r["tokens"][turns[t - 1][1]:start])
            steps.append((i, start, stop, r["group"], t, sum(r["rewards"][start:until]), state))
    estimator = _estimator(case)
    wants = set(estimator.requires)
    batch = StepBatch(group_ids=[s[3] for s in steps], traj_ids=[s[0] for s in steps], step_index=[s[4] for s in steps],
                      rewards=[s[5] for s in steps], terminated=[False] * len(steps), state_keys=[s[6] for s in steps],
                      response_lengths=[s[2] - s[1] for s in steps] if "response_lengths" in wants else None,
                      iteration=3 if "iteration" in wants else None,
                      total_iterations=case["options"].get("total_iterations") if "total_iterations" in wants else None)
    adv = estimator.compute(batch)
    out = np.zeros((len(rows), max(len(r["mask"]) for r in rows)))
    for (i, start, stop, *_), value in zip(steps, adv, strict=True):
        out[i, start:stop] = value
    return out


def _verl_inputs(layout: str) -> dict:
    """The tensors and fields the bridge gets from verl for ``layout``, rebuilt from the fixture."""
    prompt = CASES["prompt"]
    if layout == "per_step":
        rows, lengths, order = _per_step_inputs()
        n, width = len(rows), max(lengths)
        mask = torch.zeros(n, width)
        for i, length in enumerate(lengths):
            mask[i, :length] = 1
        nt = {"uid": np.array([r["group"] for r in rows], dtype=object),
              "traj_uid": np.array([r["traj"] for r in rows], dtype=object),
              "anchor_obs": np.array([r["anchor"] for r in rows], dtype=object),
              "rewards": np.array([r["reward"] for r in rows], dtype=object),
              "is_action_valid": np.array([r["valid"] for r in rows], dtype=object),
              "step_index": np.array([r["step"] for r in rows], dtype=object),
              "entropies": np.array([0.5 + 0.1 * (i % 7) for i in order], dtype=object)}
        return {"token_level_rewards": torch.zeros(n, width), "response_mask": mask, "non_tensor_batch": nt,
                "batch": {"prompts": torch.tensor([prompt] * n), "responses": (mask * 5).long()}}
    rows = [CASES["per_trajectory"]["rows"][i] for i in CASES["per_trajectory"]["order"]]
    n, width = len(rows), max(len(r["tokens"]) for r in rows)
    responses, mask, rewards = torch.zeros(n, width, dtype=torch.long), torch.zeros(n, width), torch.zeros(n, width)
    for i, r in enumerate(rows):
        responses[i, :len(r["tokens"])] = torch.tensor(r["tokens"])
        mask[i, :len(r["mask"])] = torch.tensor(r["mask"], dtype=torch.float32)
        rewards[i, :len(r["rewards"])] = torch.tensor(r["rewards"])
    attention = torch.cat([torch.ones(n, len(prompt)), (responses > 0).float()], dim=1).long()
    return {"token_level_rewards": rewards, "response_mask": mask,
            "non_tensor_batch": {"uid": np.array([r["group"] for r in rows], dtype=object)},
            "batch": {"prompts": torch.tensor([prompt] * n), "responses": responses, "attention_mask": attention}}


def _label(case: dict) -> str:
    options = ",".join(f"{k}={v}" for k, v in case["options"].items() if k not in BRIDGE_KEYS)
    return f"{case['layout']}-{case['verl_name']}{'-' + options if options else ''}"


@pytest.mark.parametrize("case", CASES["verl"], ids=_label)
def test_verl_s_compute_advantage_through_the_bridge_equals_our_estimator(case):
    ours = _our_per_step(case) if case["layout"] == "per_step" else _our_per_trajectory(case)
    verl = np.array(case["advantages"])
    worst = float(np.abs(verl - ours).max())
    print(f"{_label(case)}: worst |verl - gagpo| = {worst:.2e}")
    assert verl.shape == ours.shape and worst < TOL and np.abs(verl).max() > 0.1  # not an all-zero case


@pytest.mark.parametrize("case", CASES["verl"], ids=_label)
def test_the_bridge_still_gives_verl_s_numbers(case):
    inputs = _verl_inputs(case["layout"])
    compute = advantage_function(_gagpo_name(case["verl_name"]))
    advantages, returns = compute(index=inputs["non_tensor_batch"]["uid"], config={"gagpo": dict(case["options"])},
                                  meta_info={"global_steps": 3}, **inputs)
    np.testing.assert_allclose(advantages.numpy(), np.array(case["advantages"]), rtol=0, atol=TOL)
    assert returns is advantages


@pytest.mark.parametrize("mode", ["mean_std_norm", "mean_norm"])
def test_the_gigpo_row_equals_verl_agent_s_own_core_gigpo(mode):
    (case,) = [c for c in CASES["verl"] if c["layout"] == "per_step" and c["verl_name"] == "gigpo"
               and c["options"].get("mode") == mode]
    verl_agent = np.array(CASES["verl_agent_gigpo"][mode])
    worst = float(np.abs(np.array(case["advantages"]) - verl_agent).max())
    print(f"gigpo {mode} penalty=verl: worst |bridge in verl - verl-agent| = {worst:.2e}")
    assert worst < 2e-6
    # the default penalty rule (the penalty summed like a reward) is not verl-agent's: the comparison can fail
    default = next(c for c in CASES["verl"] if c["layout"] == "per_step" and c["verl_name"] == "gigpo"
                   and "mode" not in c["options"])
    if mode == "mean_std_norm":  # gigpo's default mode
        assert np.abs(np.array(default["advantages"]) - verl_agent).max() > 0.05


def test_every_registrable_estimator_is_in_the_fixture():
    from integrations.verl.registry import registrable

    covered = {_gagpo_name(c["verl_name"]) for c in CASES["verl"] if c["layout"] == "per_step"}
    assert covered == set(registrable()) and "ppo" not in covered
