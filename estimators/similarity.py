"""Approximate state grouping: near-identical state keys of one rollout group become one state.

Exact grouping (the default) splits states whose observation texts differ by a word (a counter, an
item order), which leaves many singleton step groups. PGPO (arXiv 2609.02236) reports a text-similarity
grouping at threshold 0.9; GraphGPO (arXiv 2605.26684) merges states at difflib ratio >= 0.95.

Similarity of two keys: rapidfuzz's normalised Indel similarity, ``2 * LCS(a, b) / (len(a) + len(b))``
(``rapidfuzz.distance.Indel.normalized_similarity``, the value ``fuzz.ratio`` reports / 100). It is the
quantity Python's ``difflib.SequenceMatcher.ratio`` approximates: difflib counts the characters of
greedily chosen matching blocks, at most the LCS, and its "autojunk" heuristic drops frequent
characters of texts over 200 characters, so difflib's ratio is at most this one and depends on
heuristics. This one is exact, symmetric, and computed bit-parallel in C (fast on long texts).

Clustering, inside each rollout group separately: the group's distinct keys are taken most visited
first (ties: lexicographic order of the text), and each joins the most similar existing cluster
leader whose similarity is >= ``threshold`` (ties: the earlier leader), or else leads a new cluster.
Every key is then replaced by its leader's key, so the most visited text names the merged state. The
result depends only on the multiset of keys of each group: not on row order, group labels or ids.
Threshold 1.0 merges only identical texts (exact grouping).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from rapidfuzz import process
from rapidfuzz.distance import Indel

from estimators.batch import StepBatch


def similarity_leaders(keys: list[str], counts: list[int], threshold: float) -> list[int]:
    """For distinct ``keys`` of one rollout group visited ``counts`` times, the index of each key's
    cluster leader (module docstring)."""
    order = sorted(range(len(keys)), key=lambda i: (-counts[i], keys[i]))
    leaders: list[int] = []
    leader_keys: list[str] = []
    leader_of = [0] * len(keys)
    for i in order:
        match = process.extractOne(
            keys[i], leader_keys, scorer=Indel.normalized_similarity, score_cutoff=threshold
        )
        if match is None:
            leaders.append(i)
            leader_keys.append(keys[i])
            leader_of[i] = i
        else:
            leader_of[i] = leaders[match[2]]
    return leader_of


def merge_similar_states(batch: StepBatch, threshold: float) -> StepBatch:
    """``batch`` with every state key replaced by the leader of its similarity cluster in its rollout
    group (``threshold`` in (0, 1])."""
    index = batch.state_index
    if index.count == 0:
        return batch
    leader = np.arange(index.count)
    by_group = np.argsort(index.code_group, kind="stable")
    bounds = np.flatnonzero(np.diff(index.code_group[by_group])) + 1
    for codes in np.split(by_group, bounds):
        if len(codes) < 2:
            continue
        leader_of = similarity_leaders(index.code_key[codes].tolist(), index.sizes[codes].tolist(), threshold)
        leader[codes] = codes[leader_of]
    merged = batch.layout.to_rows(index.code_key[leader[index.codes]])
    return dataclasses.replace(batch, state_keys=merged)
