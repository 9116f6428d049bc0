"""Trajectory graphs of a step batch, shared by the graph-based estimators (GRAFT, GraphGPO, G2PO).

One graph per rollout group, all of them held in one set of arrays (node ids are global, edges never
cross groups). Nodes ``0 .. n_states-1`` are the states of ``StepBatch.state_index`` (one per distinct
state key of a rollout group; similarity grouping merges keys before this point). Then each rollout
group g gets two sinks: a success sink (``n_states + g``) and a failure sink (``n_states + n_groups +
g``). Every executed step is one edge instance ``src -> dst`` (repeated transitions stay repeated, so
counts are edge multiplicities): ``dst`` is the state of the next step of the same trajectory, and
for a trajectory's last step the sink of its outcome. A step batch holds no key of the state reached
after the last action, so that state can only be the sink; sinks have no outgoing edges.

Outcome (``split_rewards``): a trajectory succeeded when its final reward is > 0 (the training reward
is ``SUCCESS_REWARD`` x success at the final step, docs/algorithms.md#rewards-and-penalties). The rest
of the rewards (everything but that outcome) are *side rewards*: under the ``reward`` penalty rule
they are ``-penalty`` on each
penalised step, under ``verl`` 0 (the penalty stays with its own row), plus any intermediate
environment reward.

Every operation is vectorised and linear in the batch: factorisation for the nodes, CSR adjacency
for neighbour gathering, and a multi-source BFS that visits each node and edge once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from estimators.batch import StepBatch

SUCCESS_REWARD = 10.0  # docs/algorithms.md#rewards-and-penalties: training reward 10 x success at the final step


def split_rewards(batch: StepBatch, penalty: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(success, side, own_penalty)`` under penalty rule ``penalty`` (``estimators.penalty``).

    ``success`` per trajectory code: its final reward > 0, the reward being ``net_rewards`` under
    ``reward`` and the environment ``rewards`` under ``verl``. ``side`` per slot: that reward less the
    outcome, ``r_t - SUCCESS_REWARD * success`` on a successful trajectory's last slot and ``r_t``
    elsewhere (``-penalty_t`` under ``reward`` on the docs/algorithms.md#rewards-and-penalties rewards,
    0 under ``verl``).
    ``own_penalty`` per slot: ``penalties`` under ``verl`` (the penalty each row keeps to itself),
    0 under ``reward`` (it is already in ``side``). Both batches of the ``reward`` rule (penalties
    apart, or folded into ``rewards``) give the same numbers.
    """
    layout = batch.layout
    rewards = batch.rewards if penalty == "verl" else batch.net_rewards
    r = layout.to_slots(rewards)
    last_slot = layout.traj_start + layout.traj_len - 1
    success = r[last_slot] > 0.0
    outcome = np.zeros(layout.n, dtype=np.float64)
    outcome[last_slot] = SUCCESS_REWARD * success
    own = layout.to_slots(batch.penalties) if penalty == "verl" else np.zeros(layout.n, dtype=np.float64)
    return success, r - outcome, own


def gather(indptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The adjacency entries of ``nodes`` in a CSR structure: ``(which, position)``, ``which`` indexing
    ``nodes`` and ``position`` the entry (read the neighbour, or any per-entry value, at it)."""
    starts = indptr[nodes]
    lens = indptr[nodes + 1] - starts
    which = np.repeat(np.arange(len(nodes)), lens)
    first = np.cumsum(lens) - lens
    return which, np.arange(int(lens.sum())) - first[which] + starts[which]


def csr(heads: np.ndarray, tails: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR adjacency of the edges ``heads[i] -> tails[i]`` over ``n`` nodes: ``(indptr, tails sorted)``."""
    order = np.argsort(heads, kind="stable")
    indptr = np.concatenate(([0], np.cumsum(np.bincount(heads, minlength=n))))
    return indptr, tails[order]


@dataclass(frozen=True, eq=False)
class TrajectoryGraph:
    """The trajectory graphs of one batch (module docstring).

    Per slot (trajectory order, ``estimators.grouping``): ``src`` (node of s_t), ``dst`` (node of
    s_{t+1}, or its trajectory's outcome sink on the last slot). Per node: ``node_group`` (rollout-group
    code), ``is_sink``. Per rollout group: ``success_sink``, ``failure_sink``.
    """

    src: np.ndarray
    dst: np.ndarray
    n_states: int
    node_group: np.ndarray
    is_sink: np.ndarray
    success_sink: np.ndarray
    failure_sink: np.ndarray

    @property
    def n_nodes(self) -> int:
        return len(self.node_group)

    @classmethod
    def build(cls, batch: StepBatch, success: np.ndarray) -> TrajectoryGraph:
        """Nodes and edges of ``batch``; ``success`` per trajectory code picks each last step's sink."""
        layout, index = batch.layout, batch.state_index
        n_states, n_groups = index.count, layout.n_groups
        success_sink = n_states + np.arange(n_groups)
        failure_sink = n_states + n_groups + np.arange(n_groups)
        dst = index.next_codes.copy()
        last = layout.is_last
        group_of_last = layout.group[last]
        dst[last] = np.where(success[layout.traj[last]], success_sink[group_of_last], failure_sink[group_of_last])
        node_group = np.concatenate((index.code_group, np.arange(n_groups), np.arange(n_groups)))
        is_sink = np.zeros(len(node_group), dtype=bool)
        is_sink[n_states:] = True
        return cls(
            src=index.codes,
            dst=dst,
            n_states=n_states,
            node_group=node_group,
            is_sink=is_sink,
            success_sink=success_sink,
            failure_sink=failure_sink,
        )

    @cached_property
    def out_count(self) -> np.ndarray:
        """Outgoing edge instances of every node (0 on sinks)."""
        return np.bincount(self.src, minlength=self.n_nodes)

    @cached_property
    def successors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Distinct transitions as CSR: ``(indptr, successor, multiplicity)``, ``indptr`` over nodes."""
        pair = self.src * self.n_nodes + self.dst
        unique, count = np.unique(pair, return_counts=True)
        heads, tails = unique // self.n_nodes, unique % self.n_nodes
        indptr = np.concatenate(([0], np.cumsum(np.bincount(heads, minlength=self.n_nodes))))
        return indptr, tails, count  # np.unique sorts by head, so the CSR order is already right

    def distances_to(self, targets: np.ndarray) -> np.ndarray:
        """Fewest edges from every node to the nearest node with ``targets`` True (multi-source BFS on
        the reversed graph, unit weights); -1 where none is reachable. Linear in nodes + edges."""
        indptr, predecessors = csr(self.dst, self.src, self.n_nodes)
        dist = np.full(self.n_nodes, -1, dtype=np.int64)
        frontier = np.flatnonzero(targets)
        dist[frontier] = 0
        level = 0
        while frontier.size:
            _, position = gather(indptr, frontier)
            reached = predecessors[position]
            frontier = np.unique(reached[dist[reached] < 0])
            level += 1
            dist[frontier] = level
        return dist
