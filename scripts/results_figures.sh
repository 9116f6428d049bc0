#!/usr/bin/env bash
# Re-make the figures of docs/results.md from the lab sweeps' run folders:
#   bash scripts/results_figures.sh [RUNS_DIR]      (default: runs)
# It reports each lab table on seeds 0-9 of its sweep (the fixed 10-seed analysis every cell ran
# before any comparison could stop; WebShop: the seeds its cells share) with --figures into
# report/results/<table>/, then copies the figures the page shows into docs/assets/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-runs}"
assets=docs/assets/results
mkdir -p "$assets"

# report_table SWEEP TABLE BASELINE: the fixed-seed report of SWEEP's seeds 0-9 with its figures
report_table() {
  local sweep=$1 table=$2 baseline=$3
  local dirs
  dirs=$(ls -d "$runs/$sweep"/*/s[0-9] 2>/dev/null) || { echo "no runs under $runs/$sweep" >&2; exit 2; }
  # shellcheck disable=SC2086  # one argument per run folder
  gagpo report $dirs --table "$table" --baseline "$baseline" --figures --out "report/results/$sweep"
}

report_table lab-table2-alfworld 2 GAGPO
cp report/results/lab-table2-alfworld/figures/alfworld_bow-mlp_eval_curve_success_rate.png "$assets/table2-alfworld-curves.png"
cp report/results/lab-table2-alfworld/figures/table2_intervals.png "$assets/table2-alfworld-seeds.png"
cp report/results/lab-table2-alfworld/figures/table2_differences.png "$assets/table2-alfworld-differences.png"

report_table lab-table1-webshop 1 GRPO
cp report/results/lab-table1-webshop/figures/webshop_bow-mlp_eval_curve_score.png "$assets/table1-webshop-curves-score.png"
cp report/results/lab-table1-webshop/figures/webshop_bow-mlp_eval_curve_success_rate.png "$assets/table1-webshop-curves-success.png"
cp report/results/lab-table1-webshop/figures/table1_intervals.png "$assets/table1-webshop-seeds.png"
cp report/results/lab-table1-webshop/figures/table1_differences.png "$assets/table1-webshop-differences.png"
echo "figures in $assets"
