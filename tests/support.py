"""Helpers several test modules share: the command line run in-process, a bow-mlp away from its start."""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

import torch

from gagpo_cli.app import main
from gagpo_cli.train.learning.generate_update import GenerateSample
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


def random_generate_batch(rows: int, *, value_targets: bool) -> list[GenerateSample]:
    """``rows`` generate-mode update rows (seeded): random prompts and responses of various lengths (row 4
    without a response), advantages, rollout log-probs and, if asked, value targets."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(rows):
        prompt = torch.randint(3, 500, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g).tolist()
        length = 0 if i == 4 else int(torch.randint(1, 7, (1,), generator=g))
        response = torch.randint(3, 500, (length,), generator=g).tolist()
        advantage = float(torch.randn(1, generator=g))
        value_target = float(torch.randn(1, generator=g)) if value_targets else None
        out.append(GenerateSample(prompt, response, advantage=advantage, value_target=value_target,
                                  rollout_logprobs=[-1.0 - 0.1 * j for j in range(length)]))
    return out


def file_tree(root: Path) -> dict[str, tuple[bool, int, int]]:
    """Every path under ``root``: (is folder, size, modification time of a file). A folder's own time
    is left out: a folder created and removed again by a failed start changes its parent's."""
    tree = {}
    for path in root.rglob("*"):
        if "__pycache__" in path.parts:
            continue
        st = path.lstat()
        folder = path.is_dir()
        tree[str(path.relative_to(root))] = (folder, 0 if folder else st.st_size, 0 if folder else st.st_mtime_ns)
    return tree


def assert_one_error_line(code: int, out: str, err: str, words: tuple[str, ...] | list[str] = ()) -> None:
    """The bad-input contract: exit code 2, exactly one ``error: ...`` line on stderr naming every one
    of ``words``, and no traceback anywhere."""
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1, err
    assert "Traceback" not in out + err
    assert lines[0].startswith("error: "), lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])


def saved_bytes(forward) -> int:
    """Bytes of the distinct storages ``forward()`` saves for backward (its result freed after)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    del out
    return sum(seen.values())
