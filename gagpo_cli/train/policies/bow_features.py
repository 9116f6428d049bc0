"""The hashed features of ``bow-mlp`` (``bow_mlp.py``): what a score input (state and candidate actions)
becomes before the network sees it, factored so that what many candidates share is computed once.

Every string is hashed with CRC32 into ``BUCKETS`` slots; crosses are hashed from the two parts' hashes
with integer arithmetic, vectorised in numpy:

* state: goal words and bigrams, current observation words and bigrams (first ``OBS_WORDS``), the
  role skeletons of the last ``HISTORY_SKELETONS`` actions;
* candidate: its words, bigrams and whole text; its *skeleton* (verb kept, numbers -> ``#``, goal
  content words -> ``G``, other content words -> ``X``, a few function words kept: "take G # from
  X #") and its *role skeleton* (goal content words numbered by their order in the goal, ``G1`` ..
  ``G5``: "take G1 # from X #", "put G1 # in/on G2 #");
* goal-word x action-word pairs;
* memory: how often this exact candidate was already taken in the episode (0, 1, 2, 3+, also
  crossed with its role skeleton), the bag of role skeletons of all past actions crossed with the
  candidate's, the last action's role skeleton crossed with it;
* observation word x candidate verb pairs, and whether the candidate's content words all appear
  in the current observation.

``BowFeatures`` turns a batch of inputs into the network's input tensors; the strings, inputs and
their parts it has seen stay in its cache (``_FeatureCache``), so repeated ones cost one look-up.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from itertools import repeat

import numpy as np
import torch

from gagpo_cli.train.policies.scoring import ScoreInput

BUCKETS = 1 << 18  # hash space of the sparse linear term's features
EMBED_BUCKETS = 1 << 15  # hash space of the embedded features (dense Adam updates: keep it small)
OBS_WORDS = 48  # observation words used (ALFWorld's first observation lists the whole room)
HISTORY_SKELETONS = 2  # recent actions whose skeletons are state features
_MASK = BUCKETS - 1
_WORD = re.compile(r"[a-z]+|\d+")
# Words kept as themselves in a skeleton (and never counted as a goal's content words).
_FUNCTION = frozenset({
    "a", "an", "the", "some", "to", "from", "in", "on", "in/on", "with", "and", "it", "them", "of", "at", "is",
    "your", "task", "put", "two", "find", "examine", "look", "clean", "hot", "cool", "heat", "cold", "cooled",
    "heated", "cleaned", "under", "by", "for", "i", "need", "want", "am", "looking", "that", "this", "than",
    "price", "lower", "dollars", "be", "are", "which", "up", "my",
})


def _tokens(text: str) -> list[str]:
    return ["#" if t.isdigit() else t for t in _WORD.findall(text.lower().replace("in/on", "inon"))]


def _h(text: str) -> int:
    return zlib.crc32(text.encode())


def _content_key(text: str) -> int:
    """A 64-bit key of a table row's content: the order of a batch's rows (``_by_content``)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


