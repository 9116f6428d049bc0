"""Ranks agree: the backend follows the policy's device even where CUDA is visible, any rank's stop is
every rank's, and differing values (e.g. the iteration a resume starts from) are refused with one line."""

from __future__ import annotations

import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gagpo_cli.errors import UsageError
from gagpo_cli.train import distributed


def test_backend_follows_the_policy_device():
    assert distributed.backend_for("cpu") == "gloo"
    assert distributed.backend_for(torch.device("cuda", 1)) == "nccl"
    assert distributed.backend_for("cuda") == "nccl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.cuda.is_available = lambda: True  # a GPU host: CUDA visible, the policy on the CPU
    ctx = distributed.init_from_env("cpu", timeout_minutes=1)
    result = {"backend": dist.get_backend(), "stop": distributed.agree_stop(rank == 1, ctx),
              "no_stop": distributed.agree_stop(False, ctx), "same": distributed.agree_same(7, "the iteration", ctx)}
    try:
        distributed.agree_same(10 * rank, "the resume iteration", ctx)
    except UsageError as exc:
        result["refused"] = str(exc)
    distributed.shutdown(ctx)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)


def test_two_ranks_agree_on_stopping_and_refuse_differing_values(tmp_path):
    out = str(tmp_path / "result")
    mp.spawn(_worker, args=(_free_port(), out), nprocs=2, join=True)
    for rank in (0, 1):
        with open(f"{out}.{rank}") as f:
            result = json.load(f)
        assert result["backend"] == "gloo"
        assert result["stop"] is True and result["no_stop"] is False  # rank 1's stop reached rank 0
        assert result["same"] == 7
        assert result["refused"] == "the training processes disagree on the resume iteration (rank 0: 0, rank 1: 10)"
