"""Loss functions against hand-computed values (arithmetic written out in each test)."""

from __future__ import annotations

import math

import pytest
import torch

from gagpo_cli.train.learning.loss import (
    Denominators,
    aggregate,
    clipped_value_loss,
    k3_kl,
    policy_loss,
    sequence_ratio_loss,
    token_ratio_loss,
)

LN = math.log


def test_aggregate_seq_mean_token_mean_vs_token_mean():
    x = torch.tensor([[1.0, 3.0, 0.0], [10.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    denom = Denominators(actions=2, tokens=3)
    # seq-mean-token-mean: ((1 + 3) / 2 + 10 / 1) / 2 = (2 + 10) / 2 = 6
    assert aggregate(x, mask, "seq-mean-token-mean", denom).item() == pytest.approx(6.0)
    # token-mean: (1 + 3 + 10) / 3 = 14 / 3
    assert aggregate(x, mask, "token-mean", denom).item() == pytest.approx(14 / 3)
    # global denominators: the same rows counted in a batch of 4 actions / 6 tokens give half the share
    assert aggregate(x, mask, "seq-mean-token-mean", Denominators(4, 6)).item() == pytest.approx(3.0)
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(x, mask, "sum", denom)


def test_sequence_ratio_is_length_normalised_and_clipped_per_action():
    # action 0: two tokens, log-ratio 0.1 and 0.3 -> mean 0.2 -> rho = e^0.2 = 1.2214 > 1.2, A = +1
    #   -> L = -min(1.2214 * 1, 1.2 * 1) = -1.2, clipped (no gradient)
    # action 1: one token, log-ratio ln(0.9) -> rho = 0.9 in range, A = -2 -> L = -min(-1.8, -1.8) = 1.8
    old = torch.zeros(2, 2)
    new = torch.tensor([[0.1, 0.3], [LN(0.9), 5.0]])  # 5.0 sits on padding and must be ignored
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    terms = sequence_ratio_loss(new, old, adv, mask, 0.2, 0.2)
    assert terms.loss[0, 0].item() == pytest.approx(-1.2)
    assert terms.loss[0, 1].item() == pytest.approx(-1.2)
    assert terms.loss[1, 0].item() == pytest.approx(1.8)
    assert terms.ratio[0, 0].item() == pytest.approx(math.exp(0.2))
    assert terms.clipped[:, 0].tolist() == [1.0, 0.0]
    # seq-mean-token-mean over 2 actions: (-1.2 + 1.8) / 2 = 0.3
    assert aggregate(terms.loss, mask, "seq-mean-token-mean", Denominators(2, 3)).item() == pytest.approx(0.3)


def test_sequence_ratio_gradient_reaches_every_token_of_an_unclipped_action():
    # rho = exp((x0 + x1) / 2) at x = 0 is 1; L = -A * rho, A = 3 -> dL/dx_t = -3 * 1 / 2 = -1.5 for each token
    new = torch.zeros(1, 2, requires_grad=True)
    terms = sequence_ratio_loss(new, torch.zeros(1, 2), torch.tensor([3.0]), torch.ones(1, 2), 0.2, 0.2)
    aggregate(terms.loss, torch.ones(1, 2), "seq-mean-token-mean", Denominators(1, 2)).backward()
    assert new.grad.tolist() == [[pytest.approx(-1.5), pytest.approx(-1.5)]]


def test_token_ratio_ppo_clip_and_dual_clip():
    # A = +1 tokens: r = 1.5 -> min(1.5, 1.2) = 1.2 -> L = -1.2 (clipped); r = 0.5 -> min(0.5, 0.8) = 0.5 -> L = -0.5
    # A = -1 tokens: r = 5 -> max(-A r, -A clip r) = max(5, 1.2) = 5 -> dual clip min(5, 3 * 1) = 3
    #                r = 0.5 -> max(0.5, 0.8) = 0.8 -> L = 0.8 (clipped), below the dual bound 3
    old = torch.zeros(2, 2)
    new = torch.tensor([[LN(1.5), LN(0.5)], [LN(5.0), LN(0.5)]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 2)
    terms = token_ratio_loss(new, old, adv, mask, 0.2, 0.2, 3.0)
    expected = [[-1.2, -0.5], [3.0, 0.8]]
    for got, want in zip(terms.loss.flatten().tolist(), sum(expected, []), strict=True):
        assert got == pytest.approx(want, abs=1e-6)
    assert terms.clipped.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert terms.dual_clipped.tolist() == [[0.0, 0.0], [1.0, 0.0]]
    # token-mean over 4 tokens: (-1.2 - 0.5 + 3 + 0.8) / 4 = 0.525
    assert aggregate(terms.loss, mask, "token-mean", Denominators(2, 4)).item() == pytest.approx(0.525)


def test_k3_kl_values():
    # ref - logp = d: kl = e^d - d - 1; d = 0 -> 0; d = ln 2 -> 2 - 0.693147 - 1 = 0.306853; d = -1 -> e^-1 = 0.367879
    logp = torch.tensor([-1.0, -1.0, -1.0])
    ref = torch.tensor([-1.0, -1.0 + LN(2.0), -2.0])
    kl = k3_kl(logp, ref)
    assert kl.tolist() == [pytest.approx(0.0), pytest.approx(2 - LN(2) - 1), pytest.approx(math.exp(-1))]


def test_policy_loss_total_combines_pg_kl_and_entropy():
    # one action, two tokens, on-policy (ratio 1), A = 2 -> pg = -2 per token -> seq-mean-token-mean -2
    # ref - logp = [ln 2, 0] -> k3 = [0.306853, 0] -> mean over the action 0.153426
    # entropy [1.0, 3.0] -> mean 2.0
    # total = -2 + 0.01 * 0.153426 - 0.001 * 2 = -2.000465737
    logp = torch.tensor([[-1.0, -2.0]])
    ref = logp + torch.tensor([[LN(2.0), 0.0]])
    shares = policy_loss(logp, logp, ref, torch.tensor([[1.0, 3.0]]), torch.tensor([2.0]), torch.ones(1, 2),
                         ratio_mode="sequence", loss_agg="seq-mean-token-mean", denom=Denominators(1, 2),
                         clip_low=0.2, clip_high=0.2, dual_clip=3.0, kl_coef=0.01, entropy_coef=0.001)
    kl = (2 - LN(2) - 1) / 2
    assert shares.kl == pytest.approx(kl)
    assert shares.entropy == pytest.approx(2.0)
    assert shares.pg_loss == pytest.approx(-2.0)
    assert shares.loss.item() == pytest.approx(-2.0 + 0.01 * kl - 0.001 * 2.0)
    assert shares.ratio_mean == pytest.approx(1.0)
    assert shares.clipfrac == 0.0 and shares.approx_kl == pytest.approx(0.0)
    with pytest.raises(ValueError, match="ratio mode"):
        policy_loss(logp, logp, None, None, torch.tensor([2.0]), torch.ones(1, 2), ratio_mode="seq",
                    loss_agg="token-mean", denom=Denominators(1, 2), clip_low=0.2, clip_high=0.2, dual_clip=3.0,
                    kl_coef=0.0, entropy_coef=0.0)


def test_sequence_and_token_modes_differ_on_uneven_token_ratios():
    # tokens with log-ratios [0.4, -0.4]: sequence rho = e^0 = 1 -> L = -A = -1 per token;
    # token mode: r = [1.4918, 0.6703], A = 1 -> -min(r, clip r) = [-1.2, -0.6703] -> token-mean -0.93516
    new = torch.tensor([[0.4, -0.4]])
    mask = torch.ones(1, 2)
    adv = torch.tensor([1.0])
    seq = sequence_ratio_loss(new, torch.zeros(1, 2), adv, mask, 0.2, 0.2)
    tok = token_ratio_loss(new, torch.zeros(1, 2), adv, mask, 0.2, 0.2, 3.0)
    assert aggregate(seq.loss, mask, "seq-mean-token-mean", Denominators(1, 2)).item() == pytest.approx(-1.0)
    assert aggregate(tok.loss, mask, "token-mean", Denominators(1, 2)).item() == pytest.approx(
        (-1.2 - math.exp(-0.4)) / 2)


def test_clipped_value_loss():
    # row 0: v = 1.5, v_old = 1, R = 2: v_clip = 1.2; (1.5-2)^2 = 0.25, (1.2-2)^2 = 0.64 -> 0.5 * 0.64 = 0.32 (clipped)
    # row 1: v = 0.9, v_old = 1, R = 0: v_clip = 0.9 (inside 0.2); 0.81 both -> 0.405, not clipped
    loss, clipped = clipped_value_loss(torch.tensor([1.5, 0.9]), torch.tensor([1.0, 1.0]), torch.tensor([2.0, 0.0]),
                                       0.2)
    assert loss.tolist() == [pytest.approx(0.32), pytest.approx(0.405)]
    assert clipped.tolist() == [1.0, 0.0]
