"""Plain-loop references of the step-level peer estimators (pgpo, hgpo, graft, graphgpo, g2po).

Each walks the rows one at a time with lists and dicts, reading the paper's equations as the
estimator's docstring states them, and shares no code with ``estimators``. Used by the estimator
tests (random batches against these loops) and by ``benchmarks/estimators.py`` (agreement on the
benchmark batch and the speed-up over the loop).

A batch is a list of row dicts: ``group``, ``traj``, ``step``, ``state`` (the state key), ``r`` (the
environment reward) and ``p`` (the invalid-action penalty, 0 when none). ``ref_pgpo`` and
``ref_hgpo`` take every option of their estimator; ``ref_graft`` and ``ref_g2po`` take the numeric
options and the ``reward`` penalty rule (``estimators.penalty``: the reward sequence is ``r - p``),
``ref_graphgpo`` its options and either rule.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque

SUCCESS_REWARD = 10.0  # the training reward of a won episode (the graph estimators' outcome unit)


def _mean(xs):
    return sum(xs) / len(xs)


def _normalised(x, xs, eps, divide=True):
    """(x - mean) / (sample std + eps); 0 for one member or all-equal members (Eq. 8's rule)."""
    if len(xs) < 2 or max(xs) == min(xs):
        return 0.0
    m = _mean(xs)
    if not divide:
        return x - m
    return (x - m) / (math.sqrt(sum((v - m) ** 2 for v in xs) / (len(xs) - 1)) + eps)


def _trajectories(rows):
    """traj id -> its row indices sorted by step."""
    trajs = defaultdict(list)
    for i, row in enumerate(rows):
        trajs[row["traj"]].append(i)
    for idx in trajs.values():
        idx.sort(key=lambda i: rows[i]["step"])
    return trajs


def _returns(rows, gamma, penalty):
    """``(trajectories, R)``: ``_trajectories`` and R_t = r_t + gamma R_{t+1} of every row under the
    penalty rule (reward: recursion over r - p; verl: over r, then the row's own p)."""
    trajs = _trajectories(rows)
    ret = [0.0] * len(rows)
    for idx in trajs.values():
        acc = 0.0
        for i in reversed(idx):
            if penalty == "reward":
                acc = rows[i]["r"] - rows[i]["p"] + gamma * acc
                ret[i] = acc
            else:
                acc = rows[i]["r"] + gamma * acc
                ret[i] = acc - rows[i]["p"]
    return trajs, ret


def _episode_term(rows, trajs, eps, divide, penalty):
    """GRPO's episode term over the group's step rows (a one-row group gives 0)."""
    score = {}
    for t, idx in trajs.items():
        net = [rows[i]["r"] - (rows[i]["p"] if penalty == "reward" else 0.0) for i in idx]
        score[t] = sum(net)
    row_score = [score[r["traj"]] - (r["p"] if penalty == "verl" else 0.0) for r in rows]
    by_group = defaultdict(list)
    for r, s in zip(rows, row_score, strict=True):
        by_group[r["group"]].append(s)
    out = []
    for r, s in zip(rows, row_score, strict=True):
        xs = by_group[r["group"]]
        m = sum(xs) / len(xs)
        if len(xs) < 2 or max(xs) == min(xs):
            out.append(0.0)
        elif divide:
            out.append((s - m) / (math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) + eps))
        else:
            out.append(s - m)
    return out


# ---- PGPO (arXiv 2609.02236, Eqs. 1-11) --------------------------------------------------------------


