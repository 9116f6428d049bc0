"""Throughput of every advantage estimator on paper-shaped step batches, against a plain Python loop.

    python benchmarks/estimators.py                      # 10k, 100k, 1M rows
    python benchmarks/estimators.py --sizes 10000 --estimators gagpo grpo --loop-max-rows 10000

A paper-shaped batch: rollout groups of 8 trajectories of 5-50 steps, each step's state drawn from
3 branches per (group, step) so states repeat across trajectories, a shared initial state, ~230
character state texts (one distinct string object per row, as environments produce them), sparse
success rewards (10 at the end of a won episode) and -0.1 invalid-action penalties; rows in
collection order, or permuted with ``--shuffle``.

Each row also carries a response length and a mean token entropy, and the batch an iteration (75 of
150), which the estimators that require them (planpo, empg) receive.

Timed per estimator: building the ``StepBatch`` (validation, factorisation) plus ``estimate``
(advantages and diagnostics). The plain loop implements the same formula row by row with dicts and
lists: the built-ins and planpo, empg below, on Python lists of the columns; pgpo, hgpo, graft,
graphgpo and g2po with the references of ``testkit/estimator_loops.py`` (which their tests also use),
on a list of row dicts built before the clock starts. Every loop is checked to agree with the
vectorised output (1e-6) and the speed-up is reported in the same run. The graft loop computes
Eq. 10's graph continuation, which the estimator skips once value iteration has converged (it is
below V's accuracy there), so its speed-up counts that work too; graft's value-iteration sweeps are
printed. Both times are the best of ``--repeats`` runs. Target: gagpo on 1M rows <= 1 s on one core,
>= 10x.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

# Run as a file, sys.path[0] is this script's folder, where this very file would shadow the estimators
# package: look in the repository root instead. The peers' loop references live with the tests.
if Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parents[1])
sys.path.append(str(Path(__file__).resolve().parents[1] / "testkit"))

from estimator_loops import ref_g2po, ref_graft, ref_graphgpo, ref_hgpo, ref_pgpo  # noqa: E402

from estimators import StepBatch, available_estimators, get_estimator  # noqa: E402

GROUP_SIZE = 8
STATE_TEXT = (
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 3, a cabinet 2, "
    "a cabinet 1, a countertop 1, a drawer 2, a drawer 1, a fridge 1, a sinkbasin 1, and a toaster 1. "
)


def paper_batch(n_rows: int, seed: int = 0, shuffle: bool = False) -> dict[str, np.ndarray]:
    """Raw columns of a paper-shaped batch with about ``n_rows`` rows (whole rollout groups).

    Rows come in collection order (turn by turn across all environments, as a batched rollout
    produces them) and each row's state text is a new string object made in that order; with
    ``shuffle`` the rows are permuted afterwards (the strings then lie scattered in memory).
    """
    rng = np.random.default_rng(seed)
    n_traj = max(GROUP_SIZE, round(n_rows / 27.5 / GROUP_SIZE) * GROUP_SIZE)
    lengths = rng.integers(5, 51, n_traj)
    step = np.concatenate([np.arange(t_len) for t_len in lengths])
    traj = np.repeat(np.arange(n_traj), lengths)
    collection = np.lexsort((traj, step))  # turn-major: every environment's step 0, then step 1, ...
    step, traj = step[collection], traj[collection]
    group = traj // GROUP_SIZE
    branch = np.where(step == 0, 0, rng.integers(0, 3, len(traj)))
    last = step == lengths[traj] - 1
    won = rng.random(n_traj) < 0.5
    rewards = np.where(last & won[traj], 10.0, 0.0) - 0.1 * (rng.random(len(traj)) < 0.05)
    keys = [
        f"{STATE_TEXT}[group {g} step {t} branch {b}]" for g, t, b in zip(group, step, branch, strict=True)
    ]
    order = rng.permutation(len(traj)) if shuffle else np.arange(len(traj))
    return {
        "group_ids": group[order],
        "traj_ids": traj[order],
        "step_index": step[order],
        "rewards": rewards[order],
        "terminated": (last & won[traj])[order],
        "state_keys": np.array(keys, dtype=object)[order],
        "values": rng.normal(0.0, 3.0, len(traj))[order],
        "response_lengths": rng.integers(5, 200, len(traj))[order],  # planpo
        "entropies": rng.gamma(2.0, 0.3, len(traj))[order],  # empg
        "iteration": np.int64(75),  # planpo: halfway through a 150-iteration run
        "total_iterations": np.int64(150),
    }


# ---- the plain Python loop: the same formulas, one row at a time --------------------------------


def _trajectories(cols: dict) -> dict:
    trajs = defaultdict(list)
    for row in range(len(cols["rewards"])):
        trajs[cols["traj_ids"][row]].append((cols["step_index"][row], row))
    return {tid: [row for _, row in sorted(steps)] for tid, steps in trajs.items()}


def _returns(rows: list, rewards, gamma: float) -> list:
    out, running = [0.0] * len(rows), 0.0
    for k in range(len(rows) - 1, -1, -1):
        running = rewards[rows[k]] + gamma * running
        out[k] = running
    return out


def _normalise(adv: list, members: dict, eps: float, divide: bool = True) -> list:
    out = list(adv)
    for rows in members.values():
        xs = [adv[r] for r in rows]
        mean = sum(xs) / len(xs)
        std = (sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else 0.0
        for r in rows:
            out[r] = (adv[r] - mean) / (std + eps) if divide else adv[r] - mean
    return out


def _score_term(cols: dict, trajs: dict, eps: float, divide: bool) -> list:
    score = [0.0] * len(cols["rewards"])
    members = defaultdict(list)
    for rows in trajs.values():
        total = sum(cols["rewards"][r] for r in rows)
        for r in rows:
            score[r] = total
            members[cols["group_ids"][r]].append(r)
    return _normalise(score, members, eps, divide)


def loop_gagpo(cols: dict, gamma=0.95, lam=0.8, eps=1e-6, norm="group", mc=False, broadcast=False) -> list:
    rewards, trajs = cols["rewards"], _trajectories(cols)
    ret = [0.0] * len(rewards)
    for rows in trajs.values():
        for r, value in zip(rows, _returns(rows, rewards, gamma), strict=True):
            ret[r] = value
    sums, counts = defaultdict(float), defaultdict(int)
    for r in range(len(rewards)):
        key = (cols["group_ids"][r], cols["state_keys"][r])
        sums[key] += ret[r]
        counts[key] += 1
    value = [sums[key] / counts[key] for key in zip(cols["group_ids"], cols["state_keys"], strict=True)]
    adv = [0.0] * len(rewards)
    for rows in trajs.values():
        running = 0.0
        for k in range(len(rows) - 1, -1, -1):
            r = rows[k]
            if mc:
                adv[r] = ret[r] - value[r]
                continue
            next_value = value[rows[k + 1]] if k + 1 < len(rows) else 0.0
            running = rewards[r] + gamma * next_value - value[r] + gamma * lam * running
            adv[r] = running
    if broadcast:
        adv = [a + e for a, e in zip(adv, _score_term(cols, trajs, eps, True), strict=True)]
    if norm == "none":
        return adv
    members = defaultdict(list)
    for r in range(len(rewards)):
        members[cols["group_ids"][r] if norm == "group" else 0].append(r)
    return _normalise(adv, members, eps)


def loop_gigpo(cols: dict, gamma=0.95, eps=1e-6, omega=1.0, mode="mean_std_norm") -> list:
    divide, trajs = mode == "mean_std_norm", _trajectories(cols)
    ret = [0.0] * len(cols["rewards"])
    for rows in trajs.values():
        for r, value in zip(rows, _returns(rows, cols["rewards"], gamma), strict=True):
            ret[r] = value
    anchors = defaultdict(list)
    for r in range(len(ret)):
        anchors[(cols["group_ids"][r], cols["state_keys"][r])].append(r)
    step = _normalise(ret, anchors, eps, divide)
    episode = _score_term(cols, trajs, eps, divide)
    return [e + omega * s for e, s in zip(episode, step, strict=True)]


def loop_grpo(cols: dict, eps=1e-6) -> list:
    return _score_term(cols, _trajectories(cols), eps, True)


def loop_rloo(cols: dict) -> list:
    trajs = _trajectories(cols)
    totals = {tid: sum(cols["rewards"][r] for r in rows) for tid, rows in trajs.items()}
    members = defaultdict(list)
    for tid, rows in trajs.items():
        members[cols["group_ids"][rows[0]]].append(tid)
    adv = [0.0] * len(cols["rewards"])
    for tids in members.values():
        total = sum(totals[t] for t in tids)
        for t in tids:
            a = totals[t] - (total - totals[t]) / (len(tids) - 1) if len(tids) > 1 else 0.0
            for r in trajs[t]:
                adv[r] = a
    return adv


def loop_ppo(cols: dict, gamma=0.95, lam=0.95) -> list:
    rewards, values = cols["rewards"], cols["values"]
    adv = [0.0] * len(rewards)
    for rows in _trajectories(cols).values():
        running = 0.0
        for k in range(len(rows) - 1, -1, -1):
            r = rows[k]
            next_value = values[rows[k + 1]] if k + 1 < len(rows) else 0.0
            running = rewards[r] + gamma * next_value - values[r] + gamma * lam * running
            adv[r] = running
    return adv


def loop_planpo(cols: dict, alpha_init=0.1, alpha_final=0.05, eps=1e-6) -> list:
    alpha = alpha_init + (alpha_final - alpha_init) * min(cols["iteration"] / cols["total_iterations"], 1.0)
    rewards, trajs = cols["rewards"], _trajectories(cols)
    won_score, episode_reward = {}, {}
    groups = defaultdict(list)
    for tid, rows in trajs.items():
        won_score[tid] = sum(rewards[r] for r in rows) if rewards[rows[-1]] > 0 else 0.0
        episode_reward[tid] = won_score[tid] / len(rows)
        groups[cols["group_ids"][rows[0]]].append(tid)
    adv = [0.0] * len(rewards)
    for tids in groups.values():  # Eq. 3 over the trajectories of the group
        xs = [episode_reward[t] for t in tids]
        mean = sum(xs) / len(xs)
        std = (sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else 0.0
        for t in tids:
            a = (episode_reward[t] - mean) / (std + eps) if len(xs) > 1 and std > 0 else 0.0
            for r in trajs[t]:
                adv[r] = a
    turn = [0.0] * len(rewards)
    members = defaultdict(list)
    for tid, rows in trajs.items():
        for r in rows:
            turn[r] = won_score[tid] / max(cols["response_lengths"][r], 1)
            members[(cols["group_ids"][r], cols["step_index"][r])].append(r)
    turn = _normalise(turn, members, eps)
    return [a + alpha * t for a, t in zip(adv, turn, strict=True)]


def loop_empg(cols: dict, k=1.0, k_future=1.0, zeta=0.1, eps=1e-6) -> list:
    entropy, trajs = cols["entropies"], _trajectories(cols)
    low, high = min(entropy), max(entropy)
    scaled = [(h - low) / (high - low + 1e-8) for h in entropy]
    confidence = [math.exp(-k * x) for x in scaled]
    mean_confidence = sum(confidence) / len(confidence)
    episode = _score_term(cols, trajs, eps, True)
    adv = [0.0] * len(entropy)
    for rows in trajs.values():
        for i, r in enumerate(rows):
            bonus = math.exp(-k_future * scaled[rows[i + 1]]) if i + 1 < len(rows) else 0.0
            adv[r] = episode[r] * confidence[r] / (mean_confidence + 1e-8) + zeta * bonus
    mean = sum(adv) / len(adv)
    return [a - mean for a in adv]


LOOPS = {
    "gagpo": loop_gagpo,
    "gagpo-lambda0": lambda c: loop_gagpo(c, lam=0.0),
    "gagpo-mc": lambda c: loop_gagpo(c, mc=True),
    "gagpo-token-ratio": loop_gagpo,
    "gagpo-broadcast": lambda c: loop_gagpo(c, broadcast=True),
    "gagpo-batch-norm": lambda c: loop_gagpo(c, norm="batch"),
    "gagpo-no-norm": lambda c: loop_gagpo(c, norm="none"),
    "gigpo": loop_gigpo,
    "grpo": loop_grpo,
    "rloo": loop_rloo,
    "ppo": loop_ppo,
    "planpo": loop_planpo,
    "empg": loop_empg,
}

ROW_LOOPS = {  # testkit/estimator_loops.py: a list of row dicts in, options at their defaults
    "pgpo": ref_pgpo,
    "hgpo": ref_hgpo,
    "graft": ref_graft,
    "graphgpo": ref_graphgpo,
    "g2po": ref_g2po,
}


def as_rows(cols: dict) -> list[dict]:
    """The row dicts of ``testkit/estimator_loops.py`` from the columns (penalties are in the rewards)."""
    keys = ("group_ids", "traj_ids", "step_index", "state_keys", "rewards")
    return [
        {"group": g, "traj": t, "step": k, "state": s, "r": r, "p": 0.0}
        for g, t, k, s, r in zip(*(cols[key] for key in keys), strict=True)
    ]


# ---- timing -----------------------------------------------------------------------------------


OPTIONAL = ("values", "response_lengths", "entropies", "iteration", "total_iterations")


def time_vectorised(name: str, cols: dict, repeats: int) -> tuple[float, Any]:
    """Best time of building the batch (with the optional inputs the estimator reads) plus ``estimate``."""
    estimator = get_estimator(name)
    wanted = {*estimator.requires, *(("values",) if estimator.needs_critic else ())}
    fields = {k: v for k, v in cols.items() if k not in OPTIONAL or k in wanted}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = estimator.compute_output(StepBatch(**fields))
        times.append(time.perf_counter() - start)
    return min(times), out


def time_loop(name: str, cols: dict, repeats: int) -> tuple[float, np.ndarray]:
    as_lists = {k: v.tolist() for k, v in cols.items()}  # the loop gets Python lists, its natural input
    loop, data = (ROW_LOOPS[name], as_rows(as_lists)) if name in ROW_LOOPS else (LOOPS[name], as_lists)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        adv = loop(data)
        times.append(time.perf_counter() - start)
    return min(times), np.asarray(adv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--estimators", nargs="+", default=None, help="default: every registered one")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--loop-max-rows", type=int, default=1_000_000, help="skip the plain loop above this")
    parser.add_argument("--shuffle", action="store_true", help="permute the rows (scattered strings)")
    args = parser.parse_args()
    names = args.estimators or available_estimators()

    print(f"{'estimator':<18} {'rows':>9} {'vectorised s':>13} {'rows/s':>12} {'loop s':>9} {'speed-up':>9} "
          "vi sweeps")
    speedups = []
    for size in args.sizes:
        cols = paper_batch(size, shuffle=args.shuffle)
        n = len(cols["rewards"])
        for name in names:
            seconds, out = time_vectorised(name, cols, args.repeats)
            adv = out.advantages
            loop_cell, speed_cell = "-", "-"
            if n <= args.loop_max_rows and (name in LOOPS or name in ROW_LOOPS):
                loop_seconds, loop_adv = time_loop(name, cols, args.repeats)
                if not np.allclose(adv, loop_adv, atol=1e-6, rtol=0):
                    raise SystemExit(f"{name}: vectorised and loop results differ at {n} rows")
                speedups.append(loop_seconds / seconds)
                loop_cell, speed_cell = f"{loop_seconds:.3f}", f"{loop_seconds / seconds:.1f}x"
            rate = n / seconds
            sweeps = out.diagnostics.get("graph/vi_sweeps")  # graft: value-iteration sweeps
            extra = f" {sweeps:>6.0f}" if sweeps is not None else ""
            print(f"{name:<18} {n:>9} {seconds:>13.4f} {rate:>12,.0f} {loop_cell:>9} {speed_cell:>9}{extra}")
    if speedups:
        median = statistics.median(speedups)
        print(f"speed-up over the plain loop: min {min(speedups):.1f}x, median {median:.1f}x")


if __name__ == "__main__":
    main()
