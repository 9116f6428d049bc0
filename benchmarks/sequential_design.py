"""Power and seeds spent of ``gagpo ablate --until-decided`` (the group-sequential design of
``stats/group_sequential.py``, the sign-flip test) against the fixed-n paired t-test with the same maximum,
through the whole decision loop with the toy trainer of ``gagpo_cli/sweep/simulate.py``: one cell
against the baseline, per-seed differences N(effect, 1), so the effect is in units of the per-seed
difference SD. Prints the Markdown table of docs/sequential.md.

    OMP_NUM_THREADS=1 python benchmarks/sequential_design.py [--sims 2000] [--max-seeds 20]
    OMP_NUM_THREADS=1 python benchmarks/sequential_design.py --null [--sims 4000]

``--null``: the family-wise rate of wrong better/worse decisions between identical cells, for the
design and for a fixed-n paired t-test at the same level applied at every round (peeking).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

import scipy.stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gagpo_cli.sweep.simulate import simulate  # noqa: E402
from stats import group_sequential as gs  # noqa: E402

EFFECTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


@functools.lru_cache
def _t_quantile(alpha: float, n: int) -> float:
    return float(scipy.stats.t.isf(alpha / 2, n - 1))


def _t_rule(design, differences, critical: float):
    """The paired t-test of ``differences`` against |t| >= ``critical``, as a look of the loop."""
    n = differences.size
    sd = float(differences.std(ddof=1))
    z = gs.self_normalised(differences)
    look = gs.Look(n, float(differences.mean()), sd, z, gs.z_of(critical, n))
    if not math.isfinite(critical) or abs(look.t) < critical:
        return look, None
    return look, ("better" if look.t > 0 else "worse")


def fixed_n(max_seeds: int):
    """The fixed-n design as a rule: no decision before ``max_seeds``, then the paired t-test."""
    def rule(design, looks, differences):
        n = looks[-1]
        return _t_rule(design, differences, _t_quantile(design.alpha_each, n) if n == max_seeds else math.inf)
    return rule


def peeking(design, looks, differences):
    """The paired t-test at level alpha_each applied at every look, as if each were the only one."""
    return _t_rule(design, differences, _t_quantile(design.alpha_each, looks[-1]))


def null_table(sims: int) -> None:
    print("| comparisons | --max-seeds | --until-decided: any wrong better/worse | t-test peeking every round |")
    print("|---|---|---|---|")
    for comparisons, max_seeds in ((1, 20), (1, 10), (2, 10), (3, 20)):
        rates = []
        for rule in (None, peeking):
            outcome = simulate([0.0] * comparisons, sims=sims, max_seeds=max_seeds, seed=42, rule=rule)
            rates.append(float(((outcome.status == "better") | (outcome.status == "worse")).any(axis=1).mean()))
        print(f"| {comparisons} | {max_seeds} | {rates[0]:.4f} | {rates[1]:.4f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sims", type=int, default=2000)
    parser.add_argument("--max-seeds", type=int, default=20)
    parser.add_argument("--min-effect", type=float, default=1.0)
    parser.add_argument("--null", action="store_true", help="the error rates under no difference")
    args = parser.parse_args()
    if args.null:
        null_table(args.sims)
        return
    n = args.max_seeds
    print(f"| effect (SD of the per-seed difference) | sequential: power | mean seeds | with --min-effect "
          f"{args.min_effect:g}: power | mean seeds | 'no difference' | fixed n = {n}: power | seeds |")
    print("|---|---|---|---|---|---|---|---|")
    for i, effect in enumerate(EFFECTS):
        seq = simulate([effect], sims=args.sims, max_seeds=n, seed=100 + i)
        fut = simulate([effect], sims=args.sims, max_seeds=n, seed=100 + i, min_effect=args.min_effect)
        fix = simulate([effect], sims=args.sims, max_seeds=n, seed=100 + i, rule=fixed_n(n))
        decided = "better" if effect > 0 else ("better", "worse")

        def share(outcome, status=decided):
            return float(sum((outcome.status[:, 0] == s).mean() for s in ([status] if isinstance(status, str)
                                                                           else status)))
        print(f"| {effect:g} | {share(seq):.3f} | {seq.seeds.mean():.1f} | {share(fut):.3f} | {fut.seeds.mean():.1f} "
              f"| {share(fut, 'no difference'):.3f} | {share(fix):.3f} | {fix.seeds.mean():.0f} |", flush=True)


if __name__ == "__main__":
    main()