def ref_pgpo(
    rows,
    gamma=0.95,
    potential_gamma=1.0,
    alpha=2.0,
    beta=1.0,
    eps=1e-6,
    mode="mean_std_norm",
    potential="mean",
    penalty="reward",
):
    trajs, ret = _returns(rows, gamma, penalty)  # Eq. 1 with the penalty rule
    visits = defaultdict(list)  # (group, state) -> rows
    for i, row in enumerate(rows):
        visits[(row["group"], row["state"])].append(i)

    def phi(i):  # Eq. 6 (leave one out: without row i)
        members = [j for j in visits[(rows[i]["group"], rows[i]["state"])] if potential == "mean" or j != i]
        return _mean([ret[j] for j in members]) if members else 0.0

    delta = [0.0] * len(rows)
    for idx in trajs.values():
        for k, i in enumerate(idx):  # Eq. 7
            if k + 1 < len(idx):
                target = potential_gamma * phi(idx[k + 1])
            else:
                target = potential_gamma * (rows[i]["r"] - rows[i]["p"])
            delta[i] = target - phi(i)
    success = defaultdict(list)  # Eq. 9
    for idx in trajs.values():
        success[rows[idx[0]]["group"]].append(rows[idx[-1]]["r"] > 0)
    out = []
    for i, row in enumerate(rows):
        members = visits[(row["group"], row["state"])]
        a_s = _normalised(ret[i], [ret[j] for j in members], eps, divide=mode == "mean_std_norm")  # Eq. 3
        a_phi = _normalised(delta[i], [delta[j] for j in members], eps)  # Eq. 8
        weight = beta * (1 - _mean(success[row["group"]])) ** alpha  # Eq. 10
        out.append(a_s + weight * a_phi)  # Eq. 11
    return out


# ---- HGPO (arXiv 2602.22817; clusters of equal recent history) ---------------------------------------


def ref_hgpo(
    rows,
    gamma=0.95,
    eps=1e-6,
    history_depth=2,
    weight_alpha=1.0,
    weight_index="code",
    mode="mean_std_norm",
    base_group=False,
    penalty="reward",
):
    trajs, ret = _returns(rows, gamma, penalty)
    items = defaultdict(list)  # row -> [(L, a)]
    if base_group:
        for i, a in enumerate(_episode_term(rows, trajs, eps, mode == "mean_std_norm", penalty)):
            items[i].append((1, a))
    clusters = defaultdict(list)
    for idx in trajs.values():
        for t, i in enumerate(idx):
            for k in range(1, min(history_depth + 1, t + 1) + 1):
                history = tuple(rows[j]["state"] for j in idx[t - k + 1 : t + 1])
                clusters[(rows[i]["group"], k, history)].append(i)
    for (_, k, _), members in clusters.items():
        if len(members) < 2:
            continue
        xs = [ret[i] for i in members]
        m = sum(xs) / len(xs)
        std = math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))  # population std
        for i in members:
            a = (ret[i] - m) / (std + eps) if mode == "mean_std_norm" else ret[i] - m
            items[i].append((k + 1 if weight_index == "code" else k, a))
    out = []
    for i in range(len(rows)):
        kept = [(length**weight_alpha, a) for length, a in items[i] if a != 0]
        total = sum(w for w, _ in kept)
        out.append(sum(w * a for w, a in kept) / (total + eps) if kept else 0.0)
    return out


# ---- trajectory graphs: GRAFT, GraphGPO, G2PO ----------------------------------------------------------


def _graph(rows, trajs, penalty="reward"):
    """``(src, dst, side)`` per row: the edge of each step, from node ``(group, state)`` to the next
    step's node, or after a trajectory's last step to its group's sink ``(group, "won")`` when the last
    reward is > 0, else ``(group, "lost")``; ``side`` that reward less the outcome (the success reward
    leaves the last step of a won trajectory). The reward is r - p under ``reward`` and r alone under
    ``verl`` (the penalty comes after the outcome is decided)."""
    src = [(row["group"], ("state", row["state"])) for row in rows]
    dst, side = [None] * len(rows), [row["r"] - (row["p"] if penalty == "reward" else 0.0) for row in rows]
    for idx in trajs.values():
        last = idx[-1]
        won = side[last] > 0
        for i, nxt in zip(idx, idx[1:], strict=False):
            dst[i] = src[nxt]
        dst[last] = (rows[last]["group"], "won" if won else "lost")
        side[last] -= SUCCESS_REWARD * won
    return src, dst, side


