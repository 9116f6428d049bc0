#!/usr/bin/env bash
# GPU check: hf / vLLM rollouts with log-prob agreement, DDP and FSDP updates against one process,
# NCCL collectives and bf16 autocast on a tiny random model built in place (no network needed).
# One line per check (PASS / FAIL / SKIP with its figures); exit code 1 when a check fails.
#   bash scripts/gpu_check.sh          # GPU mode where CUDA is visible, else the CPU mode
#   bash scripts/gpu_check.sh --cpu    # CPU mode: gloo instead of NCCL, GPU-only checks SKIP
set -euo pipefail
cd "$(dirname "$0")/.."
export TOKENIZERS_PARALLELISM=false
exec python benchmarks/gpu_check.py "$@"