def _cross(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """Hash of the pair (a, b) of hashes, elementwise with numpy broadcasting."""
    return ((np.asarray(a, dtype=np.int64) * 1000003) ^ np.asarray(b, dtype=np.int64)) & 0xFFFFFFFF


_START = _h("s:<start>")
_HS = _h("hs")
_HX = _h("hx")
_COUNT = np.array([_h(f"n:{k}") for k in range(4)], dtype=np.int64)
_SEEN = np.array([_h("seen:False"), _h("seen:True")], dtype=np.int64)


class _Goal:
    """Per-goal precomputation (content words and their roles, hashed features; ``index``: its row in
    the cache's table of goals) and the goal's caches: its candidates, admissible sets and memories."""

    def __init__(self, goal: str, index: int = 0) -> None:
        self.text = goal
        self.index = index
        words = _tokens(goal)
        content = [w for w in words if w not in _FUNCTION and w != "#"]
        self.content = list(dict.fromkeys(content))
        self.roles = {w: f"G{min(i + 1, 5)}" for i, w in enumerate(self.content)}  # order in the goal
        feats = [f"g:{w}" for w in words] + [f"g2:{a}_{b}" for a, b in zip(words, words[1:], strict=False)]
        self.ids = np.array([_h(f) for f in feats] or [_h("g:")], dtype=np.int64)
        self.content_hashes = [_h(w) for w in self.content]
        self.content_ids = np.array(self.content_hashes, dtype=np.int64)
        self.candidates: dict[str, _Candidate] = {}
        self.sets: dict[tuple[str, ...], _CandidateSet] = {}
        self.memories: dict[tuple[str, ...], tuple[dict[str, int], tuple[int, ...], int, tuple[int, ...]]] = {}


class _ActionText:
    """What a candidate's features take from its text alone, whatever the goal: words, verb hash, the
    hashes of its word, bigram and whole-text features, the hashes of its words (numbers left out) and
    its content words."""

    __slots__ = ("words", "verb", "feature_ids", "word_ids", "content")

    def __init__(self, text: str) -> None:
        words = self.words = _tokens(text)
        self.verb = _h(f"v:{words[0] if words else ''}")
        feats = [f"a:{w}" for w in words] + [f"a2:{a}_{b}" for a, b in zip(words, words[1:], strict=False)]
        feats.append(f"A:{text.lower()}")
        self.feature_ids = [_h(f) for f in feats]
        self.word_ids = [_h(w) for w in words if w != "#"] or [0]
        self.content = tuple(w for w in words[1:] if w not in _FUNCTION and w not in ("#", "inon"))


class _Candidate:
    """Per (goal, candidate) precomputation: static feature ids, skeleton, verb, content words; ``index``
    is its row in the cache's table of (goal, candidate) pairs."""

    __slots__ = ("index", "verb", "skeleton", "role", "content", "deep_ids", "static_ids", "linear_ids")

    def __init__(self, goal: _Goal, text: str, index: int = 0, parts: _ActionText | None = None) -> None:
        self.index = index
        parts = parts or _ActionText(text)
        words = parts.words
        self.verb = parts.verb
        skel, role = [], []
        for w in words:
            if not skel:  # the verb stays itself, even when the goal uses it ("go to the library")
                skel.append(w)
                role.append(w)
            elif w in goal.roles:
                skel.append("G")
                role.append(goal.roles[w])
            elif w == "#" or w in _FUNCTION or w == "inon":
                skel.append(w)
                role.append(w)
            else:
                skel.append("X")
                role.append("X")
        self.skeleton = _h("s:" + " ".join(skel))
        self.role = _h("r:" + " ".join(role))
        self.content = parts.content
        # tuples of ints: the garbage collector stops scanning them (lists it would scan at every pass)
        ids = self.deep_ids = (*parts.feature_ids, self.skeleton, self.role)  # what the candidate embedding averages
        # goal-word x action-word pairs, as _cross computes them (goal words outer, action words inner)
        static = self.static_ids = (*ids, *[(a * 1000003 ^ b) & 0xFFFFFFFF for a in goal.content_hashes
                                            for b in parts.word_ids])
        # its linear-term buckets; bucket 0 is padding, never a feature
        self.linear_ids = tuple([i & _MASK for i in static if i & _MASK])


class _Observation:
    """Per observation text: hashed word + bigram features of its first OBS_WORDS words, the set of those
    words; ``index`` is its row in the cache's table of observations."""

    __slots__ = ("index", "ids", "words")

    def __init__(self, text: str, index: int = 0) -> None:
        self.index = index
        words = _tokens(text)[:OBS_WORDS]
        feats = [f"o:{w}" for w in words] + [f"o2:{a}_{b}" for a, b in zip(words, words[1:], strict=False)]
        self.ids = np.array([_h(f) for f in feats] or [_h("o:")], dtype=np.int64)
        self.words = frozenset(words)  # (its first OBS_WORDS features are crossed with each candidate's verb)


class _CandidateSet:
    """Per (goal, admissible actions): the candidates' content words; ``index``: its row in the cache's
    table of such sets (whose ``set_pairs`` holds the candidates' pair rows)."""

    __slots__ = ("index", "contents")

    def __init__(self, candidates: list[_Candidate], index: int) -> None:
        self.index = index
        self.contents = [c.content for c in candidates]


class _Ragged:
    """Rows of int64 values of varying length, stored end to end in one growing array, so that the
    rows a batch needs come out concatenated with a few vectorised operations (``gather``)."""

    def __init__(self) -> None:
        self.values = np.zeros(1 << 12, dtype=np.int64)
        self.starts = np.zeros(1 << 10, dtype=np.int64)
        self.lengths = np.zeros(1 << 10, dtype=np.int64)
        self.size = self.rows = 0
        self.new: list[Sequence[int]] = []  # rows appended since the last gather

    def append(self, values: Sequence[int]) -> None:
        """Append a row (stored with the other new rows at the next ``gather``)."""
        self.new.append(values)
        self.rows += 1

    def _store(self) -> None:
        rows, self.new = self.new, []
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        n, first, last = int(lengths.sum()), self.rows - len(rows), self.rows
        if self.size + n > len(self.values):
            self.values = np.concatenate([self.values, np.zeros(max(len(self.values), n), dtype=np.int64)])
        if last > len(self.starts):
            grown = max(len(self.starts), len(rows))
            self.starts = np.concatenate([self.starts, np.zeros(grown, dtype=np.int64)])
            self.lengths = np.concatenate([self.lengths, np.zeros(grown, dtype=np.int64)])
        self.values[self.size:self.size + n] = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64,
                                                           count=n)
        self.lengths[first:last] = lengths
        np.cumsum(lengths, out=self.starts[first:last])
        self.starts[first:last] += self.size - lengths
        self.size += n

    def gather(self, rows: np.ndarray, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(rows' values concatenated, their lengths); ``limit``: only each row's first ``limit`` values."""
        if self.new:
            self._store()
        lengths = self.lengths[rows]
        if limit is not None:
            lengths = np.minimum(lengths, limit)
        ends = np.cumsum(lengths)
        index = np.arange(ends[-1] if len(ends) else 0) + np.repeat(self.starts[rows] - (ends - lengths), lengths)
        return self.values[index], lengths


class _Column:
    """One int64 value per row, in a growing array."""

    def __init__(self) -> None:
        self.values = np.zeros(1 << 10, dtype=np.int64)
        self.rows = 0
        self.new: list[int] = []  # values appended since the last ``array``

    def append(self, value: int) -> None:
        """Append a value (stored with the other new values at the next ``array``)."""
        self.new.append(value)

    def array(self) -> np.ndarray:
        """The values, by row (followed by unused zeros)."""
        if self.new:
            values, self.new = self.new, []
            last = self.rows + len(values)
            if last > len(self.values):
                self.values = np.concatenate([self.values, np.zeros(max(self.rows, len(values)), dtype=np.int64)])
            self.values[self.rows:last] = values
            self.rows = last
        return self.values


class _FeatureCache:
    """Precomputation keyed by strings, and the tables (goals, pairs, observations, admissible sets,
    past-skeleton sets) whose row numbers the batch assembly works with. Bounded: everything is dropped
    at once when a table is large (between batches only, so row numbers stay valid within one).
    Row numbers follow the order in which rows were first seen; each row of the goals, pairs,
    observations and past-skeleton sets also has a key of its content (``*_key``), by which a batch
    orders its distinct rows.
    Per-step entries (memories, inputs' parts) are tuples of numbers and arrays, which Python's
    garbage collector does not have to scan."""

    LIMIT = 200_000
    MEMORY_LIMIT = 50_000  # per-prefix memories: one per step of every episode
    SLOTS_LIMIT = 1 << 20  # scratch rows for ``_rows`` (8 MiB at most)

    def __init__(self) -> None:
        self.goals: dict[str, _Goal] = {}
        self.goal_rows: list[_Goal] = []
        self.goal_ids = _Ragged()  # by goal row: its state features
        self.goal_key = _Column()
        self.actions: dict[str, _ActionText] = {}
        self.pairs: list[_Candidate] = []
        self.pair_linear, self.pair_deep = _Ragged(), _Ragged()  # by pair row: linear_ids, deep_ids
        self.pair_role, self.pair_verb, self.pair_key = _Column(), _Column(), _Column()
        self.texts: dict[str, _Observation] = {}
        self.observations: list[_Observation] = []
        self.observation_ids = _Ragged()  # by observation row: its features (the first OBS_WORDS: its head)
        self.observation_key = _Column()
        self.set_rows: list[_CandidateSet] = []
        self.set_pairs = _Ragged()  # by set row: its candidates' pair rows
        self.n_memories = 0
        self.past_rows: dict[tuple[int, ...], int] = {}
        self.past_sets = _Ragged()  # by row of past_rows: the sorted role skeletons (0 when none)
        self.past_key = _Column()
        self.seen: dict[tuple[int, int], np.ndarray] = {}
        self.inputs: dict[tuple, tuple] = {}  # an input's parts, by its content (``_input_key``)
        self._slots = np.empty(0, dtype=np.int64)

    def full(self) -> bool:
        return max(len(self.pairs), len(self.texts), len(self.set_rows), len(self.past_rows)) > self.LIMIT

    def slots(self, size: int = 0) -> np.ndarray | None:
        """Scratch space for ``_rows``: an int64 array (values undefined) longer than every table and
        than ``size``; None when ``size`` is too large to be worth it."""
        if size > self.SLOTS_LIMIT:
            return None
        size = max(size, len(self.pairs), len(self.observations), len(self.goal_rows), len(self.past_rows))
        if len(self._slots) < size:
            self._slots = np.empty(max(size, 2 * len(self._slots)), dtype=np.int64)
        return self._slots

    def trim(self) -> None:
        """Drop the per-step entries (nothing refers to their rows) when there are many."""
        if self.n_memories > self.MEMORY_LIMIT:
            for goal in self.goal_rows:
                goal.memories.clear()
            self.n_memories = 0
        if len(self.seen) > self.LIMIT:
            self.seen.clear()
        if len(self.inputs) > self.MEMORY_LIMIT:
            self.inputs.clear()

    def goal(self, text: str) -> _Goal:
        g = self.goals.get(text)
        if g is None:
            g = self.goals[text] = _Goal(text, len(self.goal_rows))
            self.goal_rows.append(g)
            self.goal_ids.append(g.ids)
            self.goal_key.append(_content_key(text))
        return g

    def candidate(self, goal: _Goal | str, text: str) -> _Candidate:
        goal = self.goal(goal) if isinstance(goal, str) else goal
        c = goal.candidates.get(text)
        if c is None:
            parts = self.actions.get(text)
            if parts is None:
                parts = self.actions[text] = _ActionText(text)
            c = goal.candidates[text] = _Candidate(goal, text, len(self.pairs), parts)
            self.pairs.append(c)
            self.pair_linear.append(c.linear_ids)
            self.pair_deep.append(c.deep_ids)
            self.pair_role.append(c.role)
            self.pair_verb.append(c.verb)
            self.pair_key.append(_content_key(f"{goal.text}\n{text}"))
        return c

    def observation(self, text: str) -> _Observation:
        o = self.texts.get(text)
        if o is None:
            o = self.texts[text] = _Observation(text, len(self.observations))
            self.observations.append(o)
            self.observation_ids.append(o.ids)
            self.observation_key.append(_content_key(text))
        return o

    def candidate_set(self, goal: _Goal, texts: tuple[str, ...]) -> _CandidateSet:
        s = goal.sets.get(texts)
        if s is None:
            known = goal.candidates
            candidates = list(map(known.get, texts))
            if None in candidates:  # new pairs get their rows in the order of the texts
                candidates = [c or self.candidate(goal, t) for c, t in zip(candidates, texts, strict=True)]
            s = goal.sets[texts] = _CandidateSet(candidates, len(self.set_rows))
            self.set_rows.append(s)
            self.set_pairs.append(tuple([c.index for c in candidates]))
        return s

    def _past_row(self, roles: tuple[int, ...]) -> int:
        row = self.past_rows.get(roles)
        if row is None:
            row = self.past_rows[roles] = self.past_sets.rows
            self.past_sets.append(np.array(roles or (0,), dtype=np.int64))
            self.past_key.append(_content_key(",".join(map(str, roles))))
        return row

    def memory(self, goal: _Goal, past: tuple[str, ...]
               ) -> tuple[dict[str, int], tuple[int, ...], int, tuple[int, ...]]:
        """The memory after the actions ``past``: (how often each was taken, capped at 3; the sorted
        distinct role skeletons of them; that set's row in the table of such sets; the role skeletons of
        the last HISTORY_SKELETONS). Built from the memory one action earlier when that is cached."""
        memories = goal.memories
        m = memories.get(past)
        if m is not None:
            return m
        parent = memories.get(past[:-1]) if past else None
        if parent is not None:
            taken, parent_roles, parent_row, parent_recent = parent
            action = past[-1]
            taken = taken.copy()
            taken[action] = min(taken.get(action, 0) + 1, 3)
            role = (goal.candidates.get(action) or self.candidate(goal, action)).role
            roles = parent_roles if role in parent_roles else tuple(sorted((*parent_roles, role)))
            row = parent_row if roles is parent_roles else self._past_row(roles)
            recent = (*parent_recent, role)[-HISTORY_SKELETONS:]
        else:
            taken = {a: min(n, 3) for a, n in Counter(past).items()}
            roles = tuple(sorted({self.candidate(goal, a).role for a in taken}))
            row = self._past_row(roles)
            recent = tuple(self.candidate(goal, a).role for a in past[-HISTORY_SKELETONS:])
        m = memories[past] = (taken, roles, row, recent)
        self.n_memories += 1
        return m

    def parts(self, inp: ScoreInput, past: tuple[str, ...]) -> tuple:
        """What the batch assembly reads of an input: (goal row, observation row, candidate set row, past
        skeleton set row, last skeleton (``_START`` before any action), recent skeletons (a placeholder 0
        before any), seen mask, how often each candidate was taken). The rollout's inputs come back in the
        update: their parts are kept (``inputs``)."""
        goal = self.goal(inp.goal)
        obs = self.observation(inp.observation)
        cands = self.candidate_set(goal, inp.candidates)
        taken, _, row, recent = self.memory(goal, past)
        n = len(inp.candidates)
        counts = (np.fromiter(map(taken.get, inp.candidates, repeat(0, n)), dtype=np.int64, count=n) if taken
                  else np.zeros(n, dtype=np.int64))
        return (goal.index, obs.index, cands.index, row, recent[-1] if recent else _START, recent or (0,),
                self.seen_mask(obs, cands), counts)

    def seen_mask(self, obs: _Observation, cands: _CandidateSet) -> np.ndarray:
        """Whether each candidate's content words all appear in the observation (0/1)."""
        key = (obs.index, cands.index)
        seen = self.seen.get(key)
        if seen is None:
            contents = cands.contents
            seen = self.seen[key] = np.fromiter(map(obs.words.issuperset, contents), dtype=np.int64,
                                                count=len(contents))
        return seen


def _offsets(*lengths: np.ndarray) -> np.ndarray:
    """EmbeddingBag offsets of consecutive bags with these lengths."""
    lengths = np.concatenate(lengths)
    offsets = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return offsets


def _linear_ids(ids: np.ndarray) -> np.ndarray:
    """Memory and observation crosses as linear-term buckets: a real feature hashed to the padding
    bucket moves next door."""
    ids = ids & _MASK
    ids[ids == 0] = 1
    return ids


def _rows(keys: np.ndarray, slots: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys, sorted; row of each key among them): ``np.unique(keys, return_inverse=True)``.
    ``slots``: when given, an int64 array longer than the largest key (keys >= 0), whose values are
    overwritten: then the distinct keys are found by scattering into it, and only they are sorted."""
    if slots is None:
        distinct, inverse = np.unique(keys, return_inverse=True)
        return distinct, inverse.reshape(-1)
    order = np.arange(len(keys))
    slots[keys] = order  # one position per distinct key wins
    distinct = np.sort(keys[slots[keys] == order])
    slots[distinct] = order[:len(distinct)]
    return distinct, slots[keys]


def _by_content(rows: Sequence[int] | np.ndarray, keys: _Column, slots: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray]:
    """``_rows`` of a table's ``rows`` (distinct rows, the position of each element among them), the
    distinct rows ordered by their content ``keys`` (the table's ``*_key`` column) rather than by when
    they entered the cache: the batch's layout, and so the order in which the backward pass sums
    gradients, does not depend on what the policy scored before (a resumed run equals an uninterrupted
    one bit for bit)."""
    distinct, inverse = _rows(np.asarray(rows, dtype=np.int64), slots)
    order = np.argsort(keys.array()[distinct], kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return distinct[order], rank[inverse]


def _pair_rows(a_of: np.ndarray, b_of: np.ndarray, b_count: int, slots: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct pairs (a, b), lexicographically sorted, of elements given by a's and b's rows among their
    own sorted distinct values (``a_of``, ``b_of``; b has ``b_count`` of them). Returns a's row and b's
    row of each distinct pair, and the row of each element's pair among them."""
    codes, inverse = _rows(a_of * b_count + b_of, slots)  # lexicographic (a, b) is the order of the codes
    return codes // b_count, codes % b_count, inverse


def input_key(inp: ScoreInput) -> tuple:
    """What the features of an input depend on: goal, observation, past actions, candidates."""
    past = inp.past_actions if inp.past_actions else tuple(a for _, a in inp.history)
    return inp.goal, inp.observation, past, inp.candidates

class BowFeatures:
    """The features of batches of score inputs, with the cache that makes repeated ones cheap."""

    def __init__(self) -> None:
        self.cache = _FeatureCache()

    def __call__(self, inputs: Sequence[ScoreInput], keys: Sequence[tuple] | None = None) -> dict[str, torch.Tensor]:
        """The hashed features of every candidate of every input (see the module docstring), factored:

        * the state bag (goal, observation, recent skeletons) as three sums: per distinct goal, per
          distinct observation, per input;
        * per distinct (goal, candidate) pair: its static bag and embedding bag;
        * per distinct (role skeleton, set of past skeletons) and (verb, observation): the bag of their
          crosses;
        * per candidate: its 4 own memory features and the rows of its shared bags.
        Repeated strings and inputs cost one dictionary look-up each (``_FeatureCache``); ``keys``: the
        inputs' ``input_key`` when the caller has them."""
        cache = self.cache
        if cache.full():
            cache = self.cache = _FeatureCache()
        cache.trim()
        known = cache.inputs
        parts = []
        for inp, key in zip(inputs, keys or map(input_key, inputs), strict=True):
            part = known.get(key)
            if part is None:
                part = known[key] = cache.parts(inp, key[2])
            parts.append(part)
        goal_rows, obs_rows, set_rows, past_rows, lasts, recents, seen, counts = zip(*parts, strict=True)
        candidate_pairs, sizes = cache.set_pairs.gather(np.array(set_rows, dtype=np.int64))
        role_of_pair, verb_of_pair = cache.pair_role.array(), cache.pair_verb.array()
        role = role_of_pair[candidate_pairs]
        verb = verb_of_pair[candidate_pairs]
        count = _COUNT[np.concatenate(counts)]
        last = np.repeat(np.array(lasts, dtype=np.int64), sizes)
        own = np.stack([count, _cross(role, count), _cross(role, last),
                        _cross(verb, _SEEN[np.concatenate(seen)])], axis=1)

        slots = cache.slots()  # distinct pairs, goals, observations (and past sets below) in content order
        pairs, pair = _by_content(candidate_pairs, cache.pair_key, slots)
        goal_rows, goal_of = _by_content(goal_rows, cache.goal_key, slots)
        state_rows, state_of = _by_content(obs_rows, cache.observation_key, slots)
        # distinct (role skeleton, past skeletons) and (verb, observation), ordered by (hash, content)
        roles, role_of = _rows(role_of_pair[pairs])
        verbs, verb_of = _rows(verb_of_pair[pairs])
        pasts, past_of = _by_content(past_rows, cache.past_key, slots)
        past_role, past_set, past_bag = _pair_rows(role_of[pair], np.repeat(past_of, sizes), len(pasts),
                                                   cache.slots(len(roles) * len(pasts)))
        obs_verb, obs_row, obs_bag = _pair_rows(verb_of[pair], np.repeat(state_of, sizes), len(state_rows),
                                                cache.slots(len(verbs) * len(state_rows)))
        static, static_len = cache.pair_linear.gather(pairs)
        past_sets, past_len = cache.past_sets.gather(pasts[past_set])
        heads, head_len = cache.observation_ids.gather(state_rows[obs_row], OBS_WORDS)
        # one EmbeddingBag input for the shared linear bags: pairs' static bags, then the two kinds of crosses
        bag_idx = np.concatenate([static,
                                  _linear_ids(_cross(np.repeat(_cross(roles[past_role], _HX), past_len), past_sets)),
                                  _linear_ids(_cross(np.repeat(verbs[obs_verb], head_len), heads))])
        act_idx, act_len = cache.pair_deep.gather(pairs)
        # the state bag's three parts: per distinct goal, per distinct observation, per input
        goal_ids, goal_len = cache.goal_ids.gather(goal_rows)
        obs_ids, obs_len = cache.observation_ids.gather(state_rows)
        recent = _cross(_HS, np.fromiter(itertools.chain.from_iterable(recents), dtype=np.int64))
        recent_len = np.fromiter(map(len, recents), dtype=np.int64, count=len(recents))
        state_idx = np.concatenate([goal_ids, obs_ids, recent]) & (EMBED_BUCKETS - 1)
        n_pairs, n_past, n_goals, n_obs = len(pairs), len(past_set), len(goal_rows), len(state_rows)
        t = torch.from_numpy
        return {"bag_idx": t(bag_idx), "bag_off": t(_offsets(static_len, past_len, head_len)),
                "own": t(_linear_ids(own)), "pair_bag": t(pair), "past_bag": t(past_bag + n_pairs),
                "obs_bag": t(obs_bag + n_pairs + n_past),
                "act_idx": t(act_idx & (EMBED_BUCKETS - 1)), "act_off": t(_offsets(act_len)), "pair": t(pair),
                "state_idx": t(state_idx), "state_off": t(_offsets(goal_len, obs_len, recent_len)),
                "state_goal": t(goal_of), "state_obs": t(state_of + n_goals),
                "state_recent": t(np.arange(len(inputs)) + n_goals + n_obs),
                "state_size": t((goal_len[goal_of] + obs_len[state_of] + recent_len).astype(np.float32)),
                "owner": t(np.repeat(np.arange(len(inputs)), sizes))}