def _in_groups(values, keys, eps, divide=True, lone=None):
    """``values`` normalised among the rows sharing a key: (x - mean) / (sample std + eps), or x - mean;
    all-equal members give 0; a row alone gives ``lone(x)`` (default 0)."""
    members = defaultdict(list)
    for i, key in enumerate(keys):
        members[key].append(i)
    out = [0.0] * len(values)
    for idx in members.values():
        xs = [values[i] for i in idx]
        if len(xs) == 1:
            out[idx[0]] = lone(xs[0]) if lone else 0.0
            continue
        if max(xs) == min(xs):
            continue
        m = _mean(xs)
        std = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if divide else 0.0
        for i, x in zip(idx, xs, strict=True):
            out[i] = (x - m) / (std + eps) if divide else x - m
    return out


def _distances(src, dst, targets):
    """Fewest edges from each node to a node of ``targets`` (BFS on the reversed edges); unreached
    nodes are absent."""
    into = defaultdict(set)
    for u, v in zip(src, dst, strict=True):
        into[v].add(u)
    dist = dict.fromkeys(targets, 0)
    queue = deque(targets)
    while queue:
        v = queue.popleft()
        for u in into[v]:
            if u not in dist:
                dist[u] = dist[v] + 1
                queue.append(u)
    return dist


def ref_graft(rows, gamma=0.99, lam=0.95, eps=1e-6, tol=1e-8):
    """GRAFT (arXiv 2609.28963), ``continuation="graph"``. Eqs. 5-7: V(u) = mean over the edges leaving u
    of (r + gamma V(v)), sinks worth 1 (won) or 0, by Gauss-Seidel sweeps over the nodes nearest the
    sinks first until no value moves by ``tol``; Eq. 8: TD difference of every edge; Eqs. 9-10: plus
    ``sum_{k=1..h} (gamma lam)^k`` times the mean TD difference of the edges k hops after the row's own
    edge, h the steps left in its trajectory (computed always; the estimator skips it once value
    iteration converged, where it is below V's accuracy); Eq. 11: normalised among the rows leaving the
    same node, a lone row x / (|x| + eps)."""
    trajs = _trajectories(rows)
    src, dst, side = _graph(rows, trajs)
    reward = [x / SUCCESS_REWARD for x in side]  # in units of the success reward, R_i in {0, 1}
    leaving = defaultdict(list)  # node -> its edges (rows)
    for i, u in enumerate(src):
        leaving[u].append(i)
    sinks = {v for v in dst if v[1] in ("won", "lost")}
    value = dict.fromkeys(leaving, 0.0) | {v: float(v[1] == "won") for v in sinks}  # unreached: 0
    dist = _distances(src, dst, sinks)
    order = sorted((u for u in dist if u not in sinks), key=dist.__getitem__)
    change = tol
    while order and change >= tol:  # Eqs. 5-7
        change = 0.0
        for u in order:
            new = _mean([reward[i] + gamma * value[dst[i]] for i in leaving[u]])
            change = max(change, abs(new - value[u]))
            value[u] = new
    td = [reward[i] + gamma * value[dst[i]] - value[src[i]] for i in range(len(rows))]  # Eq. 8

    horizon = [0] * len(rows)
    for idx in trajs.values():
        for t, i in enumerate(idx):
            horizon[i] = len(idx) - 1 - t
    reach = defaultdict(int)  # start node -> the most hops any row needs from it
    for i, h in enumerate(horizon):
        reach[dst[i]] = max(reach[dst[i]], h)
    hop_means = {}  # start node -> [Abar_1, Abar_2, ...] (Eq. 10)
    for start, most in reach.items():
        frontier, means = {start}, []
        for _ in range(most):
            edges = [i for u in frontier for i in leaving.get(u, ())]
            means.append(_mean([td[i] for i in edges]) if edges else 0.0)
            frontier = {dst[i] for i in edges}
        hop_means[start] = means
    coef = gamma * lam
    adv = [td[i] + sum(coef ** (k + 1) * a for k, a in enumerate(hop_means[dst[i]][: horizon[i]]))
           for i in range(len(rows))]  # Eq. 9
    return _in_groups(adv, src, eps, lone=lambda x: x / (abs(x) + eps))  # Eq. 11


