#!/usr/bin/env bash
# Install gagpo (editable) into the current Python environment.
#   bash scripts/setup.sh          the toolkit
#   bash scripts/setup.sh dev      plus the test tools (pytest, hypothesis, ruff)
#   bash scripts/setup.sh dev,ray  any extras of pyproject.toml, comma-separated
# torch is installed first when missing, pinned by GAGPO_TORCH (default torch==2.13.0, the CPU
# build on the project's machines); an existing torch is kept as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if ! python -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing ${GAGPO_TORCH:-torch==2.13.0} first"
  python -m pip install --disable-pip-version-check "${GAGPO_TORCH:-torch==2.13.0}"
fi
python -m pip install --disable-pip-version-check -e ".${extras:+[$extras]}"
