"""The policy loss follows verl's ``verl/trainer/ppo/core_algos.py`` on each numeric point.

Hand-worked tests pin each clamp and rule (arithmetic in the comments); one test compares a whole batch,
values and gradients, with literal numbers produced from verl's own functions (see its docstring).
"""

from __future__ import annotations

import math

import pytest
import torch
from tiny_model import tiny_policy

from gagpo_cli.config import OptimConfig
from gagpo_cli.train.learning.generate_update import GenerateUpdater
from gagpo_cli.train.learning.loss import Denominators, aggregate, k3_kl, policy_loss, sequence_ratio_loss


def _grad(fn, x: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    fn(x).sum().backward()
    return x.grad


def test_k3_value_is_clamped_to_10_with_no_gradient_beyond():
    # d = ref - logp. k3 = e^d - d - 1, d k3 / d logp = -(e^d - 1) = 1 - e^d
    #   d = ln 2: 2 - ln 2 - 1 = 0.306853, gradient 1 - 2 = -1
    #   d = 3:    e^3 - 4 = 16.0855 > 10 -> 10, gradient 0 (the far-off token: 16.1 and -19.1 before)
    #   d = 25:   clamped to 20 first, e^20 - 21 -> 10, gradient 0
    #   d = -21:  clamped to -20 first, e^-20 + 19 = 19.000000002 -> 10, gradient 0
    #   d = -2:   e^-2 + 1 = 1.135335, gradient 1 - e^-2 = 0.864665
    ref_minus_logp = torch.tensor([math.log(2.0), 3.0, 25.0, -21.0, -2.0], dtype=torch.float64)
    logp = torch.full((5,), -1.0, dtype=torch.float64)
    ref = logp + ref_minus_logp
    assert k3_kl(logp, ref).tolist() == pytest.approx([2 - math.log(2) - 1, 10.0, 10.0, 10.0, math.exp(-2) + 1])
    grad = _grad(lambda x: k3_kl(x, ref), logp)
    assert grad.tolist() == pytest.approx([-1.0, 0.0, 0.0, 0.0, 1 - math.exp(-2)])


def test_sequence_log_ratio_is_clamped_above_at_10_only():
    # per-action log-ratio = mean over its tokens:
    #   action 0: [11, 13] -> 12 -> clamped to 10: rho = e^10; A = -1 -> L = max(e^10, 1.2) = e^10, gradient 0
    #   action 1: [9, 9]  -> 9, below the clamp: rho = e^9, L = e^9, dL/dx_t = e^9 / 2 per token
    #   action 2: [-25, -25] -> -25, NOT clamped below (the old guard gave e^-20): rho = e^-25; A = +1 ->
    #             L = max(-e^-25, -0.8) = -e^-25 (unclipped), dL/dx_t = -e^-25 / 2
    new = torch.tensor([[11.0, 13.0], [9.0, 9.0], [-25.0, -25.0]], dtype=torch.float64)
    old = torch.zeros_like(new)
    mask = torch.ones_like(new)
    adv = torch.tensor([-1.0, -1.0, 1.0], dtype=torch.float64)
    terms = sequence_ratio_loss(new, old, adv, mask, 0.2, 0.2)
    assert terms.ratio[:, 0].tolist() == pytest.approx([math.exp(10), math.exp(9), math.exp(-25)], rel=1e-12)
    assert terms.loss[:, 0].tolist() == pytest.approx([math.exp(10), math.exp(9), -math.exp(-25)], rel=1e-12)
    grad = _grad(lambda x: sequence_ratio_loss(x, old, adv, mask, 0.2, 0.2).loss[:, 0], new)
    assert grad.tolist() == [[0.0, 0.0], [pytest.approx(math.exp(9) / 2)] * 2, [pytest.approx(-math.exp(-25) / 2)] * 2]


def _two_actions(ratio_mode: str = "sequence"):
    # action 0: 3 tokens, log-ratio 0.5 each -> rho = e^0.5 = 1.6487 > 1.2 with A = +1: clipped
    # action 1: 1 token, log-ratio 0 -> rho = 1: not clipped
    new = torch.tensor([[0.5, 0.5, 0.5], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    entropy = torch.tensor([[1.0, 1.0, 1.0], [5.0, 0.0, 0.0]])
    return dict(logp=new, old_logp=torch.zeros(2, 3), ref_logp=new.clone(), entropy=entropy,
                advantages=torch.tensor([1.0, 1.0]), mask=mask, ratio_mode=ratio_mode,
                loss_agg="seq-mean-token-mean", denom=Denominators(actions=2, tokens=4), clip_low=0.2,
                clip_high=0.2, dual_clip=3.0, kl_coef=0.01, entropy_coef=0.001)


def test_sequence_clip_fraction_counts_tokens_like_verl():
    # 3 of the 4 tokens belong to the clipped action: 0.75 (counting actions would give 1 / 2)
    assert policy_loss(**_two_actions()).clipfrac == pytest.approx(0.75)


@pytest.mark.parametrize(("option", "entropy"), [
    (None, 2.0),  # default = verl's loss_agg_mode default, token-mean: (1 + 1 + 1 + 5) / 4 = 2
    ("token-mean", 2.0),
    ("seq-mean-token-mean", 3.0),  # (mean(1, 1, 1) + 5) / 2 = 3
    ("policy", 3.0),  # the policy term's aggregation (here seq-mean-token-mean): the old behaviour
])
def test_kl_and_entropy_aggregation_option(option, entropy):
    kwargs = _two_actions()
    if option is not None:
        kwargs["kl_entropy_agg"] = option
    shares = policy_loss(**kwargs)
    assert shares.entropy == pytest.approx(entropy)
    # the policy term keeps the estimator's aggregation: action 0 L = -1.2 per token, action 1 L = -1 -> -1.1
    assert shares.pg_loss == pytest.approx(-1.1)
    assert shares.kl == pytest.approx(0.0)  # ref = logp
    assert shares.loss.item() == pytest.approx(-1.1 - 0.001 * entropy)


def test_kl_aggregation_follows_the_option_too():
    kwargs = _two_actions()
    kwargs["ref_logp"] = kwargs["logp"] + torch.tensor([[math.log(2.0)] * 3, [0.0, 0.0, 0.0]])
    k = 2 - math.log(2) - 1  # k3 of each token of action 0; action 1 has k3 = 0
    assert policy_loss(**kwargs).kl == pytest.approx(3 * k / 4)  # token-mean
    assert policy_loss(**kwargs, kl_entropy_agg="policy").kl == pytest.approx(k / 2)  # seq-mean-token-mean


def test_bad_kl_entropy_agg_is_a_one_line_error():
    with pytest.raises(ValueError, match="unknown KL/entropy aggregation 'mean'; valid: token-mean, "
                                         "seq-mean-token-mean, policy"):
        policy_loss(**_two_actions(), kl_entropy_agg="mean")

    class Declared:
        ratio_mode, loss_agg, needs_critic = "sequence", "seq-mean-token-mean", False

    with pytest.raises(ValueError, match="optim.kl_entropy_agg must be one of token-mean, seq-mean-token-mean, "
                                         "policy, got 'verl'"):
        GenerateUpdater(tiny_policy(), Declared(), OptimConfig(kl_entropy_agg="verl"))


# Produced once, offline, from verl's own functions (volcengine/verl at b178a3cd5, Jan 2026,
# verl/trainer/ppo/core_algos.py: compute_policy_loss_gspo, compute_policy_loss_vanilla, agg_loss,
# kl_penalty(..., "low_var_kl")), exec'd in a scratch directory with torch 2.13 in float64 on exactly the
# inputs of _verl_inputs(), clip_ratio_low 0.2, clip_ratio_high 0.28, clip_ratio_c 3, loss_agg_mode
# "token-mean" (verl's default; GSPO forces seq-mean-token-mean on its policy term), and the total
# pg - 0.001 * entropy + 0.01 * kl as verl's dp_actor.update_policy builds it. verl divides a sequence's
# token sum by (|a| + 1e-8) and a masked mean by (count + 1e-8), a relative difference of ~1e-8 from
# the exact means here, hence rel=1e-7.
VERL = {
    "sequence": {
        "pg": 5506.016769076038, "kl": 3.0287704310029326, "entropy": 1.235, "total": 5506.045821780349,
        "clipfrac": 0.3999999996, "dual_clipfrac": 0.0,
        "grad": [[-0.105018194741, -0.104913023823, -0.104583343869, -0.104913023823],
                 [0.0, 0.000259181779318, 0.0, 0.0], [0.0, -0.0006487212707, -0.00022140275816, 0.0],
                 [-5.1271096376e-05, 0.0, 0.0, 0.0]],
    },
    "token": {
        "pg": -0.0065850971561214776, "kl": 3.0287704310029326, "entropy": 1.235, "total": 0.02246760715390785,
        "clipfrac": 0.3999999996, "dual_clipfrac": 0.1999999998,
        "grad": [[-0.000105170918076, -0.122809612962, -0.165445957757, 0.0],
                 [0.0, 0.000259181779318, 0.0, 0.0], [0.066586059715, 0.0707653725312, -0.00022140275816, 0.0],
                 [-5.1271096376e-05, 0.0, 0.0, 0.0]],
    },
}


def _verl_inputs():
    f64 = dict(dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]], **f64)
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [-0.2, -0.1, 0, 0], [-4.0, -1.0, -2.0, 0], [-0.7, 0, 0, 0]], **f64)
    # new - old: a clamped sequence (mean 12), one far below (-10.01), token ratios beyond the dual clip
    delta = torch.tensor([[0.3, -0.2, 0.1, 0.25], [11.0, 13.0, 0, 0], [-0.05, 0.02, -30.0, 0], [0.5, 0, 0, 0]],
                         **f64)
    # ref - new: k3 clamped at 10 (3.0, 25.0, -21.0) and ordinary tokens
    ref_shift = torch.tensor([[0.1, 3.0, -0.4, 25.0], [0.0, -0.3, 0, 0], [-21.0, 0.5, 0.2, 0], [0.05, 0, 0, 0]],
                             **f64)
    adv = torch.tensor([1.5, -1.0, -0.7, 1.0], **f64)
    entropy = torch.tensor([[1.0, 2.0, 0.5, 0.25], [3.0, 1.0, 0, 0], [0.1, 0.2, 0.3, 0], [4.0, 0, 0, 0]], **f64)
    return mask, old, delta, ref_shift, adv, entropy


