"""Helpers several test modules share: the command line run in-process, a bow-mlp away from its start."""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock

import torch

from gagpo_cli.app import main
from gagpo_cli.train.policies.bow_mlp import FeaturisedPolicy


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """``gagpo ARGS`` through ``gagpo_cli.app.main`` in this process, tables 200 columns wide:
    (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["gagpo", *args]
    try:
        with mock.patch.dict(os.environ, {"COLUMNS": "200"}), redirect_stdout(out), redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


def perturbed_bow_mlp() -> FeaturisedPolicy:
    """A seed-0 ``bow-mlp`` with every weight moved a little (seeded) away from the all-zero output start,
    so every loss term has a gradient."""
    policy = FeaturisedPolicy(seed=0)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return policy
