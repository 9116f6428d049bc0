"""A slow, literal reference of the built-in estimators (docs/algorithms.md#gagpo to #baselines) and the
random batches they are checked on.

The reference walks trajectories one row at a time with plain Python lists and dicts, the way
docs/algorithms.md reads; it shares no code with the ``estimators`` package. A batch is a list of dict
rows: ``group``, ``traj``, ``step``, ``state``, ``r`` (the reward), ``done`` and ``v`` (a critic value).
``step_rows`` draws random batches (several rollout groups, repeated and unique states, one-row and
one-trajectory groups, integer or string ids) with their rows in random order.
"""

from __future__ import annotations

import math
from collections import defaultdict

from hypothesis import strategies as st

from estimators import StepBatch

# ---- the slow reference ---------------------------------------------------------------------


def rows_by_trajectory(rows: list[dict]) -> dict:
    """traj id -> its row indices sorted by step."""
    by_traj = defaultdict(list)
    for i, row in enumerate(rows):
        by_traj[row["traj"]].append(i)
    return {t: sorted(idx, key=lambda i: rows[i]["step"]) for t, idx in by_traj.items()}


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def sample_std(xs: list[float]) -> float:
    """Unbiased; 0 for a single value."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def ref_returns(rows: list[dict], gamma: float) -> list[float]:
    """docs/algorithms.md#gagpo step 1: R_t = r_t + gamma R_{t+1}."""
    out = [0.0] * len(rows)
    for idx in rows_by_trajectory(rows).values():
        nxt = 0.0
        for i in reversed(idx):
            nxt = rows[i]["r"] + gamma * nxt
            out[i] = nxt
    return out


def ref_value_proxy(rows: list[dict], gamma: float) -> list[float]:
    """docs/algorithms.md#gagpo steps 2-3: V(s_t) = mean R over rows with the same state in the same rollout group."""
    ret = ref_returns(rows, gamma)
    members = defaultdict(list)
    for i, row in enumerate(rows):
        members[(row["group"], row["state"])].append(ret[i])
    return [mean(members[(row["group"], row["state"])]) for row in rows]


def ref_td_residual(rows: list[dict], gamma: float, values: list[float]) -> list[float]:
    """docs/algorithms.md#gagpo steps 4-5 (and docs/algorithms.md#baselines ppo):
    delta_t = r_t + gamma V(s_{t+1}) - V(s_t), V after the end = 0."""
    delta = [0.0] * len(rows)
    for idx in rows_by_trajectory(rows).values():
        for k, i in enumerate(idx):
            v_next = values[idx[k + 1]] if k + 1 < len(idx) else 0.0
            delta[i] = rows[i]["r"] + gamma * v_next - values[i]
    return delta


def ref_gae(rows: list[dict], delta: list[float], coef: float) -> list[float]:
    """docs/algorithms.md#gagpo step 6: A_t = delta_t + coef A_{t+1}."""
    out = [0.0] * len(rows)
    for idx in rows_by_trajectory(rows).values():
        acc = 0.0
        for i in reversed(idx):
            acc = delta[i] + coef * acc
            out[i] = acc
    return out


def ref_normalise(rows: list[dict], adv: list[float], eps: float, key) -> list[float]:
    """(A - mean) / (std + eps) over the rows sharing ``key(row)``."""
    members = defaultdict(list)
    for i, row in enumerate(rows):
        members[key(row)].append(adv[i])
    out = []
    for a, row in zip(adv, rows, strict=True):
        xs = members[key(row)]
        out.append((a - mean(xs)) / (sample_std(xs) + eps))
    return out


def ref_scores(rows: list[dict]) -> dict:
    """traj id -> undiscounted sum of its rewards."""
    return {t: sum(rows[i]["r"] for i in idx) for t, idx in rows_by_trajectory(rows).items()}


def ref_episode_term(rows: list[dict], eps: float, divide: bool, stats: str = "steps") -> list[float]:
    """docs/algorithms.md#baselines grpo: score relative to the group's rows (or trajectories), over
    std + eps if ``divide``."""
    score = ref_scores(rows)
    population = defaultdict(list)
    if stats == "steps":
        for row in rows:
            population[row["group"]].append(score[row["traj"]])
    else:
        group_of = {row["traj"]: row["group"] for row in rows}
        for t, s in score.items():
            population[group_of[t]].append(s)
    out = []
    for row in rows:
        xs = population[row["group"]]
        centred = score[row["traj"]] - mean(xs)
        out.append(centred / (sample_std(xs) + eps) if divide else centred)
    return out