@pytest.mark.parametrize(("ratio_mode", "loss_agg"), [("sequence", "seq-mean-token-mean"), ("token", "token-mean")])
def test_whole_loss_and_gradient_match_verl(ratio_mode, loss_agg):
    mask, old, delta, ref_shift, adv, entropy = _verl_inputs()
    logp = (old + delta).requires_grad_(True)
    ref = (logp + ref_shift).detach()
    shares = policy_loss(logp, old, ref, entropy, adv, mask, ratio_mode=ratio_mode, loss_agg=loss_agg,
                         denom=Denominators(actions=4, tokens=10), clip_low=0.2, clip_high=0.28, dual_clip=3.0,
                         kl_coef=0.01, entropy_coef=0.001)
    shares.loss.backward()
    want = VERL[ratio_mode]
    got = {"pg": shares.pg_loss, "kl": shares.kl, "entropy": shares.entropy, "total": shares.loss.item(),
           "clipfrac": shares.clipfrac, "dual_clipfrac": shares.dual_clipfrac}
    for key, value in got.items():
        assert value == pytest.approx(want[key], rel=1e-7, abs=1e-12), key
    torch.testing.assert_close(logp.grad, torch.tensor(want["grad"], dtype=torch.float64), rtol=1e-7, atol=1e-12)


def test_aggregate_token_mean_is_the_clip_fraction_denominator():
    # the per-token clip fraction uses the GLOBAL token count, so micro-batch shares add up to the batch value
    clipped = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(clipped, mask, "token-mean", Denominators(actions=4, tokens=8)).item() == pytest.approx(3 / 8)
