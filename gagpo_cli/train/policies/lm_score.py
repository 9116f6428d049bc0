"""Score mode of the language model (GLAM / TWOSOME style; ``ScoringMixin``, part of ``lm.Policy``).

The prompt of each step is encoded once and every admissible action continues from its cached keys
and values, all candidates of all steps in one batch (packed one row per prompt, each candidate masked
from the others). The tokens that all prompts of a batch start with (the chat template, the role, a
shared task text: most of a Sokoban prompt) are encoded once for the batch and their cache repeated.
A candidate is scored as the continuation ``{action}</action>``: the closing tag keeps "cabinet 1"
from scoring as a prefix of "cabinet 10". Its score is the sum of the log-probs of
all those tokens, divided (``token``, as TWOSOME, arXiv 2401.13942) by the number of tokens of the
action text alone (encoded on its own, at least 1; the tag's tokens are not counted), by its number of
words (``word``) or not at all (``none``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from gagpo_cli.train.policies.lm_generate import new_cache
from gagpo_cli.train.policies.padding import pad_tokens, plan_micro_batches
from gagpo_cli.train.policies.scoring import ScoreInput, ScoreOutput, check_norm
from gagpo_cli.train.policies.token_logprobs import token_logprobs
from gagpo_cli.train.prompts import SCORE_OPEN, candidate_text, render_score_prompt

ENCODE_CACHE_SIZE = 16384  # distinct prompt / candidate texts whose token ids are kept


def length_buckets(lengths: Sequence[int], slack: float) -> list[list[int]]:
    """Indices of ``lengths`` grouped, longest first, so that padding every group to its longest member
    adds at most ``slack`` x its real tokens (every index exactly once)."""
    buckets: list[list[int]] = []
    total = 0
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        if buckets and lengths[buckets[-1][0]] * (len(buckets[-1]) + 1) <= (1 + slack) * (total + lengths[i]):
            buckets[-1].append(i)
            total += lengths[i]
        else:
            buckets.append([i])
            total = lengths[i]
    return buckets


def shared_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """Tokens every row starts with, leaving at least one token of each row after them (0 for one row:
    nothing to share)."""
    if len(rows) < 2:
        return 0
    shortest = min(len(r) for r in rows) - 1
    first = rows[0]
    for i in range(shortest):
        token = first[i]
        if any(r[i] != token for r in rows):
            return i
    return max(shortest, 0)


@dataclass
class _Pairs:
    """The distinct prompts of a ``score_actions`` call and its distinct (prompt, action) pairs."""

    prompts: list[tuple[int, ...]]  # distinct prompt ids
    prompt_of: list[int]  # input -> distinct prompt
    pair_prompt: torch.Tensor  # (P,) pair -> distinct prompt
    pair_ids: list[tuple[int, ...]]  # (P) candidate continuation ids
    index: list[list[int]]  # input -> pair of each of its candidates
    denominators: list[float]  # (P) length normalisation of each pair

    def of_prompt(self) -> list[list[int]]:
        """The pairs of each distinct prompt."""
        found: list[list[int]] = [[] for _ in self.prompts]
        for k, u in enumerate(self.pair_prompt.tolist()):
            found[u].append(k)
        return found


class ScoringMixin:
    """Score mode for ``lm.Policy``, which provides ``tokenizer``, ``cfg``, ``model``, ``device``,
    ``pad_id``, ``hidden_size``, ``autocast()``, ``acting(reference)``, ``decoder_cache_arg`` and the
    class settings ``score_packing`` / ``score_pad_slack``; ``init_score_caches()`` runs at construction."""

    score_packing = True  # score mode packs a prompt's candidates in one row (False: one row per candidate)
    score_pad_slack = 0.1  # score mode: prompts of similar length share a forward, padding <= 10% of the tokens
    score_shared_prefix = True  # score mode: the tokens all prompts of a forward start with are read once
    score_chunk_tokens = 16384  # score mode: prompts per forward capped at this many padded tokens (the keys
    # and values of 16k tokens: ~0.75 GB for SmolLM2-135M in float32), so memory does not grow with the batch

    def init_score_caches(self) -> None:
        """Token ids of repeated texts (a group's K rollouts share prompts; the update re-scores them)."""
        self._score_prompt_ids = functools.lru_cache(maxsize=ENCODE_CACHE_SIZE)(self._encode_score_prompt)
        self._candidate_ids = functools.lru_cache(maxsize=ENCODE_CACHE_SIZE)(self._encode_candidate)
        self._action_tokens = functools.lru_cache(maxsize=ENCODE_CACHE_SIZE)(self._count_action_tokens)

    # ------------------------------------------------------------------------------ tokens

    def score_prompt_text(self, inp: ScoreInput) -> str:
        """The full text the candidates continue: the chat-templated user message + ``<action>``."""
        user = render_score_prompt(inp.env_name, goal=inp.goal, observation=inp.observation,
                                   admissible_actions=inp.candidates, history=inp.history,
                                   step_count=inp.step_count, list_actions=inp.list_actions)
        return self.tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True,
                                                  tokenize=False) + SCORE_OPEN

    def _encode_score_prompt(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _encode_candidate(self, action: str) -> tuple[int, ...]:
        ids = tuple(self.tokenizer(candidate_text(action), add_special_tokens=False)["input_ids"])
        if not ids:
            raise ValueError(f"candidate action {action!r} has no tokens")
        return ids

    def _count_action_tokens(self, action: str) -> int:
        """Tokens of the action text encoded on its own (the ``token`` normalisation's divisor), at least 1."""
        return max(1, len(self.tokenizer(action, add_special_tokens=False)["input_ids"]))

    def action_length(self, action: str) -> int:
        """Tokens of an action text on its own, at least 1 (a score-mode step's response length)."""
        return self._action_tokens(action)

    def score_tokens(self, inp: ScoreInput) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
        """(prompt ids, one id tuple per candidate) exactly as ``score_actions`` scores them."""
        return self._score_prompt_ids(self.score_prompt_text(inp)), [self._candidate_ids(a) for a in inp.candidates]

    def score_cost(self, inp: ScoreInput) -> int:
        """Tokens one input costs in ``score_actions``: its prompt plus all its candidates."""
        prompt, candidates = self.score_tokens(inp)
        return len(prompt) + sum(len(c) for c in candidates)

    def _pairs(self, inputs: Sequence[ScoreInput], norm: str) -> _Pairs:
        """Each distinct prompt and each distinct (prompt, action) pair of ``inputs``, scored once."""
        unique_prompts: dict[tuple[int, ...], int] = {}
        prompt_of = [unique_prompts.setdefault(self.score_tokens(inp)[0], len(unique_prompts)) for inp in inputs]
        pairs: dict[tuple[int, str], int] = {}  # (distinct prompt, action) -> row of the candidate batch
        index = [[pairs.setdefault((prompt_of[i], a), len(pairs)) for a in inp.candidates]
                 for i, inp in enumerate(inputs)]
        if norm == "token":
            denominators = [float(self._action_tokens(a)) for _, a in pairs]
        elif norm == "word":
            denominators = [float(max(1, len(a.split()))) for _, a in pairs]
        else:
            denominators = [1.0] * len(pairs)
        return _Pairs(prompts=list(unique_prompts), prompt_of=prompt_of,
                      pair_prompt=torch.tensor([p for p, _ in pairs], dtype=torch.long),
                      pair_ids=[self._candidate_ids(a) for _, a in pairs], index=index, denominators=denominators)

    # ------------------------------------------------------------------------------ scores

    def score_actions(self, inputs: Sequence[ScoreInput], *, norm: str = "token", reference: bool = False,
                      with_state: bool = False) -> ScoreOutput:
        """Length-normalised log-likelihood of every candidate of every input (see the module docstring).

        Batched forwards per group of distinct prompts of similar length (``length_buckets``, to bound
        padding; at most ``score_chunk_tokens`` padded prompt tokens per group, ``plan_micro_batches``): the
        prefix the group's prompts share (one row, ``score_shared_prefix``), the rest of each prompt
        (right padded) after it, then every distinct (prompt, candidate) pair
        continuing from its prompt's cached keys and values, never re-encoding the prompt: packed, all
        candidates of a prompt in one row under a 4D mask (eager / sdpa attention), else one row per
        candidate over repeated cache rows. ``logits[i][j]`` = sum of the token log-probs of
        ``candidate_text(candidates[j])`` (the action and its closing tag) after input i's prompt, divided
        by the number of tokens of the action alone (``norm='token'``, TWOSOME's token normalisation: the
        tag's tokens are scored but not counted), by the number of words of the action (``'word'``, at
        least 1) or by 1 (``'none'``); float32, differentiable when gradients are enabled.
        ``reference=True`` scores with the reference policy. ``with_state``: ``state`` is the (B, H)
        float32 last hidden state of each prompt (the state s_t, for a critic).
        """
        check_norm(norm)
        for inp in inputs:
            if not inp.candidates:
                raise ValueError("score_actions: every input needs at least one candidate action")
        if not inputs:
            return ScoreOutput(logits=[], state=torch.zeros((0, self.hidden_size)) if with_state else None)
        pairs = self._pairs(inputs, norm)
        device = self.device
        predictors, targets, owners, lasts, order = [], [], [], [], []
        with self.acting(reference) as model:
            pairs_of_prompt = pairs.of_prompt()
            lengths = [len(p) for p in pairs.prompts]
            buckets = [[bucket[j] for j in chunk] for bucket in length_buckets(lengths, self.score_pad_slack)
                       for chunk in plan_micro_batches([lengths[u] for u in bucket], self.score_chunk_tokens)]
            for bucket in buckets:
                members = [k for u in bucket for k in pairs_of_prompt[u]]
                pred, tgt, own, last = self._score_bucket(model, reference, pairs, bucket, members)
                predictors.append(pred)
                targets.append(tgt)
                owners.append(torch.tensor(members, dtype=torch.long, device=device)[own])
                lasts.append(last)
                order += bucket
            logprobs = self._head_logprobs(model, torch.cat(predictors), torch.cat(targets))
        pair_of_token = torch.cat(owners)
        last = torch.cat(lasts)[torch.tensor(order).argsort().to(device)]  # back to distinct-prompt order
        sums = torch.zeros(len(pairs.pair_ids), device=device, dtype=torch.float32).index_add(
            0, pair_of_token, logprobs)
        scores = sums / torch.tensor(pairs.denominators, device=device)
        logits = [scores[torch.tensor(rows, device=device)] for rows in pairs.index]
        state = last[torch.tensor(pairs.prompt_of, device=device)].float() if with_state else None
        return ScoreOutput(logits=logits, state=state)

    def _score_bucket(self, model: nn.Module, reference: bool, pairs: _Pairs, bucket: list[int],
                      members: list[int]):
        """One bucket of distinct prompts: the prompts' forward, then their candidates' continuation.
        Returns (predicting hidden states, target ids, member of each target, (U, H) last prompt states)."""
        device = self.device
        decoder = model.get_decoder()
        continue_ = self._continue_packed if self._packed_candidates(model) else self._continue_repeated
        local = {u: j for j, u in enumerate(bucket)}
        prompts = [pairs.prompts[u] for u in bucket]
        shared = shared_prefix_length(prompts) if self.score_shared_prefix else 0
        suffix_ids, suffix_mask = pad_tokens([p[shared:] for p in prompts], self.pad_id)
        prompt_lens = torch.tensor([len(p) for p in prompts], dtype=torch.long)
        cache = new_cache(model)
        with self.autocast():
            with self._reading_prompt(reference):
                if shared:  # the tokens every prompt of the bucket starts with: one row, its cache repeated
                    decoder(input_ids=torch.tensor([prompts[0][:shared]], device=device), use_cache=True,
                            **{self.decoder_cache_arg: cache})
                    cache.batch_repeat_interleave(len(prompts))
                mask = torch.cat([torch.ones((len(prompts), shared), dtype=torch.long), suffix_mask], dim=1)
                hidden = decoder(input_ids=suffix_ids.to(device), attention_mask=mask.to(device),
                                 position_ids=(shared + suffix_mask.cumsum(-1) - 1).clamp(min=0).to(device),
                                 use_cache=True, **{self.decoder_cache_arg: cache}).last_hidden_state
            last = hidden[torch.arange(len(bucket), device=device), (prompt_lens - 1 - shared).to(device)]
            member_prompt = torch.tensor([local[int(pairs.pair_prompt[k])] for k in members], dtype=torch.long)
            pred, tgt, own = continue_(decoder, cache, last, prompt_lens, member_prompt,
                                       [pairs.pair_ids[k] for k in members])
        return pred, tgt, own, last

    @contextlib.contextmanager
    def _reading_prompt(self, reference: bool) -> Iterator[None]:
        """How the prompt of a scored step is read: by the acting model, or with ``model.lora_scope:
        action`` by the frozen base model (adapter off, no gradient), so that the adapter acts on the
        action tokens only and the backward pass never enters the prompt."""
        if reference or not self.cfg.lora or self.cfg.lora_scope == "all":
            yield
            return
        with torch.no_grad(), self.model.disable_adapter():
            yield

    def _packed_candidates(self, model: nn.Module) -> bool:
        """Whether the candidates can share one row per prompt (an explicit 4D mask: eager and sdpa attention)."""
        return self.score_packing and getattr(model.config, "_attn_implementation", "eager") in ("eager", "sdpa")

    def _continue_packed(self, decoder: nn.Module, cache, last: torch.Tensor, prompt_lens: torch.Tensor,
                         pair_prompt: torch.Tensor, pair_ids: list[tuple[int, ...]]):
        """All candidates of a prompt packed in ONE row after its cached prompt; a 4D mask lets each
        candidate token see the prompt's real tokens and the earlier tokens of its own candidate only
        (positions restart after the prompt for every candidate), so nothing of the cache is copied.
        Returns (predicting hidden states, target ids, candidate of each target), one entry per token."""
        device = self.device
        n_prompts, width = len(prompt_lens), cache.get_seq_length()
        fill = [0] * n_prompts
        rows, cols, offsets, owners = [], [], [], []
        for k, (u, ids) in enumerate(zip(pair_prompt.tolist(), pair_ids, strict=True)):
            rows += [u] * len(ids)
            cols += range(fill[u], fill[u] + len(ids))
            offsets += range(len(ids))
            owners += [k] * len(ids)
            fill[u] += len(ids)
        rows_t, cols_t = torch.tensor(rows), torch.tensor(cols)
        offsets_t, owners_t = torch.tensor(offsets), torch.tensor(owners)
        packed = max(fill)
        ids = torch.full((n_prompts, packed), self.pad_id, dtype=torch.long)
        ids[rows_t, cols_t] = torch.tensor([t for c in pair_ids for t in c], dtype=torch.long)
        segment = torch.full((n_prompts, packed), -1, dtype=torch.long)  # candidate of each packed token
        segment[rows_t, cols_t] = owners_t
        positions = prompt_lens[:, None].expand(n_prompts, packed).clone()
        positions[rows_t, cols_t] += offsets_t
        own = (segment[:, :, None] == segment[:, None, :]) & (segment[:, :, None] >= 0)
        causal = torch.ones(packed, packed, dtype=torch.bool).tril()
        sees_prompt = (torch.arange(width)[None, :] < prompt_lens[:, None])[:, None, :].expand(-1, packed, -1)
        mask = torch.cat([sees_prompt, own & causal], dim=-1)[:, None]  # (U, 1, packed, width + packed)
        if getattr(decoder.config, "_attn_implementation", "eager") == "eager":
            mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
        hidden = decoder(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                         use_cache=True, **{self.decoder_cache_arg: cache}).last_hidden_state
        # Token j of a candidate is predicted by the hidden state before it: the prompt's last for j = 0.
        first = offsets_t == 0
        prev = hidden[rows_t.to(device), (cols_t - 1).clamp(min=0).to(device)]
        predictors = torch.where(first.to(device)[:, None], last[rows_t.to(device)], prev)
        return predictors, ids[rows_t, cols_t].to(device), owners_t.to(device)

    def _continue_repeated(self, decoder: nn.Module, cache, last: torch.Tensor, prompt_lens: torch.Tensor,
                           pair_prompt: torch.Tensor, pair_ids: list[tuple[int, ...]]):
        """One row per candidate, the prompt's cache rows repeated for it (any attention implementation;
        memory grows with candidates x prompt length). Same return as ``_continue_packed``."""
        device = self.device
        prompt_mask = (torch.arange(cache.get_seq_length())[None, :] < prompt_lens[:, None]).long()
        cand_ids, cand_mask = pad_tokens(pair_ids, self.pad_id)
        # RoPE positions: each candidate continues right after its own prompt's last real token.
        cand_positions = prompt_lens[pair_prompt, None] + torch.arange(cand_ids.shape[1])
        attention = torch.cat([prompt_mask[pair_prompt], cand_mask], dim=1)
        cache.batch_select_indices(pair_prompt.to(device))
        cand_hidden = decoder(input_ids=cand_ids.to(device), attention_mask=attention.to(device),
                              position_ids=cand_positions.to(device), use_cache=True,
                              **{self.decoder_cache_arg: cache}).last_hidden_state
        predictors = torch.cat([last[pair_prompt.to(device), None], cand_hidden[:, :-1]], dim=1)
        real = cand_mask.bool()
        owners = torch.arange(len(pair_ids))[:, None].expand_as(real)[real]
        return predictors[real.to(device)], cand_ids[real].to(device), owners.to(device)

    def _head_logprobs(self, model: nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(target | hidden) per row, the output projection in float32 outside autocast, a chunk of
        rows at a time with or without gradients (``token_logprobs``)."""
        head = model.get_output_embeddings()
        return token_logprobs(hidden, head.weight, head.bias, targets, self.final_logits)[0]
