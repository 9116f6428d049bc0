"""The error rates of ``gagpo ablate --until-decided`` and of ``gagpo report`` on the shapes RL seeds
take, and the design's power, through the real code (the long version of
tests/sweep/test_sequential_families.py). Prints the Markdown tables of docs/sequential.md.

    OMP_NUM_THREADS=1 python benchmarks/sequential_families.py [--sims 2000] [--tables 1000]
    OMP_NUM_THREADS=1 python benchmarks/sequential_families.py --power [--sims 2000]

Error table: per family of ``gagpo_cli/sweep/families.py`` (no true difference), the share of
simulated sweeps with any false better/worse decision among 5 comparisons sharing one baseline at
cap 20 and cap 10, and withheld (bimodal cells); then the share of report tables (2 rows and the
reference) with any false settled comparison or bold best at 3 / 5 / 10 seeds. The bound is
0.05 + 2 Monte Carlo SE. ``--power``: normal per-seed differences at d = 1 SD, cap 20 (``--max-seeds``), one and five
comparisons: the share of comparisons decided "better" and the mean seeds used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "testkit")]

from family_checks import report_rates, sequential_rates  # noqa: E402

from gagpo_cli.sweep.families import FAMILIES  # noqa: E402
from gagpo_cli.sweep.simulate import simulate  # noqa: E402


def error_table(sims: int, tables: int, families: list[str]) -> None:
    print("| family | --until-decided cap 20: any false (withheld) | cap 10 | report n = 3 / 5 / 10 |")
    print("|---|---|---|---|")
    for family in families:
        cells = []
        for cap in (20, 10):
            rates = sequential_rates(family, comparisons=5, max_seeds=cap, sims=sims, seed=38)
            cells.append(f"{rates.false:.3f} ({rates.withheld:.2f})")
        report = [report_rates(family, rows=2, seeds=n, tables=tables, seed=38).false for n in (3, 5, 10)]
        print(f"| {family} | {cells[0]} | {cells[1]} | {' / '.join(f'{r:.3f}' for r in report)} |", flush=True)
    print(f"\nbound 0.05 + 2 SE: {0.05 + 2 * (0.0475 / sims) ** 0.5:.4f} (sweeps), "
          f"{0.05 + 2 * (0.0475 / tables) ** 0.5:.4f} (tables)")


def power_table(sims: int, max_seeds: int) -> None:
    print(f"| comparisons (d = 1 SD, cap {max_seeds}) | power | mean seeds |")
    print("|---|---|---|")
    for comparisons in (1, 5):
        outcome = simulate([1.0] * comparisons, sims=sims, max_seeds=max_seeds, seed=200 + comparisons)
        print(f"| {comparisons} | {(outcome.status == 'better').mean():.3f} | {outcome.seeds.mean():.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sims", type=int, default=2000)
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--power", action="store_true", help="the power table instead of the error rates")
    parser.add_argument("--max-seeds", type=int, default=20, help="the cap of the power table")
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    args = parser.parse_args()
    if args.power:
        power_table(args.sims, args.max_seeds)
    else:
        error_table(args.sims, args.tables, args.families)


if __name__ == "__main__":
    main()
