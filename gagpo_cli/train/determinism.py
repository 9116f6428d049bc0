"""``train.deterministic``: the settings under which a CUDA run computes the same numbers again, so that
a resumed run equals the uninterrupted one on a GPU too (on a CPU it does without them).

What it sets: ``torch.use_deterministic_algorithms(True)`` (every op with a deterministic kernel uses
it; an op without one raises, naming itself), cuDNN deterministic with benchmarking off, attention
through flash attention's deterministic backward or the math kernel (the memory-efficient and cuDNN
attention kernels off), and ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (cuBLAS is reproducible only with a
fixed workspace; read when its first handle is made, so it is set before any CUDA work). What it
costs: slower kernels (scatter-add based ones, e.g. the embedding's backward) and, for padded
batches, attention that keeps its (rows x heads x length^2) probabilities for backward. What it does not
promise: equal numbers on another GPU model, driver, library version or process count.
"""

from __future__ import annotations

import os

import torch

CUBLAS_WORKSPACE = ":4096:8"


def cublas_workspace_setting() -> None:
    """Set ``CUBLAS_WORKSPACE_CONFIG`` unless the user set it (must happen before cuBLAS starts)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)


def apply_determinism(enabled: bool) -> None:
    """Turn the deterministic settings (module docstring) on, or leave torch's defaults (off)."""
    if not enabled:
        return
    cublas_workspace_setting()
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # attention: flash attention runs its deterministic backward under this setting; the memory-efficient
    # and cuDNN kernels (padded batches) have none, so those batches take the exact math kernel
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
