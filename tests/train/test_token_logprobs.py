"""Token log-probs, entropies and their gradients computed a chunk of rows at a time equal the plain
whole-batch ``log_softmax`` (to 1e-6), and a training pass of the language model never holds a
(tokens x vocabulary) tensor larger than one chunk."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tiny_model import tiny_policy
from torch.utils._python_dispatch import TorchDispatchMode

import gagpo_cli.train.policies.token_logprobs as token_logprobs_module
from gagpo_cli.train.policies.token_logprobs import chunk_rows, token_logprobs


def _plain(hidden, weight, bias, targets, logits_map, temperature):
    """The whole batch at once: one (rows x vocabulary) float32 tensor (the computation chunks replace)."""
    log_dist = F.log_softmax(logits_map(F.linear(hidden, weight, bias)) / temperature, dim=-1)
    return log_dist.gather(-1, targets[..., None]).squeeze(-1), -(log_dist.exp() * log_dist).sum(-1)


def _softcap(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x / 3.0) * 3.0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("logits_map", [lambda x: x, _softcap], ids=["identity", "softcap"])
def test_chunked_logprobs_entropies_and_gradients_equal_the_plain_ones(temperature, logits_map):
    gen = torch.Generator().manual_seed(0)
    vocab, size = 300, 16
    hidden = torch.randn(3, 11, size, generator=gen, dtype=torch.float64).float().requires_grad_()
    weight = torch.randn(vocab, size, generator=gen).requires_grad_()
    bias = torch.randn(vocab, generator=gen).requires_grad_()
    targets = torch.randint(0, vocab, (3, 11), generator=gen)
    weights = torch.randn(2, 3, 11, generator=gen)  # a loss that reads both outputs

    def run(chunked: bool) -> list[torch.Tensor]:
        for t in (hidden, weight, bias):
            t.grad = None
        if chunked:  # 4 rows per chunk: 33 rows in 9 chunks, the last one short
            logp, ent = token_logprobs(hidden, weight, bias, targets, logits_map, temperature=temperature,
                                       with_entropy=True, elements=4 * vocab)
        else:
            logp, ent = _plain(hidden, weight, bias, targets, logits_map, temperature)
        ((logp * weights[0]).sum() + (ent * weights[1]).sum()).backward()
        return [logp.detach(), ent.detach(), hidden.grad, weight.grad, bias.grad]

    for plain, chunked in zip(run(False), run(True), strict=True):
        torch.testing.assert_close(chunked, plain, atol=1e-6, rtol=1e-6)
    no_entropy, none = token_logprobs(hidden, weight, bias, targets, logits_map, temperature=temperature,
                                      elements=4 * vocab)
    assert none is None and no_entropy.shape == targets.shape


def test_rows_per_chunk_follow_the_vocabulary():
    assert chunk_rows(49152, 1 << 23) == 170  # SmolLM2
    assert chunk_rows(151936, 1 << 23) == 55  # Qwen2.5
    assert chunk_rows(10**9, 1 << 23) == 1


class _LargestVocabularyTensor(TorchDispatchMode):
    """Records the most rows of any tensor an operation creates whose last dimension is the vocabulary
    (views, e.g. the weight's transpose, excluded)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab, self.rows = vocab, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == self.vocab:
                    self.rows = max(self.rows, t.numel() // self.vocab)
        return out


def test_a_training_pass_holds_one_chunk_of_logits_at_most_and_equals_the_plain_computation(monkeypatch):
    """Generate mode's forward + backward on 4 rows x 12 response tokens (48 targets), 8 rows per chunk:
    no (rows x vocabulary) tensor of more than 8 rows, and the log-probs, entropies and LoRA gradients
    of the plain computation over the model's own full logits."""
    policy = tiny_policy()
    vocab = policy.base_model.config.vocab_size
    monkeypatch.setattr(token_logprobs_module, "CHUNK_ELEMENTS", 8 * vocab)
    gen = torch.Generator().manual_seed(3)
    rows = [(torch.randint(5, vocab, (n,), generator=gen).tolist(),
             torch.randint(5, vocab, (12,), generator=gen).tolist()) for n in (20, 9, 14, 30)]
    batch = policy.collate(rows)
    params = policy.trainable_parameters()

    watch = _LargestVocabularyTensor(vocab)
    with watch:
        out = policy.forward(batch, with_entropy=True, temperature=0.8)
        (out.logprobs.sum() + out.entropy.sum()).backward()
    assert 0 < watch.rows <= 8
    chunked = [out.logprobs.detach(), out.entropy.detach(), *[p.grad.clone() for p in params]]

    policy.model.zero_grad(set_to_none=True)
    logits = policy.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    picked = logits.gather(1, batch.target_positions[..., None].expand(-1, -1, vocab)).float()
    log_dist = F.log_softmax(picked / 0.8, dim=-1)
    logp = log_dist.gather(-1, batch.targets[..., None]).squeeze(-1) * batch.response_mask
    ent = -(log_dist.exp() * log_dist).sum(-1) * batch.response_mask
    (logp.sum() + ent.sum()).backward()
    plain = [logp.detach(), ent.detach(), *[p.grad for p in params]]
    for a, b in zip(chunked, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5 * max(1.0, float(b.abs().max())), rtol=1e-5)
