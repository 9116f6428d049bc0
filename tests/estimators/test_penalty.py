"""The estimator option ``penalty`` and ``StepBatch.penalties`` (docs/algorithms.md#rewards-and-penalties),
on a hand-worked batch.

One rollout group, gamma = 0.5 (easy arithmetic), environment rewards r and penalties p:

    traj 0: states s, x, y   r = [0, 0, 10]   p = [0, 0.1, 0]   (penalised middle step, then a win)
    traj 1: states s, x      r = [0, 0]       p = [0.1, 0]      (penalised first step, a loss)

``reward`` rule (the penalty is a reward: r' = r - p, summed and discounted):
    traj 0: r' = [0, -0.1, 10] -> R = [0.5 * 4.9, -0.1 + 0.5 * 10, 10] = [2.45, 4.9, 10]; score 9.9
    traj 1: r' = [-0.1, 0]     -> R = [-0.1, 0];                                          score -0.1
``verl`` rule (verl-agent's apply_invalid_action_penalty: from environment rewards, then each row's own
score and own R_t minus its own penalty):
    traj 0: R_env = [2.5, 5, 10]  -> R = [2.5, 4.9, 10]; scores per row [10, 9.9, 10]
    traj 1: R_env = [0, 0]        -> R = [-0.1, 0];      scores per row [-0.1, 0]
The two rules differ on row (0, 0): R 2.45 vs 2.5 (the reward rule discounts the step-1 penalty back).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimators import StepBatch, available_estimators, get_estimator
from estimators.penalty import scores, step_returns

# rows deliberately out of order (docs/algorithms.md#step-batch: never assume sorted)
ROWS = [  # (traj, step, reward, penalty, state)
    (1, 1, 0.0, 0.0, "x"),
    (0, 2, 10.0, 0.0, "y"),
    (0, 0, 0.0, 0.0, "s"),
    (1, 0, 0.0, 0.1, "s"),
    (0, 1, 0.0, 0.1, "x"),
]
KEYS = [(t, s) for t, s, *_ in ROWS]


def batch(values: list[float] | None = None) -> StepBatch:
    traj, step, reward, penalty, state = (list(c) for c in zip(*ROWS, strict=True))
    return StepBatch(group_ids=[7] * len(ROWS), traj_ids=traj, step_index=step, rewards=reward,
                     terminated=[False] * len(ROWS), state_keys=state, values=values, penalties=penalty)


def by_key(values: np.ndarray) -> dict[tuple[int, int], float]:
    return {k: float(v) for k, v in zip(KEYS, values, strict=True)}


def expect(got: np.ndarray, want: dict[tuple[int, int], float]) -> None:
    got_by_key = by_key(got)
    for key, value in want.items():
        assert got_by_key[key] == pytest.approx(value, abs=1e-12), key


def test_returns_and_scores_under_each_rule():
    b = batch()
    for mode, want_r, want_score in (
        ("reward", {(0, 0): 2.45, (0, 1): 4.9, (0, 2): 10.0, (1, 0): -0.1, (1, 1): 0.0},
         {(0, 0): 9.9, (0, 1): 9.9, (0, 2): 9.9, (1, 0): -0.1, (1, 1): -0.1}),
        ("verl", {(0, 0): 2.5, (0, 1): 4.9, (0, 2): 10.0, (1, 0): -0.1, (1, 1): 0.0},
         {(0, 0): 10.0, (0, 1): 9.9, (0, 2): 10.0, (1, 0): -0.1, (1, 1): 0.0}),
    ):
        expect(b.layout.to_rows(step_returns(b, 0.5, mode)), want_r)
        row_score, _ = scores(b, mode)
        expect(b.layout.to_rows(row_score), want_score)


def test_verl_penalty_reaches_no_other_row():
    # raising one row's penalty changes that row's own R_t and score by exactly the same amount, nothing else
    base = batch()
    traj, step, reward, penalty, state = (list(c) for c in zip(*ROWS, strict=True))
    penalty[1] = 2.0  # row (0, 2), the winning step
    bumped = StepBatch(group_ids=[7] * 5, traj_ids=traj, step_index=step, rewards=reward,
                       terminated=[False] * 5, state_keys=state, penalties=penalty)
    for before, after in (
        (step_returns(base, 0.5, "verl"), step_returns(bumped, 0.5, "verl")),
        (scores(base, "verl")[0], scores(bumped, "verl")[0]),
    ):
        diff = base.layout.to_rows(after) - base.layout.to_rows(before)
        assert diff.tolist() == [0.0, -2.0, 0.0, 0.0, 0.0]
    # under the reward rule the same penalty is discounted back: R of (0, 0) drops by 0.5^2 * 2 = 0.5
    diff = base.layout.to_rows(step_returns(bumped, 0.5, "reward") - step_returns(base, 0.5, "reward"))
    assert diff.tolist() == pytest.approx([0.0, -2.0, -0.5, 0.0, -1.0])


def test_gigpo_verl_hand_worked():
    # mean_norm, omega 1. Episode term: row score - mean of the 5 row scores (10, 9.9, 10, -0.1, 0) = 29.8 / 5 = 5.96
    #   traj 0: [4.04, 3.94, 4.04]; traj 1: [-6.06, -5.96]
    # step term: R - mean R of the anchor group: s: {2.5, -0.1} mean 1.2 -> +1.3 / -1.3;
    #   x: {4.9, 0} mean 2.45 -> +2.45 / -2.45; y: singleton -> 0
    adv = get_estimator("gigpo", gamma=0.5, mode="mean_norm", penalty="verl").compute(batch())
    expect(adv, {(0, 0): 4.04 + 1.3, (0, 1): 3.94 + 2.45, (0, 2): 4.04, (1, 0): -6.06 - 1.3, (1, 1): -5.96 - 2.45})
    # mean_std_norm: episode std over the 5 row scores, deviations [4.04, 3.94, 4.04, -6.06, -5.96];
    # step std: s: |2.5 - (-0.1)| / sqrt(2) = 2.6 / sqrt 2 -> +-1.3 / (1.8385 + eps) = +-0.70711; same +-0.70711 for x
    ep_std = math.sqrt((4.04**2 + 3.94**2 + 4.04**2 + 6.06**2 + 5.96**2) / 4)
    s_std, x_std = 2.6 / math.sqrt(2), 4.9 / math.sqrt(2)
    adv = get_estimator("gigpo", gamma=0.5, penalty="verl").compute(batch())
    expect(adv, {
        (0, 0): 4.04 / (ep_std + 1e-6) + 1.3 / (s_std + 1e-6),
        (0, 1): 3.94 / (ep_std + 1e-6) + 2.45 / (x_std + 1e-6),
        (0, 2): 4.04 / (ep_std + 1e-6),
        (1, 0): -6.06 / (ep_std + 1e-6) - 1.3 / (s_std + 1e-6),
        (1, 1): -5.96 / (ep_std + 1e-6) - 2.45 / (x_std + 1e-6),
    })


def test_gagpo_verl_hand_worked():
    # verl: R = [2.5, 4.9, 10 | -0.1, 0] feeds V: V(s) = (2.5 - 0.1) / 2 = 1.2, V(x) = (4.9 + 0) / 2 = 2.45, V(y) = 10
    # TD residual with r - p: traj 0: 0 + 0.5 * 2.45 - 1.2 = 0.025; -0.1 + 0.5 * 10 - 2.45 = 2.45; 10 - 10 = 0
    #                         traj 1: -0.1 + 0.5 * 2.45 - 1.2 = -0.075; 0 - 2.45 = -2.45
    # GAE with gamma * lam = 0.25: traj 0: [0.025 + 0.25 * 2.45, 2.45, 0]; traj 1: [-0.075 - 0.25 * 2.45, -2.45]
    adv = get_estimator("gagpo-no-norm", gamma=0.5, lam=0.5, penalty="verl").compute(batch())
    expect(adv, {(0, 0): 0.6375, (0, 1): 2.45, (0, 2): 0.0, (1, 0): -0.6875, (1, 1): -2.45})
    # reward: R = [2.45, 4.9, 10 | -0.1, 0], V(s) = 1.175; delta traj 0: 0 + 1.225 - 1.175 = 0.05, 2.45, 0
    #         traj 1: -0.1 + 1.225 - 1.175 = -0.05, -2.45 -> GAE [0.05 + 0.6125, 2.45, 0], [-0.05 - 0.6125, -2.45]
    adv = get_estimator("gagpo-no-norm", gamma=0.5, lam=0.5).compute(batch())
    expect(adv, {(0, 0): 0.6625, (0, 1): 2.45, (0, 2): 0.0, (1, 0): -0.6625, (1, 1): -2.45})
    # gagpo-mc under verl: the adjusted R minus V: traj 0: [2.5 - 1.2, 4.9 - 2.45, 0]; traj 1: [-1.3, -2.45]
    adv = get_estimator("gagpo-mc", gamma=0.5, norm="none", penalty="verl").compute(batch())
    expect(adv, {(0, 0): 1.3, (0, 1): 2.45, (0, 2): 0.0, (1, 0): -1.3, (1, 1): -2.45})


def test_grpo_and_rloo_verl_hand_worked():
    # grpo stats=trajectory, verl: population = environment scores {10, 0}: mean 5, std sqrt(50); row scores
    # [10, 9.9, 10 | -0.1, 0] -> (score - 5) / (sqrt 50 + eps)
    adv = get_estimator("grpo", stats="trajectory", penalty="verl").compute(batch())
    d = math.sqrt(50) + 1e-6
    expect(adv, {(0, 0): 5 / d, (0, 1): 4.9 / d, (0, 2): 5 / d, (1, 0): -5.1 / d, (1, 1): -5 / d})
    # grpo stats=steps, verl: population = the 5 row scores (as verl-agent): mean 5.96
    adv = get_estimator("grpo", penalty="verl").compute(batch())
    ep_std = math.sqrt((4.04**2 + 3.94**2 + 4.04**2 + 6.06**2 + 5.96**2) / 4) + 1e-6
    expect(adv, {(0, 0): 4.04 / ep_std, (0, 1): 3.94 / ep_std, (1, 0): -6.06 / ep_std})
    # rloo, verl: A = env score - the other's env score (10 - 0, 0 - 10), then each row minus its own penalty
    expect(get_estimator("rloo", penalty="verl").compute(batch()),
           {(0, 0): 10.0, (0, 1): 9.9, (0, 2): 10.0, (1, 0): -10.1, (1, 1): -10.0})
    # rloo, reward: scores 9.9 and -0.1 -> +-10 on every row
    expect(get_estimator("rloo").compute(batch()),
           {(0, 0): 10.0, (0, 1): 10.0, (0, 2): 10.0, (1, 0): -10.0, (1, 1): -10.0})


def test_grpo_trajectory_verl_zero_spread_gives_zero():
    # both trajectories score 0 in the environment: zero spread -> 0 even on the penalised rows
    # (docs/algorithms.md#baselines edge rule; -0.1 / eps would be -1e5)
    traj, step, _, penalty, state = (list(c) for c in zip(*ROWS, strict=True))
    b = StepBatch(group_ids=[7] * 5, traj_ids=traj, step_index=step, rewards=[0.0] * 5,
                  terminated=[False] * 5, state_keys=state, penalties=penalty)
    assert get_estimator("grpo", stats="trajectory", penalty="verl").compute(b).tolist() == [0.0] * 5


def test_ppo_verl_hand_worked():
    # V_phi = 0 everywhere, lam = 1: GAE = discounted return. verl: from environment rewards, then minus the row's
    # own penalty -> traj 0: [2.5, 5 - 0.1, 10], traj 1: [0 - 0.1, 0]; reward: [2.45, 4.9, 10], [-0.1, 0]
    b = batch(values=[0.0] * 5)
    out = get_estimator("ppo", gamma=0.5, lam=1.0, penalty="verl").compute_output(b)
    expect(out.advantages, {(0, 0): 2.5, (0, 1): 4.9, (0, 2): 10.0, (1, 0): -0.1, (1, 1): 0.0})
    expect(out.returns, {(0, 0): 2.5, (0, 1): 4.9, (0, 2): 10.0, (1, 0): -0.1, (1, 1): 0.0})
    out = get_estimator("ppo", gamma=0.5, lam=1.0).compute_output(b)
    expect(out.advantages, {(0, 0): 2.45, (0, 1): 4.9, (0, 2): 10.0, (1, 0): -0.1, (1, 1): 0.0})


def _random_batch(rng: np.random.Generator, n_groups: int = 4, k: int = 5):
    """Rows as the trainer makes them: rewards = 10 x won at the last step, penalties 0.1 x malformed."""
    rows = []
    for g in range(n_groups):
        for i in range(k):
            length = int(rng.integers(1, 7))
            won = bool(rng.random() < 0.5)
            for t in range(length):
                rows.append((g, g * k + i, t, 10.0 * float(won and t == length - 1), 0.1 * float(rng.random() < 0.3),
                             f"s{rng.integers(0, 4)}", float(rng.normal())))
    rng.shuffle(rows)
    return [list(c) for c in zip(*rows, strict=True)]


def _optional_inputs(n: int) -> dict:
    rng = np.random.default_rng(4)
    return {"response_lengths": rng.integers(1, 60, n), "entropies": rng.random(n) * 2.0,
            "iteration": 3, "total_iterations": 10}


@pytest.mark.parametrize("name", sorted(available_estimators()))
def test_reward_rule_is_the_penalty_folded_into_rewards_bit_for_bit(name):
    # `reward` (the default) with penalties apart gives exactly the numbers of the old rows, whose reward was
    # success_reward * won - invalid_penalty * malformed (the same float operations)
    g, tr, st, r, p, s, v = _random_batch(np.random.default_rng(3))
    values = v if get_estimator(name).needs_critic else None
    inputs = _optional_inputs(len(g))  # what some estimators also read (Estimator.requires)
    apart = StepBatch(group_ids=g, traj_ids=tr, step_index=st, rewards=r, terminated=[False] * len(g),
                      state_keys=s, values=values, penalties=p, **inputs)
    folded = StepBatch(group_ids=g, traj_ids=tr, step_index=st, rewards=[a - b for a, b in zip(r, p, strict=True)],
                       terminated=[False] * len(g), state_keys=s, values=values, **inputs)
    # the default options too where the default rule is `reward` (graphgpo's is its recipe's `verl`)
    default_is_reward = get_estimator(name).options.get("penalty", "reward") == "reward"
    for options in ({}, {"penalty": "reward"}) if default_is_reward else ({"penalty": "reward"},):
        est = get_estimator(name, **options)
        assert np.array_equal(est.compute(apart), est.compute(folded))
    # and verl with no penalty at all is the reward rule
    none = StepBatch(group_ids=g, traj_ids=tr, step_index=st, rewards=r, terminated=[False] * len(g),
                     state_keys=s, values=values, **inputs)
    np.testing.assert_allclose(get_estimator(name, penalty="verl").compute(none),
                               get_estimator(name, penalty="reward").compute(none), rtol=0, atol=1e-12)


def test_penalties_are_validated_and_default_to_zero():
    b = StepBatch(group_ids=[0, 0], traj_ids=[0, 1], step_index=[0, 0], rewards=[1.0, 0.0],
                  terminated=[True, True], state_keys=["a", "a"])
    assert b.penalties.tolist() == [0.0, 0.0] and b.net_rewards.tolist() == [1.0, 0.0]
    common = dict(group_ids=[0, 0], traj_ids=[0, 1], step_index=[0, 0], rewards=[1.0, 0.0],
                  terminated=[True, True], state_keys=["a", "a"])
    with pytest.raises(ValueError, match="penalties must be finite"):
        StepBatch(**common, penalties=[0.0, float("nan")])
    with pytest.raises(ValueError, match="length mismatch: group_ids has 2 rows but penalties has 3"):
        StepBatch(**common, penalties=[0.0, 0.1, 0.1])
    with pytest.raises(ValueError, match="penalties must hold numbers"):
        StepBatch(**common, penalties=["0.1", "0"])


def test_bad_penalty_value_lists_the_valid_ones():
    for name in ("gagpo", "gigpo", "grpo", "rloo", "ppo", "gagpo-mc"):
        with pytest.raises(ValueError,
                           match=f"penalty='verl_agent' of estimator '{name}' must be one of: reward, verl"):
            get_estimator(name, penalty="verl_agent")


def test_an_estimator_without_the_penalty_option_sees_penalties_in_rewards():
    # a third-party estimator written against docs/algorithms.md#step-batch (rewards include the penalty)
    # that never heard of StepBatch.penalties: the base class hands it rewards - penalties
    from estimators import Estimator, EstimatorOutput

    class RawRewards(Estimator):
        name = "raw-rewards"
        description = "advantage = the row's reward"

        def _compute(self, batch):
            assert not batch.penalties.any()
            return EstimatorOutput(advantages=np.asarray(batch.rewards, dtype=np.float64))

    b = batch()
    expect(RawRewards().compute(b), {(0, 0): 0.0, (0, 1): -0.1, (0, 2): 10.0, (1, 0): -0.1, (1, 1): 0.0})
    assert b.penalties.tolist() == [0.0, 0.0, 0.0, 0.1, 0.1] and b.rewards.tolist()[3] == 0.0  # untouched
    with pytest.warns(UserWarning, match="'raw-rewards' does not use option 'penalty'"):
        RawRewards(penalty="verl")
