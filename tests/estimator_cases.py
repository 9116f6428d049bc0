"""Cases the estimator tests share: the loss settings every built-in declares, and batches written as
dict rows (``group``, ``traj``, ``step``, ``state``, ``r`` the reward, ``p`` the invalid-action penalty,
``done``), by hand or drawn by Hypothesis, with the row-order and relabelling invariance check.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from estimators import StepBatch, get_estimator

LOSS_SETTINGS = {  # name -> (ratio_mode, loss_agg, needs_critic)
    "gagpo": ("sequence", "seq-mean-token-mean", False),
    "gagpo-lambda0": ("sequence", "seq-mean-token-mean", False),
    "gagpo-mc": ("sequence", "seq-mean-token-mean", False),
    "gagpo-token-ratio": ("token", "token-mean", False),
    "gagpo-broadcast": ("sequence", "seq-mean-token-mean", False),
    "gagpo-batch-norm": ("sequence", "seq-mean-token-mean", False),
    "gagpo-no-norm": ("sequence", "seq-mean-token-mean", False),
    "gigpo": ("token", "token-mean", False),
    "grpo": ("token", "token-mean", False),
    "rloo": ("token", "token-mean", False),
    "ppo": ("token", "token-mean", True),
}


def batch_of(rows: list[dict]) -> StepBatch:
    """The ``StepBatch`` of dict rows (see the module docstring)."""
    return StepBatch(
        group_ids=[r["group"] for r in rows],
        traj_ids=[r["traj"] for r in rows],
        step_index=[r["step"] for r in rows],
        rewards=[r["r"] for r in rows],
        terminated=[r.get("done", False) for r in rows],
        state_keys=[r["state"] for r in rows],
        penalties=[r.get("p", 0.0) for r in rows],
    )


def assert_row_order_and_relabelling_invariant(name: str, rows: list[dict], seed: int) -> None:
    """Estimator ``name`` gives each row the same advantage after the rows are shuffled and the groups
    and trajectories renamed (``seed`` draws both)."""
    rng = np.random.default_rng(seed)
    base = get_estimator(name).compute(batch_of(rows))
    order = rng.permutation(len(rows))
    relabel = {g: f"task-{rng.integers(1000)}-{g}" for g in {r["group"] for r in rows}}
    moved = [{**rows[i], "group": relabel[rows[i]["group"]], "traj": f"t{rows[i]['traj']}"} for i in order]
    np.testing.assert_allclose(get_estimator(name).compute(batch_of(moved)), base[order], atol=1e-12)


def trajectory(group, traj, states, rewards, penalties=None, done=True) -> list[dict]:
    """The rows of one trajectory through ``states`` (one state per character of a string, or a list)."""
    penalties = penalties or [0.0] * len(states)
    return [
        {
            "group": group,
            "traj": traj,
            "step": t,
            "state": s,
            "r": r,
            "p": p,
            "done": done and t == len(states) - 1,
        }
        for t, (s, r, p) in enumerate(zip(states, rewards, penalties, strict=True))
    ]


REWARDS = st.sampled_from([0.0, 0.0, 10.0, 1.0]) | st.floats(-3, 3)


@st.composite
def pgpo_rows(draw) -> list[dict]:
    """Rows of a random batch (1-3 rollout groups, repeated states, penalties), in random order."""
    rows = []
    for g in range(draw(st.integers(1, 3))):
        n_states = draw(st.integers(1, 5))
        for k in range(draw(st.integers(1, 4))):
            length = draw(st.integers(1, 6))
            states = ["start"] + [f"room {draw(st.integers(0, n_states - 1))}" for _ in range(length - 1)]
            rewards = [draw(REWARDS) for _ in range(length)]
            penalties = [draw(st.sampled_from([0.0, 0.0, 0.1, 1.0])) for _ in range(length)]
            rows += trajectory(g, f"{g}-{k}", states, rewards, penalties, draw(st.booleans()))
    return [rows[i] for i in draw(st.permutations(range(len(rows))))]