def ref_graphgpo(rows, graph_gamma=0.1, eps=1e-6, mode="mean_std_norm", step_weight=1.0, episode_weight=1.0,
                 penalty="verl"):
    """GraphGPO (arXiv 2605.26684, the official recipe), ``normalize_distance=False``, rows without the
    state after the last action: d(s) the fewest edges from s to its group's success sink (unreached:
    the group's largest finite d + 1); ``R_t = 10 graph_gamma^d(s_{t+1})``, less the row's own penalty
    under ``verl``; step term = R normalised among the rows of the same state in the rollout group
    (one row or all equal: 0); A = step_weight * step term + episode_weight * GRPO's episode term.
    A trajectory succeeded when its last reward is > 0: under ``verl`` the environment reward r alone
    (the official ``'success'`` next_obs is set in the rollout, before ``apply_invalid_action_penalty``),
    so a penalised last row with r = p > 0 still leads to the success sink; under ``reward`` r - p."""
    trajs = _trajectories(rows)
    src, dst, _ = _graph(rows, trajs, penalty)
    dist = _distances(src, dst, {(row["group"], "won") for row in rows})
    farthest = defaultdict(int)
    for (group, _), d in dist.items():
        farthest[group] = max(farthest[group], d)
    returns = [0.0] * len(rows)
    for i, row in enumerate(rows):
        d = dist.get(dst[i], farthest[dst[i][0]] + 1)
        returns[i] = SUCCESS_REWARD * graph_gamma**d - (row["p"] if penalty == "verl" else 0.0)
    divide = mode == "mean_std_norm"
    step = _in_groups(returns, src, eps, divide=divide)
    episode = _episode_term(rows, trajs, eps, divide, penalty)
    return [step_weight * a + episode_weight * e for a, e in zip(step, episode, strict=True)]


def ref_g2po(rows, gamma=0.95, mode="mean_norm", step_weight=1.0, eps=1e-6):
    """G2PO (arXiv 2606.22995): V(s) = mean over the visits (i, t) of s of gamma^(T_i - t) R_i, R_i the
    trajectory's net reward sum; after a last step 10 (won) or 0; A = GRPO's episode term +
    step_weight * [V(s_{t+1}) + side_t normalised among the rows of s_t, plus V(s_{t+1}) - V(s_t)
    normalised over the rollout group]."""
    trajs = _trajectories(rows)
    src, dst, side = _graph(rows, trajs)
    divide = mode == "mean_std_norm"
    visits = defaultdict(list)
    for idx in trajs.values():
        total = sum(rows[i]["r"] - rows[i]["p"] for i in idx)
        for t, i in enumerate(idx):
            visits[src[i]].append(gamma ** (len(idx) - t) * total)
    score = {node: _mean(xs) for node, xs in visits.items()}
    for row in rows:
        score[(row["group"], "won")], score[(row["group"], "lost")] = SUCCESS_REWARD, 0.0
    q = [score[dst[i]] + side[i] for i in range(len(rows))]
    gain = [score[dst[i]] - score[src[i]] for i in range(len(rows))]
    within = _in_groups(q, src, eps, divide)
    across = _in_groups(gain, [row["group"] for row in rows], eps, divide)
    episode = _episode_term(rows, trajs, eps, divide, "reward")
    return [e + step_weight * (w + a) for e, w, a in zip(episode, within, across, strict=True)]
