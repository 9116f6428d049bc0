#!/usr/bin/env bash
# Re-make the figures of docs/results.md from the lab sweeps' run folders:
#   bash scripts/results_figures.sh [RUNS_DIR [SWEEP ...]]    (default: runs, every sweep below)
# It reports each lab table on seeds 0-9 of its sweep (the fixed 10-seed analysis every cell ran
# before any comparison could stop) with --figures into report/results/<sweep>/, then copies the
# figures the page shows into docs/assets/results/. Naming sweeps re-makes only theirs.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-runs}"
shift || true
assets=docs/assets/results
mkdir -p "$assets"

# draw SWEEP TABLE BASELINE FIGURE:ASSET ...: the fixed-seed report of SWEEP's seeds 0-9, then each
# FIGURE of report/results/SWEEP/figures/ copied to docs/assets/results/ASSET
draw() {
  local sweep=$1 table=$2 baseline=$3
  shift 3
  local dirs
  dirs=$(ls -d "$runs/$sweep"/*/s[0-9] 2>/dev/null) || { echo "no runs under $runs/$sweep" >&2; exit 2; }
  # shellcheck disable=SC2086  # one argument per run folder
  gagpo report $dirs --table "$table" --baseline "$baseline" --figures --out "report/results/$sweep"
  local pair
  for pair in "$@"; do
    cp "report/results/$sweep/figures/${pair%%:*}" "$assets/${pair#*:}"
  done
}

sweeps=("$@")
[ ${#sweeps[@]} -gt 0 ] || sweeps=(lab-table2-alfworld lab-table1-webshop lab-table1-alfworld)
for sweep in "${sweeps[@]}"; do
  case "$sweep" in
    lab-table2-alfworld) draw "$sweep" 2 GAGPO \
      alfworld_bow-mlp_eval_curve_success_rate.png:table2-alfworld-curves.png \
      table2_intervals.png:table2-alfworld-seeds.png \
      table2_differences.png:table2-alfworld-differences.png ;;
    lab-table1-webshop) draw "$sweep" 1 GRPO \
      webshop_bow-mlp_eval_curve_score.png:table1-webshop-curves-score.png \
      webshop_bow-mlp_eval_curve_success_rate.png:table1-webshop-curves-success.png \
      table1_intervals.png:table1-webshop-seeds.png \
      table1_differences.png:table1-webshop-differences.png ;;
    lab-table1-alfworld) draw "$sweep" 1 GRPO \
      alfworld_bow-mlp_eval_curve_success_rate.png:table1-alfworld-curves.png \
      table1_intervals.png:table1-alfworld-seeds.png \
      table1_differences.png:table1-alfworld-differences.png ;;
    *) echo "unknown sweep '$sweep': one of lab-table2-alfworld, lab-table1-webshop, lab-table1-alfworld" >&2
       exit 2 ;;
  esac
done
echo "figures in $assets"