def ref_gagpo(rows, gamma=0.95, lam=0.8, eps=1e-6, norm="group", mc=False, broadcast=False) -> list[float]:
    value = ref_value_proxy(rows, gamma)
    if mc:
        adv = [r - v for r, v in zip(ref_returns(rows, gamma), value, strict=True)]
    else:
        adv = ref_gae(rows, ref_td_residual(rows, gamma, value), gamma * lam)
    if broadcast:
        adv = [a + e for a, e in zip(adv, ref_episode_term(rows, eps, True), strict=True)]
    if norm == "group":
        return ref_normalise(rows, adv, eps, key=lambda row: row["group"])
    if norm == "batch":
        return ref_normalise(rows, adv, eps, key=lambda row: 0)
    return adv


def ref_gigpo(rows, gamma=0.95, eps=1e-6, omega=1.0, mode="mean_std_norm") -> list[float]:
    divide = mode == "mean_std_norm"
    ret = ref_returns(rows, gamma)
    anchors = defaultdict(list)
    for i, row in enumerate(rows):
        anchors[(row["group"], row["state"])].append(ret[i])
    out = []
    for i, (row, episode) in enumerate(zip(rows, ref_episode_term(rows, eps, divide), strict=True)):
        xs = anchors[(row["group"], row["state"])]
        step = ret[i] - mean(xs)
        if divide:
            step /= sample_std(xs) + eps
        out.append(episode + omega * step)
    return out


def ref_rloo(rows) -> list[float]:
    score = ref_scores(rows)
    trajs_of = defaultdict(list)
    for t in score:
        trajs_of[next(r["group"] for r in rows if r["traj"] == t)].append(t)
    out = []
    for row in rows:
        others = [score[t] for t in trajs_of[row["group"]] if t != row["traj"]]
        out.append(score[row["traj"]] - mean(others) if others else 0.0)
    return out


def ref_ppo(rows, gamma=0.95, lam=0.95) -> tuple[list[float], list[float]]:
    values = [row["v"] for row in rows]
    adv = ref_gae(rows, ref_td_residual(rows, gamma, values), gamma * lam)
    return adv, [a + v for a, v in zip(adv, values, strict=True)]


REFERENCE = {
    "gagpo": ref_gagpo,
    "gagpo-lambda0": lambda rows, **o: ref_gagpo(rows, lam=0.0, **o),
    "gagpo-mc": lambda rows, **o: ref_gagpo(rows, mc=True, **o),
    "gagpo-token-ratio": ref_gagpo,
    "gagpo-broadcast": lambda rows, **o: ref_gagpo(rows, broadcast=True, **o),
    "gagpo-batch-norm": lambda rows, **o: ref_gagpo(rows, norm="batch", **o),
    "gagpo-no-norm": lambda rows, **o: ref_gagpo(rows, norm="none", **o),
    "gigpo": ref_gigpo,
    "grpo": lambda rows, eps=1e-6, stats="steps": ref_episode_term(rows, eps, True, stats),
    "rloo": ref_rloo,
    "ppo": lambda rows, **o: ref_ppo(rows, **o)[0],
}


def to_batch(rows: list[dict], with_values: bool = False) -> StepBatch:
    """The ``StepBatch`` of dict rows; the critic values ``v`` only ``with_values``."""
    return StepBatch(
        group_ids=[row["group"] for row in rows],
        traj_ids=[row["traj"] for row in rows],
        step_index=[row["step"] for row in rows],
        rewards=[row["r"] for row in rows],
        terminated=[row["done"] for row in rows],
        state_keys=[row["state"] for row in rows],
        values=[row["v"] for row in rows] if with_values else None,
    )


# ---- random batches ---------------------------------------------------------------------------

REWARDS = st.one_of(
    st.sampled_from([0.0, 0.0, 0.0, 10.0, -0.1, 1.0]),
    st.floats(min_value=-5.0, max_value=5.0, allow_nan=False, allow_infinity=False),
)


@st.composite
def step_rows(draw, max_groups: int = 4, max_traj: int = 5, max_len: int = 7) -> list[dict]:
    """Rows of a random batch, in random order; state alphabets small enough to repeat."""
    string_ids = draw(st.booleans())
    rows = []
    for g in range(draw(st.integers(1, max_groups))):
        n_states = draw(st.integers(1, 6))  # 1: every state equal; 6: mostly distinct
        for k in range(draw(st.integers(1, max_traj))):
            traj = f"g{g}-t{k}" if string_ids else g * 100 + k
            length = draw(st.integers(1, max_len))
            ended = draw(st.booleans())
            for t in range(length):
                state = "start" if t == 0 else f"room {draw(st.integers(0, n_states - 1))}"
                rows.append(
                    {
                        "group": f"task-{g}" if string_ids else g,
                        "traj": traj,
                        "step": t,
                        "r": draw(REWARDS),
                        "done": ended and t == length - 1,
                        "state": state,
                        "v": draw(st.floats(-3.0, 3.0, allow_nan=False)),
                    }
                )
    order = draw(st.permutations(range(len(rows))))
    return [rows[i] for i in order]
